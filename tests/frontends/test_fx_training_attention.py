"""The converters of CUDA's fused attention ops (flash, memory-efficient, cuDNN: forward and backward),
which AOTAutograd puts in training graphs on a GPU, checked here on the CPU: each op's graph is traced
with fake tensors (the ops have no CPU kernel; their meta functions give the shapes and dtypes CUDA's
graphs carry), converted, run on the reference and C++ backends, and compared with torch's math
attention and its autograd gradients; the saved logsumexp with a numpy logsumexp of the scaled scores.
"""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs the optional torch extra")
F = torch.nn.functional
aten = torch.ops.aten

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import tilegraph  # noqa: E402
from tilegraph.backends.reference import run  # noqa: E402
from tilegraph.frontends.fx import training  # noqa: E402
from tilegraph.frontends.fx.context import to_numpy  # noqa: E402
from tilegraph.frontends.fx.convert import convert_graph_module  # noqa: E402
from tilegraph.frontends.fx.errors import UnsupportedOpsError  # noqa: E402

CUDNN = hasattr(aten, "_scaled_dot_product_cudnn_attention")
OPS = ["flash", "efficient"] + (["cudnn"] if CUDNN else [])
# (query heads, key/value heads, query length, key length, causal, scale)
CASES = {
    "plain": (3, 3, 5, 7, False, None),
    "causal": (3, 3, 6, 6, True, None),
    "scale": (2, 2, 5, 4, False, 0.3),
    "causal_scale_rectangular": (2, 2, 7, 5, True, 0.25),
    "gqa": (4, 2, 5, 6, False, None),
    "long_query": (2, 2, 37, 9, True, None),  # efficient pads the logsumexp to 64
}


def traced(fn, *inputs):
    """`fn`'s ATen graph traced with fake tensors, each node carrying its fake result as Dynamo's
    graphs do, so that conversion reads shapes from the meta functions and runs nothing."""
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    for node in gm.graph.nodes:
        if "val" in node.meta:
            node.meta["example_value"] = node.meta["val"]
        elif node.op == "call_function":  # picks a None or int result (cum_seq_q, max_q)
            node.meta["example_value"] = node.args[0].meta["val"][node.args[1]]
    return gm


def converted(fn, *inputs):
    """The outputs of `fn`'s converted graph on the reference backend and on the C++ backend."""
    conversion = convert_graph_module(traced(fn, *inputs), inputs)
    arrays = [to_numpy(inputs[i]) for i in conversion.input_positions]
    reference = run(conversion.graph, arrays)
    program = tilegraph.compile(conversion.graph, target="cpp", program_cache=False, cxxflags="-O1 -fopenmp")
    return conversion.graph, reference, [np.asarray(r) for r in program(*arrays)]


def reference_attention(q, k, v, causal, scale, bias=None):
    """torch's math attention and (for a gradient) its q, k, v (and bias) gradients, in float64."""
    leaves = [t.double().requires_grad_() for t in (q, k, v)] + ([bias.double().requires_grad_()] if bias is not None
                                                                 else [])
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(*leaves[:3], attn_mask=leaves[3] if bias is not None else None,
                                             is_causal=causal, scale=scale, enable_gqa=q.shape[1] != k.shape[1])
    return out, leaves


def numpy_logsumexp(q, k, causal, scale, bias=None):
    """[B, H, L] logsumexp over the keys of the scaled (masked) scores, in numpy float64."""
    q, k = q.double().numpy(), k.double().numpy()
    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    scores = q @ k.transpose(0, 1, 3, 2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if bias is not None:
        scores = scores + bias.double().numpy()
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape[-2:], dtype=bool)), scores, -np.inf)
    top = scores.max(-1, keepdims=True)
    return (np.log(np.exp(scores - top).sum(-1, keepdims=True)) + top)[..., 0]


def forward(op, causal, scale, bias=None):
    """The op's forward as a function of (q, k, v[, bias]) returning (output, logsumexp)."""
    if op == "flash":
        return lambda q, k, v: aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, scale=scale)[:2]
    if op == "efficient":
        return lambda q, k, v, *b: aten._scaled_dot_product_efficient_attention(
            q, k, v, b[0] if b else None, True, 0.0, causal, scale=scale)[:2]
    return lambda q, k, v, *b: aten._scaled_dot_product_cudnn_attention(
        q, k, v, b[0] if b else None, True, 0.0, causal, scale=scale)[:2]


def backward(op, causal, scale, lengths, bias=False):
    """The op's backward as a function of (grad, q, k, v, out, logsumexp, seed, offset[, bias])."""
    length, source = lengths
    if op == "flash":
        return lambda g, q, k, v, o, lse: aten._scaled_dot_product_flash_attention_backward(
            g, q, k, v, o, lse, None, None, length, source, 0.0, causal, None, None, scale=scale)
    if op == "efficient":
        return lambda g, q, k, v, o, lse, seed, offset, *b: aten._scaled_dot_product_efficient_attention_backward(
            g, q, k, v, b[0] if b else None, o, lse, seed, offset, 0.0, [True, True, True, bool(b)], causal,
            scale=scale)
    return lambda g, q, k, v, o, lse, seed, offset, *b: aten._scaled_dot_product_cudnn_attention_backward(
        g, q, k, v, o, lse, seed, offset, b[0] if b else None, None, None, length, source, 0.0, causal, scale=scale)


