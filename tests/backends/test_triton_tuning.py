"""Block-size autotuning of the Triton backend on the CPU: candidate tilings and their pruning, variant
code checked numerically in the Triton interpreter, the on-disk cache, and the tuning flow with the
device's timer replaced by a table (nothing is timed without CUDA: `test_triton_gpu.py` times for real)."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import dataclasses  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402

import pytest  # noqa: E402

torch = pytest.importorskip("torch", reason="the Triton backend runs on torch tensors")
triton = pytest.importorskip("triton", reason="triton is not installed (pip install 'tilegraph[triton]')")

from hypothesis import given, settings, strategies as st  # noqa: E402

import tilegraph  # noqa: E402
from tilegraph.backends import reference  # noqa: E402
from tilegraph.backends.triton import autotune, library, tuner, variants  # noqa: E402
from tilegraph.backends.triton.dot import MIN_DOT  # noqa: E402
from tilegraph.frontends.dsl import parse  # noqa: E402
from tilegraph.ir.target import load_target  # noqa: E402
from tilegraph.passes import PassManager  # noqa: E402

from triton_cases import CASES, assert_same, half_precision, precision_in_force  # noqa: E402

H100 = load_target("gpu-h100")
BIG_MATMUL = "def f(a: f16[4096, 4096], c: f16[4096, 4096]) -> f16[4096, 4096] { return a @ c }"
BIG_CONV = """def f(x: f32[32, 64, 56, 56], w: f32[64, 64, 3, 3]) -> f32[32, 64, 56, 56] {
    return relu(conv2d(x, w, padding=[1, 1]))
}"""
WIDE_CONV = """def f(x: bf16[32, 128, 56, 56], w: bf16[256, 128, 3, 3]) -> bf16[32, 256, 56, 56] {
    return relu(conv2d(x, w, padding=[1, 1]))
}"""
BIG_ATTENTION = """def f(q: f16[4, 16, 2048, 64], k: f16[4, 16, 2048, 64],
                     v: f16[4, 16, 2048, 64]) -> f16[4, 16, 2048, 64] {
    return attention(q, k, v)
}"""


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEGRAPH_CACHE_DIR", str(tmp_path / "tilegraph-cache"))


def scheduled(source: str):
    return PassManager("canonicalize,fuse,tile{target=gpu-h100}").run(parse(source))


def dot_kernel(source: str):
    (kernel,) = [k for k in scheduled(source).kernels if variants.dot_loops(k)]
    return kernel


# ----- candidates and pruning ------------------------------------------------------------------------------
@pytest.mark.parametrize("source", [BIG_MATMUL, BIG_CONV, BIG_ATTENTION])
def test_variants_start_with_the_programs_tiles_and_all_fit(source):
    kernel = dot_kernel(source)
    found = variants.dot_variants(kernel, H100)
    assert found[0].tiles == tuple((loop.name, min(dict(kernel.tiles).get(loop.name, loop.extent), loop.extent))
                                   for loop in kernel.domain.loops)
    assert len(found) > 2
    shapes = [variants.dot_shape(kernel.with_tiles(v.tiles)) for v in found]
    for variant, shape in zip(found[1:], shapes[1:]):
        assert variants.fits(shape, H100), variant.label()
        for m, n, k in shape.dots:
            assert MIN_DOT <= min(m, n, k) and max(m, n) <= variants.MAX_MN and k <= variants.MAX_K
            assert (m * k + k * n) * shape.itemsize * variants.STAGES <= H100.shared_memory_per_block
    tilings = [(v.tiles, v.group_m, v.persistent) for v in found]
    assert len(set(tilings)) == len(tilings), "each variant once"
    assert found == variants.dot_variants(kernel, H100), "deterministic"
    # only the loops a tl.dot runs over change
    dot = {kernel.domain.loops[k].name for k in variants.dot_loops(kernel)}
    for variant in found:
        assert {n for (n, t), (_, t0) in zip(variant.tiles, found[0].tiles) if t != t0} <= dot


def test_grouped_matmuls_also_try_other_group_sizes():
    found = variants.dot_variants(dot_kernel(BIG_MATMUL), H100)
    groups = {v.group_m for v in found}
    assert groups == {variants.GROUP_M, *variants.GROUP_CHOICES}
    assert {v.tiles for v in found if v.group_m != variants.GROUP_M} == {found[1].tiles}


@pytest.mark.parametrize("source", [BIG_MATMUL, WIDE_CONV], ids=["matmul", "conv"])
def test_kernels_of_several_waves_also_try_a_persistent_kernel(source):
    """The best tiling again as one program per SM, each walking the tiles a stride apart: where the grid has more
    tiles than the device has SMs and each tile holds an SM alone, and only there."""
    kernel = dot_kernel(source)
    found = variants.dot_variants(kernel, H100)
    (persistent,) = [v for v in found if v.persistent]
    assert persistent.persistent == H100.parallel_units and persistent.tiles == found[1].tiles
    assert persistent.label() == found[1].label() + f" persistent {H100.parallel_units}"
    programs = variants.dot_shape(kernel.with_tiles(persistent.tiles)).programs
    emitted = variants.emit_variant(kernel, persistent, "kernel_p")
    assert emitted.grid == H100.parallel_units < programs
    assert f"for tile in tl.range(tl.program_id(0), {programs}, {H100.parallel_units}, flatten=True):" in emitted.text
    assert not any(v.persistent for v in variants.dot_variants(kernel, H100, units=programs)), "one wave: none"


def test_attention_is_not_tried_persistent():
    """Attention's tiles hold an SM alone and outnumber the SMs, but its two chained dots are not flattened into a
    tile loop: that build gave wrong results on an H200 (variants.PERSISTENT_ACCUMULATOR says more)."""
    kernel = dot_kernel(BIG_ATTENTION)
    found = variants.dot_variants(kernel, H100)
    shape = variants.dot_shape(kernel.with_tiles(found[1].tiles))
    assert len(shape.dots) == 2 and shape.programs > H100.parallel_units
    assert shape.accumulator >= variants.PERSISTENT_ACCUMULATOR
    assert not any(v.persistent for v in found)


def test_small_tiles_are_not_tried_persistent():
    """A convolution whose best tiles are 64 x 64 (several share an SM) has thousands of them, but no persistent
    candidate: one program per SM would leave most of each SM idle."""
    kernel = dot_kernel(BIG_CONV)
    found = variants.dot_variants(kernel, H100)
    shape = variants.dot_shape(kernel.with_tiles(found[1].tiles))
    assert shape.programs > H100.parallel_units and shape.accumulator < variants.PERSISTENT_ACCUMULATOR
    assert not any(v.persistent for v in found)


def test_attention_tries_wider_key_value_tiles():
    """The key/value tile is not in the traffic model; the variants try wider ones before narrower."""
    kernel = dot_kernel(BIG_ATTENTION)
    found = variants.dot_variants(kernel, H100)
    own = variants.dot_shape(kernel).dots[0][1]
    widths = [variants.dot_shape(kernel.with_tiles(v.tiles)).dots[0][1] for v in found[1:]]
    assert any(w > own for w in widths)
    assert all(w >= H100.matrix_block for w in widths[:2])


def test_variants_that_fill_their_waves_are_timed_first():
    """ViT's MLP-down matmul at batch 32 (6304 x 3072 x 768) tiled 128 x 256 (as the Program did before it ranked
    wave fill) is 150 programs on 132 SMs, a second wave 14% full. The first alternative fills its waves at least
    WAVE_FILL: 128 x 128, which the candidate grid's thinning had dropped (it kept 64 and 256)."""
    kernel = dot_kernel("def f(x: bf16[6304, 3072], w: bf16[3072, 768]) -> bf16[6304, 768] { return x @ w }")
    rows, cols = (loop.name for loop in kernel.domain.loops if loop.kind == "parallel")
    kernel = kernel.with_tiles(tuple((n, {rows: 128, cols: 256}.get(n, t)) for n, t in kernel.tiles))
    first, second = variants.dot_variants(kernel, H100)[:2]
    shapes = [variants.dot_shape(kernel.with_tiles(v.tiles)) for v in (first, second)]
    assert shapes[0].dots[0][:2] == (128, 256)
    assert variants.ragged(shapes[0].programs, H100.parallel_units)
    assert not variants.ragged(shapes[1].programs, H100.parallel_units)
    assert shapes[1].dots[0][:2] == (128, 128)


