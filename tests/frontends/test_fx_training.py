"""Training under torch.compile(backend="tilegraph"): graphs that need gradients go through AOTAutograd,
their forward and backward ATen graphs compiled by tilegraph (C++ here; the Triton path is
test_fx_training_triton.py). Gradients, outputs and updated weights equal eager PyTorch's on an MLP, a
small CNN and a transformer block; inference keeps the direct path. The converters for the backward
ops (convolution, max/average pool, var_mean, layer-norm statistics) are checked on their own against
torch, on the reference backend, over strides, padding, dilation, groups and ceil mode.
"""
import copy
import os
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs the optional torch extra")
nn = torch.nn
F = torch.nn.functional
aten = torch.ops.aten

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import tilegraph.frontends.fx  # noqa: E402,F401  (registers the backend)
from tilegraph.backends.reference import run  # noqa: E402
from tilegraph.frontends.fx import TilegraphFallbackWarning, training  # noqa: E402
from tilegraph.frontends.fx.convert import convert_graph_module  # noqa: E402


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


# ----- the models ----------------------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class CNN(nn.Module):
    """conv -> batch norm (training mode: batch statistics, running statistics updated) -> relu -> max pool
    -> strided, grouped conv -> relu -> avg pool -> linear."""

    def __init__(self, size=16):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
        self.fc = nn.Linear(6 * (size // 8) ** 2, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv1(x))), 2)
        x = F.avg_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


class Block(nn.Module):
    """A pre-norm transformer block: layer norm, attention written out (matmul, softmax, dropout p=0),
    GELU MLP, residuals."""

    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.drop = nn.Dropout(0.0)

    def forward(self, x):
        batch, length, dim = x.shape
        q, k, v = (t.view(batch, length, self.heads, dim // self.heads).transpose(1, 2)
                   for t in self.qkv(self.ln1(x)).split(dim, -1))
        scores = self.drop(torch.softmax(q @ k.transpose(-1, -2) / (dim // self.heads) ** 0.5, -1))
        x = x + self.out((scores @ v).transpose(1, 2).reshape(batch, length, dim))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


MODELS = {
    "mlp": (MLP, (4, 8)),
    "cnn": (CNN, (2, 3, 16, 16)),
    "transformer_block": (Block, (2, 5, 16)),
}


def assert_close(got, want, what, tolerance=1e-4):
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
    scale = max(want.abs().max().item(), 1.0)
    assert (got - want).abs().max().item() <= tolerance * scale, (what, (got - want).abs().max().item())


def train_like_eager(name, options=None, steps=2, tolerance=1e-4, shape=None, device="cpu"):
    """`steps` SGD steps of the compiled model beside eager on a copy, with fallbacks as errors:
    outputs, gradients, updated weights and buffers (batch-norm statistics) must agree."""
    cls, default_shape = MODELS[name]
    shape = shape or default_shape
    model = (cls(shape[-1]) if cls is CNN else cls()).train().to(device)
    reference = copy.deepcopy(model)
    step = torch.optim.SGD(model.parameters(), lr=0.1)
    reference_step = torch.optim.SGD(reference.parameters(), lr=0.1)
    run_model = torch.compile(model, backend="tilegraph", options=options or {})
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilegraphFallbackWarning)
        for _ in range(steps):
            x = torch.randn(shape, device=device)
            got, want = run_model(x), reference(x)
            assert got.requires_grad
            assert_close(got, want, "output", tolerance)
            (got * torch.linspace(-1, 1, got.numel(), device=device).view(got.shape)).sum().backward()
            (want * torch.linspace(-1, 1, want.numel(), device=device).view(want.shape)).sum().backward()
            for (path, p), q in zip(model.named_parameters(), reference.parameters()):
                assert_close(p.grad, q.grad, f"gradient of {path}", tolerance)
            step.step(), reference_step.step()
            step.zero_grad(), reference_step.zero_grad()
    for (path, b), c in zip(model.named_buffers(), reference.buffers()):
        if b.dtype.is_floating_point:
            assert_close(b, c, f"buffer {path}", tolerance)
    for (path, p), q in zip(model.named_parameters(), reference.parameters()):
        assert_close(p.detach(), q.detach(), f"updated {path}", tolerance)


# ----- training ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_gives_eager_gradients_on_the_cpp_path(name, built):
    train_like_eager(name)
    # one forward and one backward graph, each compiled once: the optimizer's in-place updates are read
    # at each call (weights are graph inputs here), not copied into the program
    assert len(built) == 2
    assert {target for _, target in built} == {"cpp"}


def test_training_with_dynamic_shapes_converts_per_call_shape(built):
    model = MLP()
    reference = copy.deepcopy(model)
    run_model = torch.compile(model, backend="tilegraph", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilegraphFallbackWarning)
        for rows in (2, 7):
            x = torch.randn(rows, 8)
            run_model(x).square().sum().backward()
            reference(x).square().sum().backward()
    for (path, p), q in zip(model.named_parameters(), reference.parameters()):
        assert_close(p.grad, q.grad, f"gradient of {path}")
    # a forward and a backward graph per batch size, the batch's rows among the forward's inputs
    shapes = [{v.type.shape for v in graph.inputs} for graph, _ in built]
    assert len(shapes) == 4 and (2, 8) in shapes[0] and (7, 8) in shapes[2]


class Decoder(nn.Module):
    """Token and position embeddings, a causal pre-norm encoder layer (its attention is torch's fused
    CPU flash-attention op, forward and backward), the vocabulary head and cross entropy inside the graph."""

    def __init__(self, vocabulary=50, dim=16):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocabulary, dim), nn.Embedding(8, dim)
        self.layer = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.0, batch_first=True, norm_first=True)
        self.head = nn.Linear(dim, vocabulary)

    def forward(self, tokens, targets):
        x = self.tokens(tokens) + self.positions(torch.arange(tokens.shape[1]))
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1])
        x = self.layer(x, src_mask=mask, is_causal=True)
        return F.cross_entropy(self.head(x).flatten(0, 1), targets.flatten())


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)], ids=["f32", "bf16"])
def test_a_decoder_with_its_loss_inside_the_graph_trains_like_eager(dtype, tolerance, built):
    model = Decoder().to(dtype)  # bf16: attention and layer-norm statistics stay f32, as torch keeps them
    reference = copy.deepcopy(model)
    tokens, targets = torch.randint(0, 50, (2, 8)), torch.randint(0, 50, (2, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilegraphFallbackWarning)
        loss = torch.compile(model, backend="tilegraph")(tokens, targets)
        loss.backward()
    want = reference(tokens, targets)
    want.backward()
    assert_close(loss, want, "loss", tolerance)
    for (path, p), q in zip(model.named_parameters(), reference.parameters()):
        assert_close(p.grad, q.grad, f"gradient of {path}", tolerance)
    assert len(built) == 2
    assert any(n.op == "attention" for n in built[0][0].nodes)  # the forward keeps the fused attention


@pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
                    reason="needs a CUDA device (and no Triton interpreter in this process)")