def saved_logsumexp(op, lse):
    """The [B, H, L] logsumexp in the layout the op saves it."""
    if op == "efficient":
        padded = math.ceil(lse.shape[-1] / 32) * 32
        return torch.cat([lse, torch.full(lse.shape[:-1] + (padded - lse.shape[-1],), math.inf)], -1)
    return lse[..., None] if op == "cudnn" else lse


def close(got, want, tolerance=1e-4):
    want = want.detach().numpy() if isinstance(want, torch.Tensor) else want
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)


def inputs(case, seed=0):
    heads, kv_heads, length, source, causal, scale = CASES[case]
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(2, heads, length, 8, generator=generator)
    k, v = (torch.randn(2, kv_heads, source, 8, generator=generator) for _ in range(2))
    return q, k, v, causal, scale


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("op", OPS)
def test_forward_output_and_logsumexp(op, case):
    q, k, v, causal, scale = inputs(case)
    fn = forward(op, causal, scale)
    if op == "efficient" and case == "gqa":  # its meta function gives the key gradient the query's heads
        with pytest.raises(UnsupportedOpsError, match="memory-efficient attention with 4 query heads and 2"):
            convert_graph_module(traced(fn, q, k, v), (q, k, v))
        return
    _, reference, cpp = converted(fn, q, k, v)
    out, _ = reference_attention(q, k, v, causal, scale)
    lse = saved_logsumexp(op, torch.from_numpy(numpy_logsumexp(q, k, causal, scale)).float())
    want_shape = tuple(fn_meta_shapes(fn, q, k, v)[1])
    assert tuple(lse.shape) == want_shape  # the layout the meta function gives (efficient: padded to 32)
    for got in (reference, cpp):
        close(got[0], out.float())
        assert got[1].dtype == np.float32
        close(got[1], lse)


def fn_meta_shapes(fn, *inputs):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        return [t.shape for t in fn(*(mode.from_tensor(x) for x in inputs))]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("op", OPS)
def test_backward_gradients(op, case):
    q, k, v, causal, scale = inputs(case, seed=1)
    out, leaves = reference_attention(q, k, v, causal, scale)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    out.backward(grad.double())
    lse = saved_logsumexp(op, torch.from_numpy(numpy_logsumexp(q, k, causal, scale)).float())
    args = [grad, q, k, v, out.detach().float(), lse]
    if op != "flash":
        args += [torch.tensor(0), torch.tensor(0)]
    if op == "efficient" and case == "gqa":
        return  # the forward is unsupported (above); torch's meta backward would give dk, dv 4 heads
    _, reference, cpp = converted(backward(op, causal, scale, (q.shape[2], k.shape[2])), *args)
    for got in (reference, cpp):
        for g, leaf in zip(got[:3], leaves):
            close(g, leaf.grad.float(), 2e-4)