def test_kernels_without_dots_have_no_variants():
    program = scheduled(CASES["softmax"])
    assert all(variants.dot_variants(k, H100) == [] for k in program.kernels)


def test_pruning_rejects_what_does_not_fit():
    assert not variants.fits(variants.Shape(((8, 64, 64),), 2, 100, False), H100)  # under the MMA shape
    assert not variants.fits(variants.Shape(((512, 64, 64),), 2, 100, False), H100)  # too many rows
    assert not variants.fits(variants.Shape(((256, 256, 64),), 2, 100, False), H100)  # accumulator
    assert not variants.fits(variants.Shape(((256, 128, 128),), 4, 100, False), H100)  # shared memory
    assert variants.fits(variants.Shape(((128, 128, 64),), 2, 100, False), H100)


@given(m=st.integers(17, 700), n=st.integers(17, 700), k=st.integers(17, 700))
@settings(max_examples=25, deadline=None)
def test_any_matmul_shape_gets_fitting_variants(m, n, k):
    kernel = dot_kernel(f"def f(a: bf16[{m}, {k}], b: bf16[{k}, {n}]) -> bf16[{m}, {n}] {{ return a @ b }}")
    for variant in variants.dot_variants(kernel, H100)[1:]:
        assert variants.fits(variants.dot_shape(kernel.with_tiles(variant.tiles)), H100)
        for (name, size), loop in zip(variant.tiles, kernel.domain.loops):
            assert 1 <= size <= loop.extent


