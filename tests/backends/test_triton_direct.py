"""The direct launch path (`launch.DirectLaunch`) under the Triton interpreter: kernels bound once to a
runner for their grid give exactly what the step-by-step walk gives, layout steps, arena views and tuned
variants included; inputs it was not bound for, and a Triton whose launch API differs, fall back to the walk.

On CUDA the runner is Triton's compiled binary (`launch.compiled_runner`); here it is the interpreted
function for the same grid, so everything but Triton's own launch is exercised.
"""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

torch = pytest.importorskip("torch", reason="the Triton backend runs on torch tensors")
pytest.importorskip("triton", reason="triton is not installed (pip install 'tilegraph[triton]')")

import tilegraph  # noqa: E402
from tilegraph.backends import reference  # noqa: E402
from tilegraph.backends.triton import launch, tuner, variants  # noqa: E402
from tilegraph.frontends.dsl import parse, parse_file  # noqa: E402

from triton_cases import CASES, EXAMPLES  # noqa: E402

# a concat of more operands than a structured one reads (CONCAT_READS): a torch step
LAYOUT = """def f(x: f32[6, 8], y: f32[6, 4], w: f32[64, 16]) -> (f32[3, 16], f32[6, 32]) {
    let c = concat(x, y, x, y, x, axis=1)
    return reshape(relu(c), shape=[3, 64]) @ w, c * 2.0
}"""


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TILEGRAPH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tilegraph-cache"))


def interpreted(fn, grid, args, warps, stages):
    """The interpreter's stand-in for `compiled_runner`: the function for this grid, launched as is."""
    return fn[(grid,)]


def bound(graph):
    fn = tilegraph.compile(graph, target="triton")
    launcher = fn.launcher()
    draw = lambda seed: launcher.check([torch.from_numpy(a) for a in reference.random_inputs(graph, seed=seed)])  # noqa: E731
    return fn, launcher, draw


def walked(launcher, inputs):
    return launcher._walk(inputs, lambda step, args: launcher._launch(step, args, *launcher.program.configs[step.position]))


@pytest.mark.parametrize("source", [CASES["matmul_epilogue"], CASES["conv_relu"], LAYOUT, CASES["packed_qkv"],
                                    str(EXAMPLES / "mlp.tg")],
                         ids=["matmul_epilogue", "conv_relu", "layout_steps", "reshape_view", "mlp"])
def test_direct_launches_give_what_the_walk_gives(source):
    graph = parse_file(source) if source.endswith(".tg") else parse(source)
    fn, launcher, draw = bound(graph)
    assert launcher.direct is False, "the interpreter's CPU tensors take the walk unless a runner is bound"
    first = draw(0)
    launcher.bind_direct(first, interpreted)
    assert isinstance(launcher.direct, launch.DirectLaunch)
    # new inputs, and a repeat: nothing kept from the last call (the full-size example once: its every interpreted
    # call takes seconds, and the small cases cover the repeat)
    rounds = (first,) if source.endswith(".tg") else (first, draw(1), draw(1))
    calls = []
    for inputs in rounds:
        want = [t.clone() for t in walked(launcher, inputs)]
        calls.append(launcher(*inputs))
        assert all(torch.equal(g, w) for g, w in zip(calls[-1], want))
    outputs = calls[0]
    params = {v.name: a for v, a in fn.params.items()}
    want = reference.run(graph, [t.numpy() for t in first], params=params)
    for got, expected in zip(outputs, want):  # (the first call's outputs, after the later calls)
        torch.testing.assert_close(got, torch.from_numpy(expected), rtol=1e-4, atol=1e-4)
    again = launcher(*first)
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(outputs, again)), "graph outputs are new per call"


def test_layout_steps_and_arena_views_are_bound_once():
    fn, launcher, draw = bound(parse(LAYOUT))
    launcher.bind_direct(draw(0), interpreted)
    direct = launcher.direct
    kinds = [step.run is None for step in direct.steps]
    assert any(kinds) and not all(kinds), "the program has layout steps and kernels"
    arena = fn.generated.arena
    views = [direct._env[i] for step in direct.steps if step.run is not None for i in step.step.writes
             if direct._env[i] is not None]
    assert views and all(v.untyped_storage().data_ptr() == launcher.arena.untyped_storage().data_ptr() for v in views)
    assert len(views) == sum(1 for s, src in zip(launcher.steps, fn.generated.kernels) if src is not None
                             for v in fn.generated.steps[s.position][1] if v in arena.offsets)


def test_misaligned_inputs_take_the_walk():
    graph = parse(CASES["softmax"])
    fn, launcher, draw = bound(graph)
    (x,) = draw(0)
    launcher.bind_direct([x], interpreted)
    storage = torch.empty(x.numel() + 1, dtype=x.dtype)
    shifted = storage[1:].view(x.shape)  # 4 bytes past an aligned start
    shifted.copy_(x)
    assert not launcher.direct.accepts([shifted]) and launcher.direct.accepts([x])
    assert torch.equal(launcher(shifted)[0], launcher(x)[0])


def test_a_launch_api_that_differs_falls_back_with_one_warning():
    fn, launcher, draw = bound(parse(CASES["matmul_epilogue"]))
    inputs = draw(0)

    def broken(*args):
        raise AttributeError("'JITFunction' object has no attribute 'warmup'")

    with pytest.warns(RuntimeWarning, match="launch through triton.jit's dispatch .*warmup"):
        launcher.bind_direct(inputs, broken)
    assert launcher.direct is False and "warmup" in launcher.direct_error
    assert torch.equal(launcher(*inputs)[0], walked(launcher, inputs)[0])


def test_a_tuned_variant_is_bound_with_its_own_function_and_grid():
    graph = parse(CASES["matmul_epilogue"])
    fn, launcher, draw = bound(graph)
    source = fn.generated.kernels[0]
    proposed = variants.dot_variants(fn.program.kernels[0], fn.program.target)
    (_, function, grid), = tuner.variant_functions(fn, 0, source, proposed[1:2])
    tuner.install(fn, tuner.state_of(fn), source, function, grid)
    seen = []

    def recording(f, g, args, warps, stages):
        seen.append((f, g))
        return interpreted(f, g, args, warps, stages)

    inputs = draw(0)
    launcher.bind_direct(inputs, recording)
    assert seen[0] == (function, grid) and grid != source.grid
    want = reference.run(graph, [t.numpy() for t in inputs], params={v.name: a for v, a in fn.params.items()})
    torch.testing.assert_close(launcher(*inputs)[0], torch.from_numpy(want[0]), rtol=1e-4, atol=1e-4)
    tuner.install(fn, tuner.state_of(fn), source)
