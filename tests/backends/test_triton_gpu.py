"""The Triton backend compiled by Triton for a real CUDA GPU: the same kernel kinds, examples and random
graphs as the interpreter tests, compared with the numpy reference, plus autotuning on the device.

Skipped without a CUDA device, and when TRITON_INTERPRET is set (the interpreter tests set it for the
whole process, so run this file on its own on a GPU machine: `python -m pytest tests/backends/test_triton_gpu.py`).
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the Triton backend runs on torch tensors")
pytest.importorskip("triton", reason="triton is not installed (pip install 'tilegraph[triton]')")

from tilegraph.backends.triton.runtime import _interpreting  # noqa: E402

if _interpreting():
    pytest.skip("TRITON_INTERPRET is set in this process (test_triton.py sets it): run this file on its own",
                allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the GPU tests need one (the interpreter tests cover the CPU)",
                allow_module_level=True)

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402
from triton_cases import CASES, EXAMPLES, check, check_random  # noqa: E402

import tilegraph  # noqa: E402
from tilegraph.backends import reference  # noqa: E402
from tilegraph.backends.triton import autotune, launch, tuner, variants  # noqa: E402
from tilegraph.frontends.dsl import parse, parse_file  # noqa: E402


@pytest.fixture(autouse=True)
def _one_config(tmp_path_factory, monkeypatch):
    """Each kernel is timed in one launch configuration and its own tiles only: five compiles per kernel (and
    block-size variants) would make the random graphs slow, and the choices are tested on their own below."""
    monkeypatch.setenv("TILEGRAPH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tilegraph-cache"))
    monkeypatch.setattr(autotune, "candidates", lambda uses_dot: (autotune.DEFAULT,))
    monkeypatch.setattr(variants, "dot_variants", lambda *args, **kwargs: [])


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_kinds_match_the_reference_on_the_gpu(name):
    fn = check(parse(CASES[name]))
    assert fn._device().type == "cuda"


@pytest.mark.parametrize("name", ["row_sums", "softmax", "matmul_epilogue", "attention", "conv_relu",
                                  "batch_matmul"])
def test_ragged_tiles_and_carried_reductions_on_the_gpu(name):
    check(parse(CASES[name]), tiny=True)


@pytest.mark.parametrize("example", ["mlp", "lenet", "transformer_block", "resnet_block"])
def test_examples_on_the_gpu(example):
    check(parse_file(str(EXAMPLES / f"{example}.tg")))


@pytest.mark.parametrize("example", ["mlp", "transformer_block", "resnet_block"])
def test_calls_launch_the_compiled_binaries_directly(example):
    """The first call compiles every kernel side by side and binds each to its binary (`launch.DirectLaunch`):
    the results the generic walk gives, and an input at an address it was not bound for takes the walk."""
    from tilegraph.backends.triton.launch import DirectLaunch

    graph = parse_file(str(EXAMPLES / f"{example}.tg"))
    fn = tilegraph.compile(graph, target="triton")
    inputs = [torch.from_numpy(a).cuda() for a in reference.random_inputs(graph)]
    first = [t.clone() for t in fn.run_torch(*inputs)]
    launcher = fn.launcher()
    assert isinstance(launcher.direct, DirectLaunch), launcher.direct_error
    configs = fn.configs
    walked = launcher._walk(inputs, lambda step, args: launcher._launch(step, args, *configs[step.position]))
    assert all(torch.equal(a, b) for a, b in zip(walked, first))
    assert all(torch.equal(a, b) for a, b in zip(fn.run_torch(*inputs), first))
    shifted = []
    for x in inputs:
        storage = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
        shifted.append(storage[1:].view(x.shape).copy_(x))
    assert not launcher.direct.accepts(shifted)
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-5) for a, b in zip(fn.run_torch(*shifted), first))


@given(st.data())
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_random_graphs_match_the_reference_on_the_gpu(data):
    check_random(data)


def test_first_run_tunes_every_kernel_and_keeps_cuda_tensors(tmp_path, monkeypatch):
    monkeypatch.undo()  # the real candidates, and a cache of this test's own
    monkeypatch.setenv("TILEGRAPH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TILEGRAPH_LIBRARY_CALLS", "0")  # (a cuBLAS winner has no configurations: tested below)
    graph = parse(CASES["matmul_epilogue"])
    fn = tilegraph.compile(graph, target="triton")
    inputs = reference.random_inputs(graph)
    (out,) = fn.run_torch(*(torch.from_numpy(a).cuda() for a in inputs))
    assert out.is_cuda
    assert fn.tuned and fn.timings, "a CUDA run times the launch configurations"
    assert sorted(fn.timings) == [i for i, k in enumerate(fn.generated.kernels) if k is not None]
    for position, times in fn.timings.items():
        config = times["config"]
        assert fn.configs[position] == min(config, key=config.get), "the fastest configuration is kept"
    want = reference.run(graph, inputs, params={v.name: a for v, a in fn.params.items()})[0]
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=1e-4, atol=1e-4)


def test_block_size_variants_are_timed_installed_and_cached(tmp_path, monkeypatch):
    """A 512^3 bf16 matmul: its variants are compiled and timed once, the fastest launched from then on
    (checked against the reference), and a second build takes it from the cache without timing."""
    monkeypatch.undo()
    monkeypatch.setenv("TILEGRAPH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "candidates", lambda uses_dot: (autotune.DEFAULT,))
    graph = parse("def f(a: bf16[512, 512], b: bf16[512, 512]) -> bf16[512, 512] { return a @ b }")
    inputs = reference.random_inputs(graph)
    want = reference.run(graph, inputs)[0]
    fn = tilegraph.compile(graph, target="triton")
    (out,) = fn.run_torch(*(torch.from_numpy(a).cuda() for a in inputs))
    (position,) = [i for i, s in enumerate(fn.generated.kernels) if s is not None]
    tiles = fn.timings[position]["tiles"]
    assert len(tiles) >= 3, tiles
    proposed = variants.dot_variants(fn.program.kernels[position], fn.program.target)
    best = min(tiles, key=tiles.get)
    installed = getattr(fn.module(), fn.generated.kernels[position].function)
    assert isinstance(installed, tuner.VariantLaunch) == (best != proposed[0].label())
    np.testing.assert_allclose(fn.to_numpy(out, graph.outputs[0].type.dtype).astype(np.float32),
                               want.astype(np.float32), rtol=3e-2, atol=3e-2 * float(np.abs(want).max()))
    again = tilegraph.compile(graph, target="triton")
    again.run_torch(*(torch.from_numpy(a).cuda() for a in inputs))
    assert again.timings == {}, "the winner came from the cache"


@pytest.mark.parametrize("source", [
    "def f(a: bf16[4096, 4096], b: bf16[4096, 4096]) -> bf16[4096, 4096] { return a @ b }",
    """def f(x: bf16[32, 128, 56, 56], w: bf16[256, 128, 3, 3]) -> bf16[32, 256, 56, 56] {
        return relu(conv2d(x, w, padding=[1, 1]))
    }"""], ids=["matmul", "conv"])
def test_persistent_variants_give_the_generated_kernels_results(source, tmp_path, monkeypatch):
    """The tuner's persistent candidate (one program per SM over the tiles, a flattened loop nest) as Triton
    compiles it for this GPU: the generated kernel's results, and the tuner's cross-check rejects nothing."""
    monkeypatch.undo()
    monkeypatch.setenv("TILEGRAPH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TILEGRAPH_TUNE_SECONDS", "15")
    graph = parse(source)
    inputs = [torch.from_numpy(a).cuda() for a in reference.random_inputs(graph)]
    fn = tilegraph.compile(graph, target="triton")
    fn.autotune = False
    (want,) = [t.clone() for t in fn.run_torch(*inputs)]
    (position,) = [i for i, s in enumerate(fn.generated.kernels) if s is not None and s.uses_dot]
    kernel_source = fn.generated.kernels[position]
    proposed = variants.dot_variants(fn.program.kernels[position], fn.program.target, units=tuner._device_units())
    (persistent,) = [v for v in proposed if v.persistent]
    ((_, function, grid),) = tuner.variant_functions(fn, position, kernel_source, [persistent])
    assert grid == torch.cuda.get_device_properties(0).multi_processor_count
    tuner.install(fn, tuner.state_of(fn), kernel_source, function, grid)
    (got,) = fn.run_torch(*inputs)
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2 * float(want.abs().max()))
    tuned = tilegraph.compile(graph, target="triton")
    tuned.run_torch(*inputs)
    assert tuner.state_of(tuned).rejected == {}


def library_call_results(graph, kind, flags, dtype: str):
    """Build `graph` (one kernel) with tf32=False, install its library call (checked to be a `kind` in IEEE
    precision) and run it through the walk, the direct launches and a CUDA graph's replay, with torch's TF32 flag
    on `flags` set to True meanwhile (the program's precision must hold whatever torch's is, and the flag must be
    as it was after each call). Returns the call."""
    from tilegraph.backends.triton.launch import GraphedLauncher

    inputs = reference.random_inputs(graph)
    want = reference.run(graph, inputs)[0].astype(np.float32)
    fn = tilegraph.compile(graph, target="triton", tf32=False)
    fn.autotune = False
    (position,) = [i for i, s in enumerate(fn.generated.kernels) if s is not None]
    source = fn.generated.kernels[position]
    call = tuner.library_candidate(fn, position, source)
    assert isinstance(call, kind) and not call.tf32
    tuner.install(fn, tuner.state_of(fn), source, call, source.grid)
    tf32_before = flags.allow_tf32
    flags.allow_tf32 = True
    try:
        launcher = fn.launcher()
        cuda = launcher.check([torch.from_numpy(a).cuda() for a in inputs])
        graphed = GraphedLauncher(launcher, replay=True)
        results = [launcher(*cuda)[0], launcher(*cuda)[0]] + [graphed(*cuda)[0] for _ in range(3)]
        assert isinstance(launcher.direct, launch.DirectLaunch)
        assert flags.allow_tf32
    finally:
        flags.allow_tf32 = tf32_before
    tolerance = 1e-4 if dtype == "f32" else 3e-2
    for out in results:
        np.testing.assert_allclose(out.float().cpu().numpy(), want, rtol=tolerance,
                                   atol=tolerance * float(np.abs(want).max()))
    return call


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("c, body", [("[80]", "a @ b + c"), ("[3, 200, 80]", "silu(a @ b) * c")],
                         ids=["bias", "gated"])
def test_library_calls_run_directly_and_in_a_cuda_graph(tmp_path, monkeypatch, dtype, c, body):
    """A matmul with a bias, or a gated product (its SiLU and product one generated kernel), run by cuBLAS
    (`library.py`): the same results through the walk, the direct launches and a CUDA graph's replay; the f32
    product in the program's precision (IEEE here: torch's default)."""
    from tilegraph.backends.triton import library

    monkeypatch.undo()
    monkeypatch.setenv("TILEGRAPH_CACHE_DIR", str(tmp_path))
    graph = parse(f"def f(a: {dtype}[3, 200, 96], b: {dtype}[96, 80], c: {dtype}{c}) -> {dtype}[3, 200, 80] "
                  f"{{ return {body} }}")
    call = library_call_results(graph, library.MatmulCall, torch.backends.cuda.matmul, dtype)
    assert (call.fused is not None) == ("silu" in body)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_convolution_library_calls_run_directly_and_in_a_cuda_graph(tmp_path, monkeypatch, dtype):
    """A convolution with a batch norm, a residual add and ReLU run by cuDNN (`library_conv.py`), then the rest as
    one generated epilogue kernel, as above; in f32 IEEE whatever torch's convolution flag (TF32 by default) is."""
    from tilegraph.backends.triton import library_conv

    monkeypatch.undo()
    monkeypatch.setenv("TILEGRAPH_CACHE_DIR", str(tmp_path))
    c = f"{dtype}[32, 1, 1]"
    graph = parse(f"def f(x: {dtype}[4, 16, 28, 28], w: {dtype}[32, 16, 3, 3], m: {c}, s: {c}, b: {c}, "
                  f"r: {dtype}[4, 32, 14, 14]) -> {dtype}[4, 32, 14, 14] "
                  "{ return relu((conv2d(x, w, stride=[2, 2], padding=[1, 1]) - m) * s + b + r) }")
    call = library_call_results(graph, library_conv.ConvCall, torch.backends.cudnn, dtype)
    assert call.epilogue is not None and len(call.epilogue.args) == 6, "the batch norm, residual and ReLU generated"