@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_on_a_cuda_device(name, built):
    # f32 convolutions run in TF32 (cuDNN's default, which the Triton path follows); eager's too
    train_like_eager(name, device="cuda", tolerance=5e-3 if name == "cnn" else 1e-4)
    assert len(built) == 2 and {target for _, target in built} == {"triton"}


def test_the_issue_reproducer_backward_works():
    mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    loss = torch.compile(mlp, backend="tilegraph")(torch.randn(4, 8)).sum()
    loss.backward()  # was: element 0 of tensors does not require grad and does not have a grad_fn
    assert all(p.grad is not None for p in mlp.parameters())


def test_gradient_with_respect_to_an_input(built):
    def fn(x, y):
        return (torch.softmax(x @ y, -1) * y.sum()).tanh()

    x, y = torch.randn(3, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True)
    x2, y2 = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilegraphFallbackWarning)
        torch.compile(fn, backend="tilegraph")(x, y).sum().backward()
    fn(x2, y2).sum().backward()
    assert_close(x.grad, x2.grad, "x"), assert_close(y.grad, y2.grad, "y")
    assert len(built) == 2


def test_inference_keeps_the_direct_path(monkeypatch, built):
    def refuse(*args):
        raise AssertionError("AOTAutograd used for a graph that needs no gradient")

    monkeypatch.setattr(training, "compile_with_autograd", refuse)
    model = MLP()
    x = torch.randn(4, 8)
    with torch.no_grad():
        got = torch.compile(model, backend="tilegraph")(x)
    assert not got.requires_grad
    assert_close(got, model(x).detach(), "no_grad output")
    torch._dynamo.reset()
    model.requires_grad_(False)  # grad mode on, but nothing to differentiate
    assert_close(torch.compile(model, backend="tilegraph")(x), model(x), "frozen output")
    # Dynamo's graph itself, weights as named parameters: the direct path's conversion
    assert [graph.inputs[0].type.shape for graph, _ in built] == [(4, 8), (4, 8)]
    assert all(any(p.name == "fc1.weight" for p in graph.params) for graph, _ in built)