# ----- variant code in the interpreter ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["matmul_epilogue", "batch_matmul", "conv_relu", "attention", "matmul_f16"])
def test_every_variant_computes_the_same_result(name):
    """Every variant, and the Program's own and the best of them again as a persistent kernel of one program."""
    tried = _variants_match_the_reference(parse(CASES[name]), persistent=1)
    assert len(tried) >= 2, "some kernel has variants"
    assert any(v.persistent == 1 for v in tried), "a variant of several tiles"


@settings(max_examples=10, deadline=None)
@given(st.data())
def test_every_variant_of_a_random_convolution_computes_the_same_result(data):
    """Block-size variants over random convolutions (stride, padding, dilation, 1x1 to 3x3, tails): the rows
    of a variant's dot may span several loops (batch x oh x ow lanes numbered flat, or a gathered block
    under a window's border mask), its K one or several, and every one matches the reference."""
    n, c = data.draw(st.integers(1, 3)), data.draw(st.sampled_from([16, 24, 40]))
    f = data.draw(st.sampled_from([16, 48]))
    k = data.draw(st.sampled_from([1, 3]))
    stride, dilation = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    pad = data.draw(st.integers(0, k // 2 * dilation))
    hw = data.draw(st.integers(dilation * (k - 1) + 1, 11))
    dtype = data.draw(st.sampled_from(["f32", "bf16"]))
    out = (hw + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    x, w, y = f"{dtype}[{n}, {c}, {hw}, {hw}]", f"{dtype}[{f}, {c}, {k}, {k}]", f"{dtype}[{n}, {f}, {out}, {out}]"
    conv = f"conv2d(x, w, stride=[{stride}, {stride}], padding=[{pad}, {pad}], dilation=[{dilation}, {dilation}])"
    graph = parse(f"def f(x: {x}, w: {w}) -> {y} {{ return relu({conv}) }}")
    persistent = data.draw(st.sampled_from([1, 3]))  # a persistent variant's programs (drawn last: the shapes
    _variants_match_the_reference(graph, persistent, tf32=True)  # stay those drawn before it was added)


def _variants_match_the_reference(graph, persistent: int = 0, **options) -> list[variants.Variant]:
    """Run every block-size variant of every dot kernel against the reference, and each of more than `persistent`
    tiles among the first two (the Program's own and the model's best) again as a persistent kernel of that many
    programs; the variants that ran."""
    fn = tilegraph.compile(graph, target="triton", **options)
    inputs = reference.random_inputs(graph)
    want = reference.run(graph, inputs, params={v.name: a for v, a in fn.params.items()})
    state = tuner.state_of(fn)
    tried = []
    for position, source in enumerate(fn.generated.kernels):
        if source is None or not source.uses_dot:
            continue
        kernel = fn.program.kernels[position]
        proposed = variants.dot_variants(kernel, fn.program.target)
        proposed += [dataclasses.replace(v, persistent=persistent) for v in proposed[:2] if persistent and
                     variants.dot_shape(kernel.with_tiles(v.tiles)).programs > persistent]
        for variant, function, grid in tuner.variant_functions(fn, position, source, proposed):
            tuner.install(fn, state, source, function, grid)
            assert_same(fn(*inputs), want, [v.type for v in graph.outputs], max(half_precision(graph),
                                                                                 precision_in_force(fn)))
            tried.append(variant)
        tuner.install(fn, state, source)
    return tried


def test_a_variant_launch_replaces_the_function_and_its_grid():
    graph = parse(CASES["matmul_epilogue"])
    fn = tilegraph.compile(graph, target="triton")
    source = fn.generated.kernels[0]
    proposed = variants.dot_variants(fn.program.kernels[0], fn.program.target)
    (_, function, grid), = tuner.variant_functions(fn, 0, source, proposed[1:2])
    state = tuner.state_of(fn)
    tuner.install(fn, state, source, function, grid)
    installed = getattr(fn.module(), source.function)
    assert isinstance(installed, tuner.VariantLaunch) and installed.grid == grid
    tuner.install(fn, state, source)
    assert getattr(fn.module(), source.function) is state.originals[source.function]


# ----- cross-checks -----------------------------------------------------------------------------------------
def test_a_cross_check_tells_rounding_from_wrong_results():
    """Probe copies: parameters shared, inputs drawn at random, outputs refilled with NaN before each run; a
    deviation is relative to the generated outputs' largest magnitude, inf for an output left unwritten."""
    from tilegraph.backends.triton import crosscheck

    weight, x, out = torch.ones(4, 4), torch.zeros(3, 4), torch.zeros(3, 4)

    def generated(args):
        torch.matmul(args[1], args[0], out=args[2])

    check = crosscheck.CrossCheck.of([weight, x, out], written=[2], shared=[0], run=generated)
    assert check.probe[0] is weight and check.probe[1] is not x and check.probe[1].abs().sum() > 0
    assert torch.equal(out, torch.zeros(3, 4)), "the arguments themselves are left as they were"
    assert check.deviation(generated) == 0.0
    rounded = lambda args: generated(args) or args[2].copy_(args[2].bfloat16().float())  # noqa: E731
    assert 0 < check.deviation(rounded) < crosscheck.TOLERANCE
    half = lambda args: generated(args) or args[2][1:].zero_()  # noqa: E731
    assert check.deviation(half) > crosscheck.TOLERANCE
    assert check.deviation(lambda args: None) == float("inf"), "nothing written: the NaN fill shows"


# ----- keys and the cache ---------------------------------------------------------------------------------
def test_kernels_equal_up_to_names_share_a_key():
    two = parse("""def f(x: f32[64, 64], w1: f32[64, 64], w2: f32[64, 64]) -> f32[64, 64] {
        return relu(relu(x @ w1) @ w2)
    }""")
    fn = tilegraph.compile(two, target="triton")
    texts = [s.text for s in fn.generated.kernels if s is not None]
    assert len(texts) == 2 and texts[0] != texts[1]
    assert autotune.config_key(texts[0], "H100") == autotune.config_key(texts[1], "H100")
    assert autotune.config_key(texts[0], "H100") != autotune.config_key(texts[0], "H200")
    assert autotune.config_key(texts[0], "H100") != autotune.config_key(texts[0].replace('"ieee"', '"tf32"'), "H100")
    assert autotune.config_key(texts[0], "H100") != autotune.config_key(texts[0].replace("64", "65"), "H100")


def test_canonical_keeps_attributes_keywords_and_strings():
    text = ('def kernel_a(x_ptr):\n    y = tl.load(x_ptr, mask=m, other=0.0)\n'
            '    z = tl.dot(y, y, input_precision="tf32")\n')
    out = autotune.canonical(text)
    assert "tl.load" in out and "mask=" in out and 'input_precision="tf32"' in out
    assert "kernel_a" not in out and "x_ptr" not in out
    assert autotune.canonical(text.replace("x_ptr", "q_ptr").replace("kernel_a", "kernel_b")) == out


def test_canonical_keeps_the_names_a_kernel_does_not_bind():
    """Kernels that call different helpers are different kernels (the module binds equal ones to one
    function): only the function, its parameters and its locals are renamed."""
    text = "@triton.jit\ndef kernel_a(x_ptr, y_ptr):\n    x = tl.load(x_ptr)\n    tl.store(y_ptr, _tg_tanh(x))\n"
    other = text.replace("kernel_a", "kernel_b").replace("x_ptr", "q_ptr")
    assert autotune.canonical(other) == autotune.canonical(text)
    assert autotune.canonical(text.replace("_tg_tanh", "_tg_erf")) != autotune.canonical(text)


def test_cache_keeps_tiles_and_reads_old_entries(tmp_path):
    path = tmp_path / "autotune.json"
    cache = autotune.ConfigCache(path)
    choice = autotune.Choice(8, 3, (("d0", 128), ("d1", 64), ("d2", 32)), 4)
    cache.put("new", choice)
    persistent = autotune.Choice(8, 3, (("d0", 128), ("d1", 64), ("d2", 32)), 8, persistent=132)
    cache.put("persistent", persistent)
    cache.put("plain", (4, 2))
    data = json.loads(path.read_text())
    data["old"] = [8, 4]
    data["broken"] = {"warps": "x"}
    path.write_text(json.dumps(data))
    again = autotune.ConfigCache(path)
    assert again.get("new") == choice and again.get("plain") == autotune.Choice(4, 2)
    assert again.get("persistent") == persistent
    assert again.get("old") == autotune.Choice(8, 4) and again.get("broken") is None and again.get("none") is None


def test_tune_stops_at_its_deadline(monkeypatch):
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, warmup, rep: fn())
    clock = itertools.count()
    best, times, complete = autotune.tune(lambda w, s: float(w), ((4, 2), (2, 2), (8, 2)), deadline=0.5,
                                          clock=lambda: next(clock))
    assert not complete and set(times) == {(4, 2), (2, 2)} and best == (2, 2)


# ----- the tuning flow, with a table for a timer --------------------------------------------------------------
class FakeDevice:
    """do_bench as a table: a variant's time is its index in the proposed list (so `fastest` wins), the library
    call's 50, a config's warps + stages; counts the calls."""

    def __init__(self, fn, fastest: int) -> None:
        self.fn, self.fastest, self.calls = fn, fastest, 0

    def do_bench(self, run, warmup, rep):
        self.calls += 1
        run()
        source = next(s for s in self.fn.generated.kernels if s is not None and s.uses_dot)
        installed = getattr(self.fn.module(), source.function)
        if isinstance(installed, tuner.VariantLaunch) and isinstance(installed.fn, library.LibraryCall):
            return 50.0  # the library call (`test_triton_library.py` has it win)
        if isinstance(installed, tuner.VariantLaunch):
            name = getattr(installed.fn, "__name__", None) or installed.fn.fn.__name__
            index = int(name.rsplit("_v", 1)[1])
            return 0.5 if index == self.fastest else 1.0 + index
        return 1.0 if self.fastest == 0 else 10.0


def _tune_once(fn, monkeypatch, fastest: int) -> FakeDevice:
    fake = FakeDevice(fn, fastest)
    monkeypatch.setattr(triton.testing, "do_bench", fake.do_bench)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake H100")
    launcher = fn.launcher()
    graph = fn.program.graph
    inputs = launcher.check([torch.from_numpy(a) for a in reference.random_inputs(graph)])
    launcher.tune(inputs)
    return fake


def _deadline_after_the_tiles(fn, monkeypatch) -> None:
    """The tuning budget of `fn` ends as soon as its first kernel's block sizes are timed."""
    now = [0.0]
    tuner.state_of(fn).budget.clock = lambda: now[0]
    original = tuner._tune_tiles

    def then_the_deadline(*args, **kwargs):
        result = original(*args, **kwargs)
        now[0] = 1e9
        return result

    monkeypatch.setattr(tuner, "_tune_tiles", then_the_deadline)


def test_first_run_installs_the_fastest_variant_and_caches_it(monkeypatch, capsys):
    graph = parse(CASES["matmul_epilogue"])
    fn = tilegraph.compile(graph, target="triton")
    fake = _tune_once(fn, monkeypatch, fastest=2)
    assert "tilegraph: tuning 1 distinct Triton kernels on Fake H100 for at most" in capsys.readouterr().err
    (position,) = [i for i, s in enumerate(fn.generated.kernels) if s is not None]
    times = fn.timings[position]
    proposed = variants.dot_variants(fn.program.kernels[position], fn.program.target)
    assert min(times["tiles"], key=times["tiles"].get) == proposed[2].label()
    assert fn.configs[position] == min(times["config"], key=times["config"].get)
    entry = autotune.ConfigCache().get(autotune.config_key(fn.generated.kernels[position].text, "Fake H100"))
    assert entry.tiles == proposed[2].tiles and entry.config == fn.configs[position]
    inputs = reference.random_inputs(graph)
    want = reference.run(graph, inputs, params={v.name: a for v, a in fn.params.items()})
    assert_same(fn(*inputs), want, [v.type for v in graph.outputs])
    assert fake.calls == len(times["tiles"]) + len(times["config"])
    assert tuner.state_of(fn).rejected == {}, "every candidate gave the generated kernel's results"
    # a second process (a new build) finds the winner on disk: installed without timing
    again = tilegraph.compile(graph, target="triton")
    second = _tune_once(again, monkeypatch, fastest=2)
    assert second.calls == 0 and again.configs[position] == fn.configs[position]
    installed = getattr(again.module(), again.generated.kernels[position].function)
    assert isinstance(installed, tuner.VariantLaunch)
    assert_same(again(*inputs), want, [v.type for v in graph.outputs])


def test_a_persistent_winner_is_cached_and_installed_again(monkeypatch):
    """The persistent variant wins on a device of one SM: cached with its programs, and a new build launches it
    again as one program over every tile, with the reference's results."""
    monkeypatch.setattr(tuner, "_device_units", lambda: 1)
    monkeypatch.setattr(variants, "PERSISTENT_ACCUMULATOR", 1)  # this small product's tiles too
    graph = parse(CASES["batch_matmul"])
    fn = tilegraph.compile(graph, target="triton")
    (position,) = [i for i, s in enumerate(fn.generated.kernels) if s is not None]
    proposed = variants.dot_variants(fn.program.kernels[position], fn.program.target, units=1)
    fastest = next(n for n, v in enumerate(proposed) if v.persistent)
    _tune_once(fn, monkeypatch, fastest=fastest)
    entry = autotune.ConfigCache().get(autotune.config_key(fn.generated.kernels[position].text, "Fake H100"))
    assert entry.persistent == 1 and entry.tiles == proposed[fastest].tiles
    again = tilegraph.compile(graph, target="triton")
    assert _tune_once(again, monkeypatch, fastest=fastest).calls == 0
    installed = getattr(again.module(), again.generated.kernels[position].function)
    assert isinstance(installed, tuner.VariantLaunch) and installed.grid == 1
    inputs = reference.random_inputs(graph)
    want = reference.run(graph, inputs, params={v.name: a for v, a in again.params.items()})
    assert_same(again(*inputs), want, [v.type for v in graph.outputs])


def test_a_candidate_whose_results_differ_is_never_installed(monkeypatch, capsys):
    """A variant that writes nothing (as a miscompiled one might) is the fastest by the timer's table, but on the
    probe copies its results differ from the generated kernel's: reported, left untimed, and the next fastest
    installed."""
    graph = parse(CASES["matmul_epilogue"])
    fn = tilegraph.compile(graph, target="triton")
    proposed = variants.dot_variants(fn.program.kernels[0], fn.program.target)
    original = tuner.variant_functions

    class WritesNothing:
        __name__ = "kernel_broken_v2"

        def __getitem__(self, grid):
            return self

        def __call__(self, *args, **kwargs):
            pass

    def with_a_broken_one(compiled, position, source, chosen):
        found = original(compiled, position, source, chosen)
        if len(found) > 2:
            found[2] = (found[2][0], WritesNothing(), found[2][2])
        return found

    monkeypatch.setattr(tuner, "variant_functions", with_a_broken_one)
    _tune_once(fn, monkeypatch, fastest=2)
    source = fn.generated.kernels[0]
    assert tuner.state_of(fn).rejected == {source.function: {proposed[2].label(): float("inf")}}
    assert f"{source.function}: {proposed[2].label()} left out" in capsys.readouterr().err
    assert proposed[2].label() not in fn.timings[0]["tiles"]
    installed = getattr(fn.module(), source.function)
    assert isinstance(installed, tuner.VariantLaunch) and not isinstance(installed.fn, WritesNothing)
    inputs = reference.random_inputs(graph)
    want = reference.run(graph, inputs, params={v.name: a for v, a in fn.params.items()})
    assert_same(fn(*inputs), want, [v.type for v in graph.outputs])


def test_the_programs_own_tiles_can_win(monkeypatch):
    fn = tilegraph.compile(parse(CASES["matmul_epilogue"]), target="triton")
    _tune_once(fn, monkeypatch, fastest=0)
    source = next(s for s in fn.generated.kernels if s is not None)
    assert not isinstance(getattr(fn.module(), source.function), tuner.VariantLaunch)
    entry = autotune.ConfigCache().get(autotune.config_key(source.text, "Fake H100"))
    assert entry.tiles is None


def test_a_deadline_after_the_tiles_keeps_the_warps_the_winner_was_timed_at(monkeypatch):
    """When the budget ends between the block sizes and the launch configurations, the winning variant keeps the
    warps it was timed with: 8 for a 128 x 128 block, not the 4 of the first candidate (on an H100 a 256 x 128
    variant at 4 warps spilled its accumulator: 0.486 ms where the generated kernel took 0.083)."""
    graph = parse("def f(a: f16[256, 256], c: f16[256, 256]) -> f16[256, 256] { return a @ c }")
    fn = tilegraph.compile(graph, target="triton")
    (position,) = [i for i, s in enumerate(fn.generated.kernels) if s is not None]
    kernel = fn.program.kernels[position]
    proposed = variants.dot_variants(kernel, fn.program.target)
    wide = next(n for n, v in enumerate(proposed) if n and tuner._variant_warps(kernel, v) == 8)
    _deadline_after_the_tiles(fn, monkeypatch)
    _tune_once(fn, monkeypatch, fastest=wide)
    times = fn.timings[position]
    assert min(times["tiles"], key=times["tiles"].get) == proposed[wide].label()
    assert list(times["config"]) == [(8, tuner.VARIANT_STAGES)] and fn.configs[position] == (8, tuner.VARIANT_STAGES)


def test_a_program_tiled_without_a_target_is_tuned_too(monkeypatch):
    """A program tiled for a test's tiny target carries no target: the longest-first order takes every kernel
    as equal (it raised AttributeError on an H100), and the matmul kernel is tuned."""
    from tilegraph.backends.triton import build
    from triton_cases import tiny_program

    program = tiny_program(parse(CASES["matmul_epilogue"]))
    assert program.target is None
    fn = build(program, reference.random_params(program.graph))
    assert all(tuner.expected_seconds(kernel, None) == 0.0 for kernel in program.kernels)
    _tune_once(fn, monkeypatch, fastest=0)
    assert fn.timings


def test_a_spent_budget_leaves_kernels_as_generated_and_uncached(monkeypatch):
    monkeypatch.setenv("TILEGRAPH_TUNE_SECONDS", "0")
    monkeypatch.setenv(library.SWITCH, "0")  # (past the budget a library call is still compared: test_triton_library)
    fn = tilegraph.compile(parse(CASES["matmul_epilogue"]), target="triton")
    fake = _tune_once(fn, monkeypatch, fastest=2)
    assert fake.calls == 0 and fn.timings == {}
    assert fn.configs == [autotune.DOT_DEFAULT]  # the untuned default of a dot kernel
    assert tuner.state_of(fn).budget.skipped
    assert autotune.ConfigCache().data == {}


def test_variants_compile_for_hopper_without_a_gpu(tmp_path, monkeypatch):
    """The variants are real sm_90 code whose shared memory fits (a few of a conv's and attention's, and their
    persistent kernels, whose flattened loop nest the pipeliner takes)."""
    from tilegraph.backends.triton import hopper
    from tilegraph.backends.triton.module import GeneratedModule

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    for source in (BIG_CONV.replace("f32", "bf16"), BIG_ATTENTION):
        fn = tilegraph.compile(parse(source), target="triton")
        generated = fn.generated
        (position,) = [i for i, s in enumerate(generated.kernels) if s is not None and s.uses_dot]
        kernel, function = fn.program.kernels[position], generated.kernels[position].function
        found = variants.dot_variants(kernel, fn.program.target)
        proposed = [*found[:3], dataclasses.replace(found[1], persistent=H100.parallel_units)]
        emitted = [variants.emit_variant(kernel, v, f"{function}_v{n}", False, generated.names,
                                         layouts=generated.layouts) for n, v in enumerate(proposed)]
        module = GeneratedModule(generated.text + "\n\n" + "\n\n".join(e.text for e in emitted), generated.names,
                                 emitted, generated.arena, generated.steps)
        records = hopper.compile_kernels_isolated(module, arch=90, configs=[(4, 3)] * len(emitted))
        assert len(records) == len(proposed)
        for record in records:
            assert 0 < record.ptx_lines and record.shared_bytes <= H100.shared_memory_per_block


def test_a_repeated_layer_takes_the_variant_tuned_for_the_first(monkeypatch):
    graph = parse("""def f(x: f32[64, 64], w1: f32[64, 64], w2: f32[64, 64]) -> f32[64, 64] {
        return relu(relu(x @ w1) @ w2)
    }""")
    fn = tilegraph.compile(graph, target="triton")
    fake = _tune_once(fn, monkeypatch, fastest=1)
    first, second = [s for s in fn.generated.kernels if s is not None]
    module = fn.module()
    a, b = getattr(module, first.function), getattr(module, second.function)
    assert isinstance(a, tuner.VariantLaunch) and isinstance(b, tuner.VariantLaunch)
    assert a.fn is b.fn, "one variant function, compiled once"
    assert len(fn.timings) == 1 and fake.calls == sum(len(t) for t in fn.timings[0].values())
    inputs = reference.random_inputs(graph)
    want = reference.run(graph, inputs, params={v.name: a for v, a in fn.params.items()})
    assert_same(fn(*inputs), want, [v.type for v in graph.outputs])


def test_a_repeated_layer_keeps_the_variant_when_the_deadline_cut_the_first_ones_tuning(monkeypatch):
    """The budget ends while the first layer's warps and stages are timed: its variant stays installed, and the
    second layer (the same kernel up to names) takes it too, untimed. It took the generated kernel, timed past
    the budget against its library call: GPT-2's two MLP-up kernels ran as kernel_k10_v6 and kernel_k10 on an
    H100 (0.044 and 0.060 ms)."""
    graph = parse("""def f(x: f32[64, 64], w1: f32[64, 64], w2: f32[64, 64]) -> f32[64, 64] {
        return relu(relu(x @ w1) @ w2)
    }""")
    fn = tilegraph.compile(graph, target="triton")
    _deadline_after_the_tiles(fn, monkeypatch)
    _tune_once(fn, monkeypatch, fastest=1)
    first, second = [s for s in fn.generated.kernels if s is not None]
    module = fn.module()
    a, b = getattr(module, first.function), getattr(module, second.function)
    assert isinstance(a, tuner.VariantLaunch) and isinstance(b, tuner.VariantLaunch) and a.fn is b.fn
    assert list(fn.timings) == [0], "the second layer is not timed again"
    assert autotune.ConfigCache().data == {}, "a cut tuning is not cached: a run with more budget tunes it in full"


# ----- the budget's shares --------------------------------------------------------------------------------------
@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.0, 1e-3), min_size=1, max_size=12), st.floats(0.0, 120.0))
def test_each_kernel_gets_its_part_of_the_budget_left(weights, seconds):
    """Kernels tuned in turn, each spending its whole share: a share is the kernel's part of the expected time
    left (equal parts where none is expected to take any), never under MIN_KERNEL_S, and a budget spent in full
    ends with the last kernel's share."""
    keys = [f"k{n}" for n in range(len(weights))]
    state = tuner.TuningState(autotune.Budget(seconds), len(keys), dict(zip(keys, weights)))
    remaining, floored = seconds, False
    for n, key in enumerate(keys):
        left = weights[n:]
        share = tuner.budget_share(state, key, remaining)
        assert key not in state.left
        fair = remaining * left[0] / sum(left) if sum(left) > 0 else remaining / len(left)
        assert share == pytest.approx(max(fair, tuner.MIN_KERNEL_S))
        floored = floored or fair < tuner.MIN_KERNEL_S
        remaining = max(remaining - share, 0.0)
    assert state.left == {}
    if not floored:
        assert remaining == pytest.approx(0.0, abs=1e-6)


