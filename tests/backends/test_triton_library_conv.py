"""The convolution library call (`library_conv.py`): a kernel that starts with one conv2d, run by torch's
convolution, then the kernel's other ops (a batch norm, a bias, a residual add, ReLU...) as one generated Triton
kernel. On the CPU torch's convolution and the Triton interpreter run it, so what it computes (strides, padding,
dilation, groups, the epilogue) is checked against the reference here; on CUDA the same call is cuDNN's."""
from __future__ import annotations

import os
from dataclasses import replace

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

torch = pytest.importorskip("torch", reason="the Triton backend runs on torch tensors")
triton = pytest.importorskip("triton", reason="triton is not installed (pip install 'tilegraph[triton]')")

from hypothesis import given, settings, strategies as st  # noqa: E402

import tilegraph  # noqa: E402
from tilegraph.backends import reference  # noqa: E402
from tilegraph.backends.triton import library, library_conv, tuner  # noqa: E402
from tilegraph.frontends.dsl import parse  # noqa: E402

from triton_cases import assert_same  # noqa: E402

# the epilogue after conv2d (as `y`), with m, s, b per channel and r the residual
EPILOGUES = {
    "none": "y",
    "bias": "y + b",
    "batch_norm": "(y - m) * s + b",
    "batch_norm_relu": "relu((y - m) * s + b)",
    "batch_norm_residual_relu": "relu((y - m) * s + b + r)",
    "scale_first": "s * y + b",
    "relu_then_scale": "relu(y) * s",
    "long": "sigmoid(exp(relu((y - m) * s + b)) + r) * s",  # any elementwise chain
    "gelu_residual": "gelu(y + b) + r",
    "batch_norm_relu6": "relu6((y - m) * s + b)",  # MobileNetV2's
}


def conv_source(n, c, h, w, f, k, stride, padding, dilation, groups, epilogue, dtype="f32") -> tuple[str, int, int]:
    oh = (h + 2 * padding - dilation * (k - 1) - 1) // stride + 1
    ow = (w + 2 * padding - dilation * (k - 1) - 1) // stride + 1
    body = EPILOGUES[epilogue].replace(
        "y", f"conv2d(x, w, stride=[{stride}, {stride}], padding=[{padding}, {padding}], "
             f"dilation=[{dilation}, {dilation}], groups={groups})")
    channel = f"{dtype}[{f}, 1, 1]"
    return (f"def f(x: {dtype}[{n}, {c}, {h}, {w}], w: {dtype}[{f}, {c // groups}, {k}, {k}], m: {channel}, "
            f"s: {channel}, b: {channel}, r: {dtype}[{n}, {f}, {oh}, {ow}]) -> {dtype}[{n}, {f}, {oh}, {ow}] "
            f"{{ return {body} }}"), oh, ow


def conv_calls(fn) -> dict[int, library_conv.ConvCall]:
    found = {}
    for position, source in enumerate(fn.generated.kernels):
        if source is not None:
            call = tuner.library_candidate(fn, position, source)
            if isinstance(call, library_conv.ConvCall):
                found[position] = call
    return found


def run_with_calls(graph, fn, calls, inputs):
    state = tuner.state_of(fn)
    for position, call in calls.items():
        tuner.install(fn, state, fn.generated.kernels[position], call, fn.generated.kernels[position].grid)
    return fn(*inputs)


@given(n=st.integers(1, 2), c=st.sampled_from([1, 3, 4, 8]), hw=st.integers(4, 11), f=st.sampled_from([2, 4, 8]),
       k=st.sampled_from([1, 3, 5]), stride=st.integers(1, 2), padding=st.integers(0, 2), dilation=st.integers(1, 2),
       grouped=st.booleans(), epilogue=st.sampled_from(sorted(EPILOGUES)))
@settings(max_examples=25, deadline=None)
def test_any_convolution_and_epilogue_runs_as_a_library_call(n, c, hw, f, k, stride, padding, dilation, grouped,
                                                             epilogue):
    groups = c if grouped and f % c == 0 else 1
    if hw + 2 * padding < dilation * (k - 1) + 1:
        return  # the kernel is larger than the padded input
    source, _, _ = conv_source(n, c, hw, hw, f, k, stride, padding, dilation, groups, epilogue)
    graph = parse(source)
    fn = tilegraph.compile(graph, target="triton")
    calls = conv_calls(fn)
    assert len(calls) == 1, [[n.op for n in kernel.nodes] for kernel in fn.program.kernels]
    ((position, call),) = calls.items()
    kernel = fn.program.kernels[position]
    assert (call.epilogue is None) == (len(kernel.nodes) == 1), "every op after the convolution is generated"
    if call.epilogue is not None:
        assert call.epilogue.args.count(None) == 1, "the epilogue reads the convolution's result once"
        assert call.epilogue.grid == fn.generated.kernels[position].grid, "on the kernel's own grid"
    inputs = reference.random_inputs(graph)
    assert_same(run_with_calls(graph, fn, calls, inputs), reference.run(graph, inputs),
                [v.type for v in graph.outputs])