def test_needs_autograd():
    gm = torch.fx.symbolic_trace(MLP())
    x = torch.randn(2, 8)
    assert training.needs_autograd(gm, [x])
    with torch.no_grad():
        assert not training.needs_autograd(gm, [x])
    gm.requires_grad_(False)
    assert not training.needs_autograd(gm, [x])
    assert training.needs_autograd(gm, [x.requires_grad_()])


def test_a_backward_graph_that_cannot_be_converted_runs_eagerly_with_a_warning(built, monkeypatch):
    from tilegraph.frontends.fx import registry

    monkeypatch.delitem(registry.FUNCTIONS, aten.max_pool2d_with_indices_backward)  # as if it had no converter
    model = CNN().train()
    reference = copy.deepcopy(model)
    x = torch.randn(2, 3, 16, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(model, backend="tilegraph")(x)
        got.sum().backward()
    fallbacks = [str(w.message) for w in caught if w.category is TilegraphFallbackWarning]
    assert len(fallbacks) == 1 and "aten.max_pool2d_with_indices_backward" in fallbacks[0], fallbacks
    want = reference(x)
    want.sum().backward()
    assert_close(got, want, "output")
    for (path, p), q in zip(model.named_parameters(), reference.parameters()):
        assert_close(p.grad, q.grad, f"gradient of {path}")
    assert len(built) == 1  # the forward graph


def test_a_forward_graph_that_cannot_be_converted_runs_eagerly_with_a_warning():
    def fn(x):
        return torch.logcumsumexp(x, 1) * 2

    x = torch.randn(3, 4, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    with pytest.warns(TilegraphFallbackWarning, match="logcumsumexp"):
        torch.compile(fn, backend="tilegraph")(x).sum().backward()
    fn(x2).sum().backward()
    assert_close(x.grad, x2.grad, "gradient")


def test_a_graph_aotautograd_cannot_split_runs_eagerly_with_a_warning(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no decomposition today")

    decompositions = training.decompositions()
    decompositions[aten.addmm.default] = broken  # AOTAutograd's trace fails where it decomposes addmm
    monkeypatch.setattr(training, "decompositions", lambda: decompositions)
    model = MLP()
    reference = copy.deepcopy(model)
    x = torch.randn(4, 8)
    with pytest.warns(TilegraphFallbackWarning, match="AOTAutograd could not split it.*no decomposition today"):
        torch.compile(model, backend="tilegraph")(x).sum().backward()
    reference(x).sum().backward()
    for (path, p), q in zip(model.named_parameters(), reference.parameters()):
        assert_close(p.grad, q.grad, f"gradient of {path}")


# ----- the backward converters, against torch ----------------------------------------------------------
def check_aten(fn, *inputs, tolerance=1e-5):
    """`fn`'s ATen graph (make_fx) converted and run on the reference backend, against torch."""
    gm = make_fx(fn)(*inputs)
    conversion = convert_graph_module(gm, inputs)
    got = run(conversion.graph, [inputs[i].numpy() for i in conversion.input_positions])
    want = [t for t in torch.utils._pytree.tree_leaves(fn(*inputs)) if isinstance(t, torch.Tensor)]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = w.numpy()
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=tolerance, atol=tolerance)
    return conversion.graph


# (input shape, out channels, kernel, stride, padding, dilation, groups)
CONVOLUTIONS = {
    "plain": ((2, 3, 6, 6), 4, 3, 1, 1, 1, 1),
    "stride_with_remainder": ((2, 3, 8, 8), 4, 3, 2, 1, 1, 1),
    "stride_3_no_padding": ((1, 2, 7, 9), 3, 2, 3, 0, 1, 1),
    "dilation": ((2, 2, 9, 9), 3, 3, 1, 2, 2, 1),
    "dilation_and_stride": ((1, 2, 11, 10), 2, 3, 2, 1, 2, 1),
    "groups": ((2, 4, 6, 6), 6, 3, 2, 1, 1, 2),
    "depthwise": ((2, 4, 5, 5), 4, 3, 1, 1, 1, 4),
    "padding_beyond_the_kernel": ((1, 2, 5, 5), 3, 3, 1, 2, 1, 1),
    "rectangular": ((2, 3, 7, 8), 4, (2, 3), (1, 2), (0, 1), (2, 1), 1),
    "one_by_one": ((2, 3, 4, 4), 5, 1, 2, 0, 1, 1),
}


def _list(value, rank=2):
    return list(value) if isinstance(value, tuple) else [value] * rank


@pytest.mark.parametrize("case", sorted(CONVOLUTIONS))
def test_convolution_backward(case):
    shape, out_channels, kernel, stride, padding, dilation, groups = CONVOLUTIONS[case]
    x = torch.randn(shape)
    weight = torch.randn((out_channels, shape[1] // groups) + tuple(_list(kernel)))
    out = F.conv2d(x, weight, None, stride, padding, dilation, groups)
    grad = torch.randn(out.shape)

    def fn(grad, x, weight):
        return aten.convolution_backward(grad, x, weight, [out_channels], _list(stride), _list(padding),
                                         _list(dilation), False, [0, 0], groups, [True, True, True])

    check_aten(fn, grad, x, weight, tolerance=1e-4)


@pytest.mark.parametrize("mask", [(False, True, True), (True, True, False), (True, False, False)])
def test_convolution_backward_gives_only_the_requested_gradients(mask):
    x, weight = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3)
    grad = torch.randn(2, 4, 3, 3)

    def fn(grad, x, weight):
        return aten.convolution_backward(grad, x, weight, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1, list(mask))

    check_aten(fn, grad, x, weight, tolerance=1e-4)


def test_conv1d_backward():
    x, weight = torch.randn(2, 4, 11), torch.randn(6, 2, 3)
    grad = torch.randn(F.conv1d(x, weight, stride=2, padding=2, dilation=2, groups=2).shape)

    def fn(grad, x, weight):
        return aten.convolution_backward(grad, x, weight, [6], [2], [2], [2], False, [0], 2, [True, True, True])

    check_aten(fn, grad, x, weight, tolerance=1e-4)


def test_transposed_convolution_backward_is_reported():
    x, weight = torch.randn(1, 2, 4, 4), torch.randn(2, 3, 3, 3)
    grad = torch.randn(F.conv_transpose2d(x, weight).shape)

    def fn(grad, x, weight):
        return aten.convolution_backward(grad, x, weight, None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1,
                                         [True, True, False])

    with pytest.raises(tilegraph.frontends.fx.UnsupportedOpsError, match="transposed convolution"):
        check_aten(fn, grad, x, weight)


# (input shape, kernel, stride, padding, dilation, ceil_mode)
MAX_POOLS = {
    "two_by_two": ((2, 3, 6, 6), 2, 2, 0, 1, False),
    "overlapping_with_padding": ((2, 2, 7, 7), 3, 2, 1, 1, False),
    "stride_one": ((1, 2, 5, 6), 3, 1, 1, 1, False),
    "ceil_mode": ((2, 2, 8, 8), 3, 2, 0, 1, True),
    "ceil_mode_with_padding": ((1, 2, 9, 7), 3, 2, 1, 1, True),
    "rectangular": ((2, 2, 6, 9), (2, 3), (1, 2), (1, 1), 1, False),
    "unbatched": ((3, 6, 6), 2, 2, 0, 1, False),
}


def tied(shape):
    """Values with many ties (zeros after a relu, small integers), as pools meet them after activations."""
    return torch.relu(torch.randint(-2, 3, shape).float())


@pytest.mark.parametrize("case", sorted(MAX_POOLS))
def test_max_pool_indices_are_torchs(case):
    shape, kernel, stride, padding, dilation, ceil_mode = MAX_POOLS[case]
    for x in (torch.randn(shape), tied(shape)):
        check_aten(lambda x: aten.max_pool2d_with_indices(x, _list(kernel), _list(stride), _list(padding),
                                                          _list(dilation), ceil_mode), x)


def test_max_pool_indices_of_minus_infinity_point_into_the_input():
    x = torch.full((1, 1, 4, 4), -float("inf"))
    check_aten(lambda x: aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1], [1, 1], True), x)


@pytest.mark.parametrize("case", sorted(MAX_POOLS) + ["dilation"])
def test_max_pool_backward(case):
    shape, kernel, stride, padding, dilation, ceil_mode = MAX_POOLS.get(case, ((2, 2, 9, 9), 3, 2, 1, 2, False))
    x = tied(shape)
    out, indices = aten.max_pool2d_with_indices(x, _list(kernel), _list(stride), _list(padding), _list(dilation),
                                                ceil_mode)
    grad = torch.randn(out.shape)

    def fn(grad, x, indices):
        return aten.max_pool2d_with_indices_backward(grad, x, _list(kernel), _list(stride), _list(padding),
                                                     _list(dilation), ceil_mode, indices)

    check_aten(fn, grad, x, indices)


# (input shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVG_POOLS = {
    "two_by_two": ((2, 3, 6, 6), 2, 2, 0, False, True, None),
    "padding_counted": ((2, 2, 7, 7), 3, 2, 1, False, True, None),
    "padding_not_counted": ((2, 2, 7, 7), 3, 2, 1, False, False, None),
    "ceil_mode": ((1, 2, 8, 8), 3, 2, 0, True, True, None),
    "ceil_mode_padding_not_counted": ((1, 2, 8, 9), 3, 2, 1, True, False, None),
    "stride_one": ((1, 2, 5, 5), 3, 1, 1, False, True, None),
    "divisor_override": ((2, 2, 6, 6), 2, 2, 0, False, True, 3),
    "divisor_override_ceil_mode": ((1, 2, 7, 7), 3, 2, 1, True, True, 5),
    "rectangular": ((2, 2, 6, 9), (2, 3), (1, 2), (1, 1), False, False, None),
    "unbatched": ((3, 6, 6), 2, 2, 0, False, True, None),
}


