"""Channels-last activations in the Triton backend (the layout pass's `Program.layouts`): which tensors it stores
NHWC, and that every kernel, generated or a convolution's library call, computes the same results from them."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

torch = pytest.importorskip("torch", reason="the Triton backend runs on torch tensors")
triton = pytest.importorskip("triton", reason="triton is not installed (pip install 'tilegraph[triton]')")

from hypothesis import example, given, settings, strategies as st  # noqa: E402

import tilegraph  # noqa: E402
from tilegraph.backends import reference  # noqa: E402
from tilegraph.backends.base import get_backend  # noqa: E402
from tilegraph.backends.triton import TritonOptions, library_conv, tuner  # noqa: E402
from tilegraph.driver import default_pipeline  # noqa: E402
from tilegraph.frontends.dsl import parse_file, parse  # noqa: E402
from tilegraph.ir import TilegraphError  # noqa: E402
from tilegraph.ir.graph import ValueKind  # noqa: E402
from tilegraph.passes.layout import NHWC  # noqa: E402

from triton_cases import EXAMPLES, assert_same, check  # noqa: E402

TARGET = get_backend("triton").tile_target


def pipeline(channels_last: bool) -> str:
    return default_pipeline(TARGET, channels_last=channels_last)


def with_conv_calls(fn) -> int:
    """Install every convolution kernel's library call; how many."""
    state, count = tuner.state_of(fn), 0
    for position, source in enumerate(fn.generated.kernels):
        call = tuner.library_candidate(fn, position, source) if source is not None else None
        if isinstance(call, library_conv.ConvCall):
            tuner.install(fn, state, source, call, source.grid)
            count += 1
    return count


def test_lenet_stores_its_convolution_activations_channels_last():
    """LeNet: the activations between its convolutions and pools are NHWC; the image (a graph input), the
    flattened features (read by a reshape) and the matmuls' operands keep their layout; so does a 5 x 5 weight
    whose convolution reads the image, while the second convolution's weight is stored [F, kh, kw, C]."""
    graph = parse_file(str(EXAMPLES / "lenet.tg"))
    fn = check(graph, pipeline=pipeline(True))
    names = {fn.generated.names[v]: order for v, order in fn.generated.layouts.items()}
    stored = {name for name, order in names.items() if order == NHWC}
    by_name = {fn.generated.names[v]: v for v in fn.generated.layouts}
    activations = {name for name in stored if by_name[name].kind is not ValueKind.PARAM}
    assert activations, names
    assert all(by_name[name].type.rank == 4 for name in activations)
    assert "conv2_weight" in stored and "conv1_weight" not in stored, names
    graph_io = {fn.generated.names[v] for v in (*fn.program.graph.inputs, *fn.program.graph.outputs)}
    assert not activations & graph_io
    flat_source = next(n.inputs[0] for n in fn.program.graph.nodes if n.op == "reshape" and n.result.type.rank == 2)
    assert flat_source not in fn.generated.layouts, "read by a reshape: its own layout"
    assert "# activations stored with permuted axes:" in fn.source
    assert f"channels-last activations ({', '.join(sorted(activations, key=list(names).index))})" in fn.report()
    default = tilegraph.compile(graph, target="triton")
    assert {default.generated.names[v] for v in default.generated.layouts} == set(names), "the default"
    off = tilegraph.compile(graph, target="triton", pipeline=pipeline(False))
    assert not off.program.layouts and all(v.kind is ValueKind.PARAM for v in off.generated.layouts)