def test_a_resnet_runs_with_every_convolution_as_a_library_call():
    """A small ResNet-50 (transformers' config, batch norms after every convolution, residual adds, ReLUs): every
    convolution kernel is a library call, and the model with all of them installed matches the reference."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from torch_models import WHOLE_MODELS
    from tilegraph.frontends.fx import from_module

    (model,) = [m for m in WHOLE_MODELS if m.name == "resnet50"]
    module, inputs = model.build_in("f32", 2, True, None)
    with torch.no_grad():
        graph = from_module(module, inputs)
    fn = tilegraph.compile(graph, target="triton")
    convolutions = [p for p, kernel in enumerate(fn.program.kernels)
                    if fn.generated.kernels[p] is not None and any(node.op == "conv2d" for node in kernel.nodes)]
    calls = conv_calls(fn)
    assert set(calls) == set(convolutions)
    assert all(call.epilogue is not None and "_library_epilogue" in call.epilogue.text for call in calls.values())
    arrays = [t.numpy() for t in inputs]
    assert_same(run_with_calls(graph, fn, calls, arrays), reference.run(graph, arrays),
                [v.type for v in graph.outputs])
    assert fn.report().count("library call (torch convolution") == len(calls)


def test_bf16_epilogue_reads_the_rounded_convolution():
    source, _, _ = conv_source(2, 4, 8, 8, 8, 3, 1, 1, 1, 1, "batch_norm_residual_relu", dtype="bf16")
    graph = parse(source)
    fn = tilegraph.compile(graph, target="triton")
    calls = conv_calls(fn)
    inputs = reference.random_inputs(graph)
    assert_same(run_with_calls(graph, fn, calls, inputs), reference.run(graph, inputs),
                [v.type for v in graph.outputs])


@pytest.mark.parametrize("body, out", [
    # asymmetric padding: torch's convolution pads evenly
    ("conv2d(x, w, padding=[1, 1], padding_end=[0, 0])", "f32[1, 4, 7, 7]"),
    # a reduction after the convolution: not over its output points alone
    ("sum(relu(conv2d(x, w)), axes=[2, 3])", "f32[1, 4]"),
])
def test_what_is_not_a_convolution_library_call(body, out):
    fn = tilegraph.compile(parse(f"def f(x: f32[1, 2, 8, 8], w: f32[4, 2, 3, 3]) -> {out} {{ return {body} }}"),
                           target="triton")
    assert len(fn.program.kernels) == 1 and not conv_calls(fn)


def test_the_convolution_flag_is_left_alone_off_cuda():
    before = torch.backends.cudnn.allow_tf32
    with library.precision(torch, torch.ones(2), not before, conv=True):
        assert torch.backends.cudnn.allow_tf32 == before


def test_permuted_weights_are_copied_once_per_version():
    """Weights stored permuted for the generated kernel (`packing.py`) are copied into the layout torch's
    convolution reads once, then reused; copied again after they change in place, or when a new tensor takes
    their place (even one the allocator put at the same address)."""
    source, _, _ = conv_source(1, 4, 8, 8, 8, 3, 1, 1, 1, 1, "batch_norm_relu")
    fn = tilegraph.compile(parse(source), target="triton")
    (call,) = conv_calls(fn).values()
    packed = (2, 3, 0, 1)  # as `packing.py` stores a tensor-core convolution's weight: [kh, kw, f, c]
    call = replace(call, w=library.Operand(call.w.position, library.inverse(packed)), _weights={})

    def args_with(stored):
        args = [None] * (call.w.position + 1)
        args[call.w.position] = stored
        return args

    stored = torch.randn(8, 4, 3, 3).permute(*packed).contiguous()
    args, x = args_with(stored), torch.randn(1, 4, 8, 8)
    first = call.weights(torch, args, x)
    assert first.is_contiguous() and torch.equal(first, call.w.of(args)) and call.weights(torch, args, x) is first
    stored.mul_(2)
    again = call.weights(torch, args, x)
    assert again is not first and torch.equal(again, call.w.of(args))
    fresh = stored.clone()
    fresh.mul_(3)  # the same version as the cached one's source, other values
    replaced = args_with(fresh)
    assert torch.equal(call.weights(torch, replaced, x), call.w.of(replaced)), "a new tensor: copied anew"
    nhwc = x.to(memory_format=torch.channels_last)
    assert call.weights(torch, args, nhwc).is_contiguous(memory_format=torch.channels_last)