@pytest.mark.parametrize("case", sorted(AVG_POOLS))
def test_avg_pool_backward(case):
    shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor = AVG_POOLS[case]
    x = torch.randn(shape)
    args = (_list(kernel), _list(stride), _list(padding), ceil_mode, count_include_pad, divisor)
    grad = torch.randn(aten.avg_pool2d(x, *args).shape)
    check_aten(lambda grad, x: aten.avg_pool2d_backward(grad, x, *args), grad, x)


@pytest.mark.parametrize("dims,correction,keepdim", [([0, 2, 3], 0, True), ([1], 1, False), (None, 1, False),
                                                     ([-1], 0, True)])
def test_var_mean(dims, correction, keepdim):
    x = torch.randn(3, 4, 5, 2) * 3 + 1
    check_aten(lambda x: aten.var_mean.correction(x, dims, correction=correction, keepdim=keepdim), x)


def test_native_layer_norm_gives_the_saved_statistics():
    x, w, b = torch.randn(2, 3, 8) * 2 + 1, torch.randn(8), torch.randn(8)
    check_aten(lambda x, w, b: aten.native_layer_norm(x, [8], w, b, 1e-5), x, w, b)
    check_aten(lambda x: aten.native_layer_norm(x, [3, 8], None, None, 1e-3), x)