def test_a_resnet_channels_last_matches_with_and_without_conv_calls():
    """A small ResNet-50 (transformers' config) channels-last: its generated kernels, then with every convolution
    as a library call (torch's convolution on permuted views, the epilogue reading its result as torch stored it),
    match the reference."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from torch_models import WHOLE_MODELS
    from tilegraph.frontends.fx import from_module

    (model,) = [m for m in WHOLE_MODELS if m.name == "resnet50"]
    module, inputs = model.build_in("f32", 2, True, None)
    with torch.no_grad():
        graph = from_module(module, inputs)
    arrays = [t.numpy() for t in inputs]
    want = reference.run(graph, arrays)
    fn = tilegraph.compile(graph, target="triton")
    assert sum(v.kind is not ValueKind.PARAM for v in fn.generated.layouts) >= 10
    types = [v.type for v in graph.outputs]
    assert_same(fn(*arrays), want, types)
    assert with_conv_calls(fn) == sum(k.nodes[0].op == "conv2d" for k in fn.program.kernels)
    assert_same(fn(*arrays), want, types)



def interpreted(fn, grid, args, warps, stages):
    """A `launch.compiled_runner` for the interpreter: each kernel through its jit function's own dispatch."""
    return fn if isinstance(fn, library_conv.ConvCall) else lambda *tensors: fn[(grid,)](*tensors)


def test_direct_launches_bind_channels_last_views_in_their_stored_shape():
    """The direct launch path (`launch.DirectLaunch`, which CUDA calls take) binds each NHWC arena view in its
    stored shape, as the module's steps do, so a convolution's library call reading one through torch sees its
    channels where they are (it once saw [N, H, C, W]: torch refused the call, or the tuner dropped it)."""
    graph = parse("def f(x: f32[2, 4, 9, 9], w1: f32[8, 4, 3, 3], w2: f32[8, 8, 3, 3], m: f32[8, 1, 1]) "
                  "-> f32[2, 8, 5, 5] {\n  h = relu(conv2d(x, w1, stride=[2, 2], padding=[1, 1]) - m)\n"
                  "  return relu(conv2d(h, w2, padding=[1, 1]) + h)\n}")
    inputs = reference.random_inputs(graph)
    fn = tilegraph.compile(graph, target="triton")
    assert with_conv_calls(fn) == 2
    launcher = fn.launcher()
    tensors = launcher.check([torch.from_numpy(a) for a in inputs])
    launcher.bind_direct(tensors, interpreted)
    assert launcher.direct, launcher.direct_error
    env, _ = launcher.arguments(tensors)
    stored = [env[launcher._slots[fn.generated.names[v]]].shape for v, order in fn.generated.layouts.items()
              if v.kind is not ValueKind.PARAM]
    assert stored and all(shape[1] == shape[2] != shape[3] for shape in stored), stored  # [N, H, W, C]
    assert_same([t.numpy() for t in launcher.direct(tensors)], reference.run(graph, inputs),
                [v.type for v in graph.outputs])

@given(n=st.integers(1, 2), c=st.sampled_from([3, 4, 8]), hw=st.integers(5, 10), f=st.sampled_from([4, 8]),
       k=st.sampled_from([1, 3]), stride=st.integers(1, 2), grouped=st.booleans(), pool=st.booleans(),
       calls=st.booleans(), copy=st.booleans())