@pytest.mark.parametrize("replay", [None, True, False], ids=["timed", "replayed", "launched"])
def test_a_graphed_launcher_gives_the_launches_results_whichever_way_it_runs(tmp_path, monkeypatch, replay):
    """GraphedLauncher replaying, launching one by one, or either as timed at the capture: every call gives what
    plain launches give on that call's inputs (new tensors each call), and a timed one has decided at the second."""
    from tilegraph.backends.triton.launch import GraphedLauncher

    monkeypatch.setenv("TILEGRAPH_CACHE_DIR", str(tmp_path))
    graph = parse("def f(x: f32[64, 512], w: f32[512, 256], b: f32[256]) -> f32[64, 256] { return relu(x @ w + b) }")
    fn = tilegraph.compile(graph, target="triton", tf32=False)
    fn.autotune = False
    launcher = fn.launcher()
    graphed = GraphedLauncher(launcher, replay=replay)
    for call in range(4):
        inputs = launcher.check([torch.from_numpy(a).cuda() for a in reference.random_inputs(graph, seed=call)])
        (got,) = graphed(*inputs)
        (want,) = launcher(*inputs)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        if call >= 1:
            assert graphed.replay in (True, False) and (graphed.graph is not None) == graphed.replay


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("calls", [False, True])
@pytest.mark.parametrize("copy", [False, True], ids=["input as given", "input copied NHWC"])
def test_channels_last_convolutions_on_the_gpu(tmp_path, monkeypatch, dtype, calls, copy):
    """Two convolutions over an NHWC intermediate (`channels_last.py`), as generated kernels or as cuDNN calls
    with generated epilogues (torch's convolution on the permuted views), the first reading the graph's NCHW input
    or (`copy`) its channels-last copy (`layout{copy_inputs_from=0}`): the walk, the direct launches and a CUDA
    graph's replay match the reference, in IEEE f32 and bf16."""
    from tilegraph.backends.base import get_backend
    from tilegraph.backends.triton import library_conv
    from tilegraph.backends.triton.launch import GraphedLauncher
    from tilegraph.driver import default_pipeline
    from tilegraph.ir.graph import ValueKind

    monkeypatch.setenv("TILEGRAPH_CACHE_DIR", str(tmp_path))
    c = f"{dtype}[32, 1, 1]"
    graph = parse(f"def f(x: {dtype}[4, 16, 28, 28], w1: {dtype}[32, 16, 3, 3], w2: {dtype}[32, 32, 3, 3], "
                  f"m: {c}, s: {c}, b: {c}) -> {dtype}[4, 32, 14, 14] {{\n"
                  "  h = relu((conv2d(x, w1, stride=[2, 2], padding=[1, 1]) - m) * s + b)\n"
                  "  return relu(conv2d(h, w2, padding=[1, 1]) + h)\n}")
    inputs = reference.random_inputs(graph)
    want = reference.run(graph, inputs)[0].astype(np.float32)
    pipeline = default_pipeline(get_backend("triton").tile_target)  # (channels-last: the GPU pipeline's default)
    layout = "layout{copy_inputs_from=0}" if copy else "layout"
    fn = tilegraph.compile(graph, target="triton", tf32=False, pipeline=pipeline.replace("layout", layout))
    fn.autotune = False
    assert any(v.kind is not ValueKind.PARAM for v in fn.generated.layouts), "h is stored NHWC"
    copies = [k for k in fn.program.kernels if k.nodes[0].op == "cast"]
    assert len(copies) == copy
    if calls:
        state = tuner.state_of(fn)
        convolutions = [(n, s) for n, (k, s) in enumerate(zip(fn.program.kernels, fn.generated.kernels))
                        if s is not None and k.nodes[0].op == "conv2d"]
        assert len(convolutions) == 2
        for position, source in convolutions:
            call = tuner.library_candidate(fn, position, source)
            assert isinstance(call, library_conv.ConvCall)
            tuner.install(fn, state, source, call, source.grid)
    launcher = fn.launcher()
    cuda = launcher.check([torch.from_numpy(a).cuda() for a in inputs])
    graphed = GraphedLauncher(launcher, replay=True)
    results = [launcher(*cuda)[0], launcher(*cuda)[0]] + [graphed(*cuda)[0] for _ in range(3)]
    tolerance = 1e-4 if dtype == "f32" else 3e-2
    for out in results:
        np.testing.assert_allclose(out.float().cpu().numpy(), want, rtol=tolerance,
                                   atol=tolerance * float(np.abs(want).max()))