@pytest.mark.parametrize("op", [o for o in OPS if o != "flash"])
def test_bias_and_its_gradient(op):
    """An additive bias, broadcast over the heads: efficient attention also gives the bias's gradient."""
    q, k, v, causal, scale = inputs("scale", seed=3)
    bias = torch.randn(2, 1, q.shape[2], k.shape[2])
    out, leaves = reference_attention(q, k, v, causal, scale, bias)
    _, reference, cpp = converted(forward(op, causal, scale), q, k, v, bias)
    lse = torch.from_numpy(numpy_logsumexp(q, k, causal, scale, bias)).float()
    for got in (reference, cpp):
        close(got[0], out.float())
        close(got[1], saved_logsumexp(op, lse))
    grad = torch.randn(out.shape)
    out.backward(grad.double())
    args = [grad, q, k, v, out.detach().float(), saved_logsumexp(op, lse), torch.tensor(0), torch.tensor(0), bias]
    _, reference, cpp = converted(backward(op, causal, scale, (q.shape[2], k.shape[2]), bias=True), *args)
    for got in (reference, cpp):
        for g, leaf in zip(got, leaves if op == "efficient" else leaves[:3]):
            close(g, leaf.grad.float(), 2e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_keeps_f32_statistics(dtype):
    q, k, v, causal, scale = inputs("causal")
    q, k, v = (t.to(dtype) for t in (q, k, v))
    _, reference, _ = converted(forward("flash", causal, scale), q, k, v)
    assert reference[0].dtype == (np.float16 if dtype is torch.float16 else np.float32)  # bf16 is stored as f32
    assert reference[1].dtype == np.float32
    close(reference[1], numpy_logsumexp(q.float(), k.float(), causal, scale), 1e-2)


@pytest.mark.parametrize("op", ["efficient"] + (["cudnn"] if CUDNN else []))
def test_seeds_saved_for_the_backward_are_zeros(op):
    """The philox seed and offset the forward graph returns (saved for the backward) are i64 zeros."""
    q, k, v, causal, scale = inputs("plain")
    if op == "efficient":
        def fn(q, k, v):
            out, lse, seed, offset = aten._scaled_dot_product_efficient_attention(q, k, v, None, True)
            return out, seed, offset
    else:
        def fn(q, k, v):
            result = aten._scaled_dot_product_cudnn_attention(q, k, v, None, True)
            return result[0], result[6], result[7]
    _, reference, cpp = converted(fn, q, k, v)
    for got in (reference, cpp):
        assert got[1].shape == () and got[1].dtype == np.int64 and got[1] == 0 and got[2] == 0


def test_a_seed_read_by_arithmetic_is_reported():
    q, k, v, causal, scale = inputs("plain")

    def fn(q, k, v):
        out, lse, seed, offset = aten._scaled_dot_product_efficient_attention(q, k, v, None, True)
        return out, seed + 1

    with pytest.raises(UnsupportedOpsError, match="philox seed of fused attention"):
        convert_graph_module(traced(fn, q, k, v), (q, k, v))


def test_flash_rng_state_returned_is_reported():
    """flash's rng_state is uint64, which the IR has not: returning it is reported, not zero-filled."""
    q, k, v, causal, scale = inputs("plain")
    fn = lambda q, k, v: aten._scaled_dot_product_flash_attention(q, k, v)[::6]  # noqa: E731 (out, rng_state)
    with pytest.raises(UnsupportedOpsError, match="random-number state of fused attention"):
        convert_graph_module(traced(fn, q, k, v), (q, k, v))


@pytest.mark.parametrize("op", OPS)
def test_dropout_is_unsupported(op):
    q, k, v, causal, scale = inputs("plain")
    if op == "flash":
        fn = lambda q, k, v: aten._scaled_dot_product_flash_attention(q, k, v, 0.1)[0]  # noqa: E731
    elif op == "efficient":
        fn = lambda q, k, v: aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.1)[0]  # noqa: E731
    else:
        fn = lambda q, k, v: aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.1)[0]  # noqa: E731
    with pytest.raises(UnsupportedOpsError, match="dropout p=0.1"):
        convert_graph_module(traced(fn, q, k, v), (q, k, v))


def test_cuda_attention_ops_are_not_decomposed():
    table = training.decompositions()
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu"):
        if hasattr(aten, name):
            assert getattr(aten, name).default not in table


# ----- AOTAutograd's graphs of a CUDA attention op: the random state stays out of the compiled graphs ----
def aot_graphs(fn, *inputs):
    """The forward and backward graphs AOTAutograd makes for `fn` (traced on fake tensors)."""
    from functorch.compile import aot_function, make_boxed_func
    from torch._subclasses.fake_tensor import FakeTensorMode

    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fakes = [mode.from_tensor(x).requires_grad_() for x in inputs]
        aot_function(fn, capture, capture, decompositions=training.decompositions())(*fakes).sum().backward()
    return graphs


def call_converted(gm, args):
    """`gm` converted (shapes from AOTAutograd's fake values) and run on the reference backend."""
    for node in gm.graph.nodes:
        if "val" in node.meta:
            node.meta["example_value"] = node.meta["val"]
    conversion = convert_graph_module(gm, args)
    results = run(conversion.graph, [to_numpy(args[i]) for i in conversion.input_positions])
    return [torch.from_numpy(np.asarray(results[leaf])) if isinstance(leaf, int) else leaf[1]
            for leaf in conversion.output_leaves]


@pytest.mark.parametrize("op", OPS)
def test_aot_graphs_train_without_the_random_state(op):
    """The forward graph returns None for the random state it saves (the runtime fills in an empty tensor),
    the backward graph no longer takes it: both convert, and the gradients are math attention's."""
    q, k, v, causal, scale = inputs("causal", seed=4)
    fn = forward(op, causal, scale)
    forward_graph, backward_graph = aot_graphs(lambda q, k, v: fn(q, k, v)[0], q, k, v)
    dropped = training.forward_without_rng(forward_graph)
    removed = training.backward_without_rng(backward_graph)
    assert len(dropped) == 2 and len(removed) == 2
    results = call_converted(forward_graph, [q, k, v])
    assert [results[i] for i, _ in dropped] == [None, None]
    out, leaves = reference_attention(q, k, v, causal, scale)
    close(results[0].numpy(), out.float())
    grad = torch.randn(out.shape)
    saved = [r for i, r in enumerate(results[1:], 1) if i not in dict(dropped)]
    grads = call_converted(backward_graph, saved + [grad])
    out.backward(grad.double())
    for g, leaf in zip(grads, leaves):
        close(g.numpy(), leaf.grad.float(), 2e-4)