@example(n=1, c=4, hw=6, f=4, k=3, stride=1, grouped=False, pool=False, calls=True, copy=True)
@settings(max_examples=8, deadline=None)
def test_any_convolution_chain_runs_channels_last(n, c, hw, f, k, stride, grouped, pool, calls, copy):
    """conv -> batch norm -> ReLU -> (grouped) conv + residual -> (max pool): the same results channels-last, with
    the generated kernels or the convolutions' library calls, the image read as it is or (`copy`, where its channels
    fill whole vectors) through its channels-last copy."""
    groups = f if grouped else 1
    oh = (hw + 2 * (k // 2) - k) // stride + 1
    ph = (oh - 2) // 2 + 1 if pool else oh
    tail = "max_pool2d(y, kernel=2, stride=2)" if pool else "y"
    per = f"f32[{f}, 1, 1]"
    source = (f"def f(x: f32[{n}, {c}, {hw}, {hw}], w1: f32[{f}, {c}, {k}, {k}], w2: f32[{f}, {f // groups}, 3, 3], "
              f"m: {per}, s: {per}, b: {per}) -> f32[{n}, {f}, {ph}, {ph}] {{\n"
              f"  h = relu((conv2d(x, w1, stride=[{stride}, {stride}], padding=[{k // 2}, {k // 2}]) - m) * s + b)\n"
              f"  y = relu(conv2d(h, w2, padding=[1, 1], groups={groups}) + h)\n"
              f"  return {tail}\n}}")
    graph = parse(source)
    inputs = reference.random_inputs(graph)
    layout = "layout{copy_inputs_from=0}" if copy else "layout"
    fn = tilegraph.compile(graph, target="triton", pipeline=pipeline(True).replace("layout", layout))
    inputs_of = set(fn.program.graph.inputs)
    copied = [k for k in fn.program.kernels if k.nodes[0].op == "cast" and k.nodes[0].inputs[0] in inputs_of]
    assert len(copied) == (copy and c * 4 % 16 == 0)
    if calls:
        assert with_conv_calls(fn) >= 1
    assert_same(fn(*inputs), reference.run(graph, inputs), [v.type for v in graph.outputs])


def test_the_layout_is_the_pipelines_and_is_reported(monkeypatch):
    """Channels-last is the default GPU pipeline's layout pass, off with $TILEGRAPH_CHANNELS_LAST=0; as a build
    option it is refused with a message saying where it went."""
    graph = parse_file(str(EXAMPLES / "resnet_block.tg"))
    fn = tilegraph.compile(graph, target="triton")
    assert "laid_out" in fn.program.properties
    assert "channels-last activations (h)" in fn.report()
    monkeypatch.setenv("TILEGRAPH_CHANNELS_LAST", "0")
    assert default_pipeline(TARGET) == pipeline(False) != pipeline(True)
    assert not tilegraph.compile(graph, target="triton").program.layouts
    with pytest.raises(TilegraphError, match="layout pass"):
        TritonOptions.resolve(options={"channels_last": True})
    with pytest.raises(TilegraphError, match="unknown Triton build option"):
        TritonOptions.resolve(options={"channel_last": True})


def test_a_convolution_over_channels_last_loads_whole_vectors_on_sm90(tmp_path, monkeypatch):
    """Compiled for sm_90 (TF32): the ResNet block's second convolution, whose input is stored NHWC, stages every
    load in 16-byte vectors; NCHW, 24 of its copies move one element (4 B cp.async: a gather along K). The first
    convolution reads the block's input, a graph input kept NCHW, either way."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    graph = parse_file(str(EXAMPLES / "resnet_block.tg"))
    narrow = {}
    for on in (False, True):
        fn = tilegraph.compile(graph, target="triton", tf32=True, pipeline=pipeline(on))
        records = {r.function: r for r in fn.compile_ahead(90)}
        first, second = (s for s in fn.generated.kernels if s is not None and s.uses_dot)
        narrow[on] = (records[first.function].narrow_loads, records[second.function].narrow_loads)
    assert narrow[True][1] == 0 < narrow[False][1], narrow
    assert narrow[True][0] == narrow[False][0] > 0, narrow


def test_a_depthwise_filter_is_stored_channels_innermost():
    """Over an NHWC input, a depthwise convolution's filter [C, 1, 3, 3] is bound [1, 3, 3, C] (its kernel
    takes a block of channels, so each tap's weights are one contiguous vector); a dense filter [F, 3, 3, C].
    The generated kernels and the cuDNN calls give the reference's results."""
    from tilegraph.backends.triton.packing import DEPTHWISE

    graph = parse("def f(x: f32[2, 8, 10, 10]) -> f32[2, 16, 10, 10] {\n  param w1: f32[16, 8, 3, 3]\n"
                  "  param w2: f32[16, 1, 3, 3]\n  param w3: f32[16, 16, 3, 3]\n"
                  "  h = relu(conv2d(x, w1, padding=[1, 1]))\n"
                  "  d = relu(conv2d(h, w2, padding=[1, 1], groups=16))\n"
                  "  return conv2d(d, w3, padding=[1, 1])\n}")
    inputs = reference.random_inputs(graph)
    fn = tilegraph.compile(graph, target="triton")
    stored = {v.name: order for v, order in fn.generated.layouts.items()}
    assert stored["w2"] == DEPTHWISE and stored["w3"] == NHWC, stored
    want = reference.run(graph, inputs)
    assert_same(fn(*inputs), want, [v.type for v in graph.outputs])
    assert with_conv_calls(fn) == 3
    assert_same(fn(*inputs), want, [v.type for v in graph.outputs])