def test_the_longest_kernels_get_most_of_the_budget():
    """BERT's shape of program: two products four times as long as the rest share most of the budget, where an
    equal split gave every kernel the same (the MLP-up product of a 10 s budget was timed against its library
    call alone before its share ran out)."""
    left = {"mlp_up": 290e-6, "mlp_down": 290e-6, "qkv": 220e-6, "out": 72e-6, "norm": 6e-6}
    state = tuner.TuningState(autotune.Budget(60.0), len(left), dict(left))
    assert tuner.budget_share(state, "mlp_up", 60.0) == pytest.approx(60.0 * 290 / 878)
    assert tuner.budget_share(state, "norm", 40.0) == tuner.MIN_KERNEL_S


def test_kernels_are_tuned_longest_first_counting_every_launch(monkeypatch):
    """Three launches of one layer's kernel outweigh a single kernel each launch of which is longer: the layer goes
    first (ordered by one launch each, the single kernel went first)."""
    graph = parse("""def f(x: f32[64, 64], w1: f32[64, 64], w2: f32[64, 64], w3: f32[64, 64], w4: f32[64, 160])
        -> f32[64, 160] {
        return relu(relu(relu(x @ w1) @ w2) @ w3) @ w4
    }""")
    fn = tilegraph.compile(graph, target="triton")
    target = fn.program.target
    sources = {p: s for p, s in enumerate(fn.generated.kernels) if s is not None}
    keys = {p: autotune.canonical(s.text) for p, s in sources.items()}
    layer, single = (max(set(keys.values()), key=list(keys.values()).count),
                     min(set(keys.values()), key=list(keys.values()).count))
    one_launch = {keys[p]: tuner.expected_seconds(fn.program.kernels[p], target) for p in sources}
    assert list(keys.values()).count(layer) == 3 and one_launch[single] > one_launch[layer]
    order = []

    def record(position, *args, **kwargs):
        order.append(keys[position])
        return fn.configs[position]

    monkeypatch.setattr(fn, "_tune", record)
    launcher = fn.launcher()
    launcher.tune(launcher.check([torch.from_numpy(a) for a in reference.random_inputs(graph)]))
    assert order[0] == layer and order[-1] == single