@pytest.mark.parametrize("op", ["any", "all"])
def test_any_and_all(op):
    x = torch.tensor([[0.0, 1.0, 2.0], [0.0, 0.0, 0.0], [3.0, -1.0, 0.5]])
    fn = getattr(torch, op)
    check_aten(lambda x: (fn(x != 0, 1), fn(x, 0, keepdim=True), fn(x > 0)), x)


@pytest.mark.parametrize("causal,mask", [(False, None), (True, None), (False, "float")])
def test_cpu_flash_attention_and_its_backward(causal, mask):
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    attn_mask = torch.randn(2, 1, 5, 6) if mask == "float" else None
    scale = 0.3 if mask else None
    check_aten(lambda q, k, v: aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, causal, attn_mask=attn_mask, scale=scale), q, k, v)
    out, logsumexp = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, attn_mask=attn_mask,
                                                                      scale=scale)
    grad = torch.randn(out.shape)

    def backward(grad, q, k, v, out, logsumexp):
        return aten._scaled_dot_product_flash_attention_for_cpu_backward(grad, q, k, v, out, logsumexp, 0.0, causal,
                                                                         attn_mask=attn_mask, scale=scale)

    check_aten(backward, grad, q, k, v, out, logsumexp, tolerance=1e-4)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_and_scatter_add(dim):
    x, src = torch.randn(4, 5), torch.randn(4, 5)
    index = torch.randint(0, x.shape[dim], (4, 5))  # repeated indices: scatter_add sums them
    line = index[:, :1] if dim else index[:1]  # one index per line, as cross entropy's one-hot scatters
    check_aten(lambda x, src, index: (torch.scatter_add(x, dim, index, src), x.scatter(dim, line, 2.5)),
               x, src, index)
    # distinct indices along the line: plain scatter's result does not depend on the order of writes
    perm = torch.stack([torch.randperm(5) for _ in range(4)])
    check_aten(lambda x, src, perm: x.scatter(1, perm, src), x, src, perm)
