"""The library call (`library.py`): a kernel that is one matmul (and a bias or residual add) run by
torch.matmul / torch.addmm, a candidate the tuner times beside the block-size variants. On the CPU torch runs it on
the interpreter's tensors, so what it computes (packed weights read back unpermuted, batched rows, the add) is
checked here against the reference; the tuning flow runs with the device's timer replaced by a table."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402

torch = pytest.importorskip("torch", reason="the Triton backend runs on torch tensors")
triton = pytest.importorskip("triton", reason="triton is not installed (pip install 'tilegraph[triton]')")

from hypothesis import given, settings, strategies as st  # noqa: E402

import tilegraph  # noqa: E402
from tilegraph.backends import reference  # noqa: E402
from tilegraph.backends.triton import autotune, launch, library, library_conv, tuner  # noqa: E402
from tilegraph.frontends.dsl import parse  # noqa: E402

from triton_cases import CASES, assert_same  # noqa: E402


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEGRAPH_CACHE_DIR", str(tmp_path / "tilegraph-cache"))


class Block(torch.nn.Module):
    """Linears as a transformer has them: with a bias, without, a gated product (its SiLU and product the library
    call's fused epilogue)."""

    def __init__(self, width: int = 48, hidden: int = 80) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(width, width)
        self.out = torch.nn.Linear(width, width, bias=False)
        self.gate = torch.nn.Linear(width, hidden, bias=False)
        self.up = torch.nn.Linear(width, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, width, bias=False)

    def forward(self, x):
        h = self.out(self.qkv(x))
        return self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


def block_program(dtype=torch.float32):
    from tilegraph.frontends.fx import from_module

    torch.manual_seed(0)
    model = Block().eval().to(dtype)
    x = torch.randn(2, 24, 48, dtype=dtype)
    with torch.no_grad():
        graph = from_module(model, (x,))
    return graph, tilegraph.compile(graph, target="triton")


def calls(fn) -> dict[int, library.LibraryCall]:
    found = {}
    for position, source in enumerate(fn.generated.kernels):
        if source is not None:
            call = tuner.library_candidate(fn, position, source)
            if call is not None:
                found[position] = call
    return found


def expected(graph, inputs):
    """The reference on the graph's own weights (carried from the module)."""
    return reference.run(graph, inputs)


def test_which_kernels_are_library_calls():
    graph, fn = block_program()
    found = calls(fn)
    ops = {position: [n.op for n in fn.program.kernels[position].nodes if n.op != "reshape"] for position in found}
    dots = [p for p, s in enumerate(fn.generated.kernels) if s is not None and s.uses_dot]
    assert set(found) == set(dots)
    assert sorted(ops.values()) == [["matmul"], ["matmul"], ["matmul"], ["matmul", "add"], ["matmul", "silu", "mul"]]
    assert any(call.c is not None for call in found.values()), "a bias add rides along (addmm's)"
    (gated,) = [call for call in found.values() if call.epilogue]
    assert [step.op for step in gated.epilogue] == ["silu", "mul"] and gated.epilogue[1].other is not None
    assert gated.fused is not None and "tl.sigmoid(" in gated.fused.text, "SiLU and product: one generated pass"
    assert all(call.fused is None for call in found.values() if call is not gated)
    assert any(n.op == "reshape" for p in found for n in fn.program.kernels[p].nodes), "reshapes of rows ride along"
    for source in ("attention", "softmax"):
        other = tilegraph.compile(parse(CASES[source]), target="triton")
        assert not calls(other), source
    (conv,) = calls(tilegraph.compile(parse(CASES["conv_relu"]), target="triton")).values()
    assert isinstance(conv, library_conv.ConvCall) and "tl.maximum(" in conv.epilogue.text, "ReLU generated"


@pytest.mark.parametrize("body, library", [
    ("gelu(x @ w + b)", True), ("relu(x @ w) * b", True), ("b - tanh(x @ w)", True),
    ("(x @ w) * 2.0", False),  # a constant is not a kernel argument
    ("exp(relu(sigmoid(x @ w)))", False),  # more than MAX_EPILOGUE ops
    ("x @ w + b + b", True),  # the second add is an epilogue op
    ("silu(x @ w + b) * b", True),  # addmm's add, then two ops generated as one pass
])
def test_epilogues_a_library_call_applies(body, library):
    """Which epilogues a library call takes, and what it computes with them: one op in place (a torch kernel), two
    as one generated kernel over the product (`fused`)."""
    graph = parse(f"def f(x: f32[20, 24], w: f32[24, 16], b: f32[16]) -> f32[20, 16] {{ return {body} }}")
    fn = tilegraph.compile(graph, target="triton")
    found = calls(fn)
    assert bool(found) == library, [n.op for k in fn.program.kernels for n in k.nodes]
    for position, call in found.items():
        assert (call.fused is not None) == (len(call.epilogue) == 2), body
        source = fn.generated.kernels[position]
        tuner.install(fn, tuner.state_of(fn), source, call, source.grid)
    inputs = reference.random_inputs(graph)
    assert_same(fn(*inputs), reference.run(graph, inputs), [v.type for v in graph.outputs])


def test_integer_and_mixed_products_are_not_library_calls():
    fn = tilegraph.compile(parse("def f(a: i32[8, 8], b: i32[8, 8]) -> i32[8, 8] { return a @ b }"),
                           target="triton")
    assert not calls(fn)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_library_calls_compute_what_the_kernels_compute(dtype):
    graph, fn = block_program(dtype)
    if dtype == torch.bfloat16:  # tensor-core dots read their weights packed K-major: read back unpermuted
        assert any(o.unpermute is not None for call in calls(fn).values() for o in (call.a, call.b))
    inputs = reference.random_inputs(graph)
    generated = fn(*inputs)
    state = tuner.state_of(fn)
    for position, call in calls(fn).items():
        tuner.install(fn, state, fn.generated.kernels[position], call, fn.generated.kernels[position].grid)
    got = fn(*inputs)
    types = [v.type for v in graph.outputs]
    assert_same(got, generated, types)
    assert_same(got, expected(graph, inputs), types)
    report = fn.report()
    assert report.count("library call (torch.matmul") == len(calls(fn))


@given(m=st.integers(1, 40), n=st.integers(1, 40), k=st.integers(1, 40), batch=st.integers(0, 2),
       add=st.sampled_from(["none", "row", "whole"]))
@settings(max_examples=20, deadline=None)
def test_any_matmul_and_add_runs_as_a_library_call(m, n, k, batch, add):
    rows = f"[{batch}, {m}, {k}]" if batch else f"[{m}, {k}]"
    out = f"[{batch}, {m}, {n}]" if batch else f"[{m}, {n}]"
    extra = {"none": "", "row": f", c: f32[{n}]", "whole": f", c: f32{out}"}[add]
    body = "a @ b" + ("" if add == "none" else " + c")
    graph = parse(f"def f(a: f32{rows}, b: f32[{k}, {n}]{extra}) -> f32{out} {{ return {body} }}")
    fn = tilegraph.compile(graph, target="triton")
    found = calls(fn)
    assert len(found) == 1
    (position, call), = found.items()
    source = fn.generated.kernels[position]
    tuner.install(fn, tuner.state_of(fn), source, call, source.grid)
    inputs = reference.random_inputs(graph)
    assert_same(fn(*inputs), reference.run(graph, inputs), [v.type for v in graph.outputs])


@pytest.mark.parametrize("signature, body", [
    ("b: f32[16]) -> f32[1, 20, 16]", "gelu(reshape(x @ w + b, shape=[1, 20, 16]))"),  # GPT-2's MLP-up at batch 1
    ("b: f32[16]) -> f32[1, 20, 16]", "relu(reshape(x @ w, shape=[1, 20, 16]) * b)"),  # the other operand broadcasts
    ("b: f32[20, 1, 16]) -> f32[20, 1, 16]", "b - tanh(reshape(x @ w, shape=[20, 1, 16]))"),
])
def test_a_library_call_applies_its_epilogue_through_reshapes(signature, body):
    graph = parse(f"def f(x: f32[20, 24], w: f32[24, 16], {signature} {{ return {body} }}")
    fn = tilegraph.compile(graph, target="triton")
    found = calls(fn)
    assert len(found) == 1, [[n.op for n in k.nodes] for k in fn.program.kernels]
    (position, call), = found.items()
    assert call.epilogue
    source = fn.generated.kernels[position]
    tuner.install(fn, tuner.state_of(fn), source, call, source.grid)
    inputs = reference.random_inputs(graph)
    assert_same(fn(*inputs), reference.run(graph, inputs), [v.type for v in graph.outputs])


def test_a_direct_launch_runs_the_library_call_without_compiling():
    graph, fn = block_program()
    for position, call in calls(fn).items():
        source = fn.generated.kernels[position]
        tuner.install(fn, tuner.state_of(fn), source, call, source.grid)
        assert launch.compiled_runner(call, source.grid, [], 4, 3) is call
    launcher = fn.launcher()
    inputs = launcher.check([torch.from_numpy(a) for a in reference.random_inputs(graph)])
    launcher.bind_direct(inputs, lambda f, grid, args, warps, stages: launch.compiled_runner(f, grid, args, warps, stages)
                         if isinstance(f, library.LibraryCall) else f[(grid,)])
    assert isinstance(launcher.direct, launch.DirectLaunch)
    got = launcher(*inputs)
    want = expected(graph, [t.numpy() for t in inputs])
    assert_same([t.numpy() for t in got], want, [v.type for v in graph.outputs])


# ----- the tuning flow, with a table for a timer --------------------------------------------------------------
class Timer:
    """do_bench as a table: the library call takes `library` ms, the generated kernel 1 ms, other variants 2 ms
    and up; a launch configuration warps + stages. Counts the calls."""

    def __init__(self, fn, library_ms: float) -> None:
        self.fn, self.library_ms, self.calls = fn, library_ms, 0

    def do_bench(self, run, warmup, rep):
        self.calls += 1
        run()
        installed = [getattr(self.fn.module(), s.function) for s in self.fn.generated.kernels if s is not None]
        if any(isinstance(i, tuner.VariantLaunch) and isinstance(i.fn, library.LibraryCall) for i in installed):
            return self.library_ms
        return 2.0 if any(isinstance(i, tuner.VariantLaunch) for i in installed) else 1.0


def tuned(graph, monkeypatch, library_ms: float):
    fn = tilegraph.compile(graph, target="triton")
    timer = Timer(fn, library_ms)
    monkeypatch.setattr(triton.testing, "do_bench", timer.do_bench)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake H100")
    launcher = fn.launcher()
    launcher.tune(launcher.check([torch.from_numpy(a) for a in reference.random_inputs(graph)]))
    return fn, timer


MATMUL = "def f(a: f32[64, 96], b: f32[96, 80], c: f32[80]) -> f32[64, 80] { return a @ b + c }"


def test_a_faster_library_call_is_installed_and_cached(monkeypatch):
    graph = parse(MATMUL)
    fn, timer = tuned(graph, monkeypatch, library_ms=0.5)
    (position,) = [p for p, s in enumerate(fn.generated.kernels) if s is not None]
    source = fn.generated.kernels[position]
    installed = getattr(fn.module(), source.function)
    assert isinstance(installed, tuner.VariantLaunch) and isinstance(installed.fn, library.LibraryCall)
    times = fn.timings[position]
    assert min(times["tiles"], key=times["tiles"].get) == library.LABEL
    assert "config" not in times, "no warps or stages to time for a library call"
    assert list(times["tiles"])[1] == library.LABEL, "timed right after the Program's own tiling"
    entry = autotune.ConfigCache().get(autotune.config_key(source.text, "Fake H100"))
    assert entry.library and entry.tiles is None
    inputs = reference.random_inputs(graph)
    assert_same(fn(*inputs), reference.run(graph, inputs), [v.type for v in graph.outputs])
    # a new build finds it on disk: installed without timing
    again, second = tuned(graph, monkeypatch, library_ms=0.5)
    assert second.calls == 0
    assert isinstance(getattr(again.module(), source.function).fn, library.LibraryCall)
    assert "library call" in again.report()


def test_a_slower_library_call_is_timed_and_left_out(monkeypatch):
    graph = parse(MATMUL)
    fn, _ = tuned(graph, monkeypatch, library_ms=5.0)
    (position,) = [p for p, s in enumerate(fn.generated.kernels) if s is not None]
    source = fn.generated.kernels[position]
    assert library.LABEL in fn.timings[position]["tiles"]
    assert not isinstance(getattr(fn.module(), source.function), tuner.VariantLaunch)
    assert not autotune.ConfigCache().get(autotune.config_key(source.text, "Fake H100")).library


@pytest.mark.parametrize("library_ms", [0.5, 5.0])
def test_past_the_budget_the_library_call_is_still_compared(monkeypatch, library_ms):
    """A kernel the budget did not reach times its untuned self against its library call only, keeps the faster,
    and caches nothing (a run with more budget tunes it in full)."""
    monkeypatch.setenv("TILEGRAPH_TUNE_SECONDS", "0")
    graph = parse(MATMUL)
    fn, timer = tuned(graph, monkeypatch, library_ms=library_ms)
    (position,) = fn.timings
    assert timer.calls == 2 and set(fn.timings[position]["tiles"]) == {"generated", library.LABEL}
    source = fn.generated.kernels[position]
    installed = getattr(fn.module(), source.function)
    assert isinstance(installed, tuner.VariantLaunch) == (library_ms < 1.0)
    assert autotune.ConfigCache().data == {}
    inputs = reference.random_inputs(graph)
    assert_same(fn(*inputs), reference.run(graph, inputs), [v.type for v in graph.outputs])


@pytest.mark.parametrize("library_ms", [0.5, 5.0])
def test_the_library_call_is_timed_when_compiles_ahead_take_the_kernels_share(monkeypatch, library_ms):
    """A big kernel's variants can take its whole share of the budget to compile; its library call, which
    compiles nothing, is still timed against the kernel as generated, and the variants are then left out."""
    now = [0.0]
    monkeypatch.setattr(autotune.Budget, "from_env", staticmethod(lambda: autotune.Budget(10.0, lambda: now[0])))
    compiled = []

    def slow_compiles(warm, requests):
        compiled.append(len(requests))
        now[0] += 100.0  # past every deadline

    monkeypatch.setattr(tuner, "_warm_all", slow_compiles)
    graph = parse(MATMUL)
    fn, timer = tuned(graph, monkeypatch, library_ms=library_ms)
    (position,) = fn.timings
    labels = list(fn.timings[position]["tiles"])
    assert labels[1:] == [library.LABEL], "timed after the kernel as generated; the variants that compile left out"
    assert compiled[0] == 2, "only the kernel as generated and its library call before the first timing"
    source = fn.generated.kernels[position]
    assert isinstance(getattr(fn.module(), source.function), tuner.VariantLaunch) == (library_ms < 1.0)
    inputs = reference.random_inputs(graph)
    assert_same(fn(*inputs), reference.run(graph, inputs), [v.type for v in graph.outputs])


def test_library_calls_can_be_switched_off(monkeypatch):
    monkeypatch.setenv(library.SWITCH, "0")
    fn, _ = tuned(parse(MATMUL), monkeypatch, library_ms=0.5)
    (position,) = fn.timings
    assert library.LABEL not in fn.timings[position].get("tiles", {})


def test_a_call_takes_weights_that_require_grad():
    """A module's weights read in place require grad; the call runs outside autograd, as the kernels do."""
    call = library.MatmulCall("k", library.Operand(0), library.Operand(1), library.Operand(2), None, False)
    a, b = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
    out = torch.empty(3, 5)
    call[(1,)](a, b, out, num_warps=4, num_stages=3)
    torch.testing.assert_close(out, (a @ b).detach())


def test_the_cache_entry_keeps_the_library_flag(tmp_path):
    cache = autotune.ConfigCache(tmp_path / "c.json")
    cache.put("k", autotune.Choice(8, 3, library=True))
    assert autotune.ConfigCache(tmp_path / "c.json").get("k") == autotune.Choice(8, 3, library=True)
    assert "library" not in autotune.Choice(4, 3).to_json()


def test_precision_follows_the_program_only_for_cuda_f32():
    """The f32 flag is set (and restored) only around a CUDA f32 call; here nothing changes."""
    x = torch.ones(2, 2)
    before = torch.backends.cuda.matmul.allow_tf32
    with library.precision(torch, x, True):
        assert torch.backends.cuda.matmul.allow_tf32 == before
    assert np.array_equal(library.inverse((2, 0, 1)), (1, 2, 0))


@pytest.mark.parametrize("timer, expected", [(None, "do_bench"), ("graph", "do_bench_cudagraph")])
def test_the_tuning_timer_is_chosen_by_the_environment(monkeypatch, timer, expected):
    """Candidates are timed launched one by one unless TILEGRAPH_TUNE_TIMER=graph asks for device time alone in a
    CUDA graph (how a replayed program runs; the host's cost of a library call's several torch kernels left out)."""
    used = []
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, warmup, rep: used.append("do_bench") or 1.0)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", lambda fn, rep: used.append("do_bench_cudagraph") or 2.0)
    if timer is None:
        monkeypatch.delenv(autotune.TIMER, raising=False)
    else:
        monkeypatch.setenv(autotune.TIMER, timer)
    assert autotune.measure(lambda: None) == (1.0 if timer is None else 2.0) and used == [expected]
