"""Converters for what real models emit under Dynamo, against torch eager with edge cases: math
(trigonometric, exp/log families, ELU-like activations), gathers and index tensors computed at run
time, index_put and item assignment, masks, tensors built from shapes, scans, repeats, arg-reductions
and topk, resampling, group and weight norm, 1-d and ceil-mode pooling.

Each case is converted from up to three captures (torch.fx.symbolic_trace, TorchDynamo, torch.export's
ATen graph), run on the reference backend, and compared with eager PyTorch.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs the optional torch extra")
nn = torch.nn
F = torch.nn.functional

from tilegraph.backends.reference import run  # noqa: E402
from tilegraph.frontends.fx import UnsupportedOpsError, from_exported_program, from_module  # noqa: E402
from fx_captures import dynamo_graph  # noqa: E402
from tilegraph.ir.verifier import verify  # noqa: E402

CAPTURES = ["trace", "dynamo", "export"]


class Fn(nn.Module):
    """A function as a module (its tensors as buffers, so captures see them as constants)."""

    def __init__(self, fn, **buffers):
        super().__init__()
        self.fn = fn
        for name, tensor in buffers.items():
            self.register_buffer(name, tensor)


def module(fn, arity: int, **buffers) -> nn.Module:
    """`fn(self, x0, ..)` as a module whose forward names its inputs (symbolic_trace takes no *args)."""
    names = ", ".join(f"x{i}" for i in range(arity))
    namespace = {}
    exec(f"def forward(self, {names}):\n    return self.fn(self, {names})\n", namespace)
    return type(f"Fn{arity}", (Fn,), {"forward": namespace["forward"]})(fn, **buffers)


def convert(model, inputs, capture):
    """The graph, and which of `inputs` its inputs are (Dynamo drops unused ones)."""
    if capture == "trace":
        graph = from_module(model, inputs)
    elif capture == "dynamo":
        graph = dynamo_graph(model, inputs)
        return graph, [int(v.name[1:]) for v in graph.inputs]  # x0, x1, ...
    else:
        graph = from_exported_program(torch.export.export(model, inputs, strict=False), inputs)
    return graph, list(range(len(inputs)))


def check(fn, *inputs, capture="trace", rtol=1e-5, atol=1e-5, **buffers):
    """Convert `fn(self, *inputs)`, run it on the reference backend, compare with eager."""
    model = module(fn, len(inputs), **buffers).eval()
    graph, used = convert(model, inputs, capture)
    verify(graph)
    with torch.no_grad():
        expected = [t for t in torch.utils._pytree.tree_leaves(model(*inputs)) if isinstance(t, torch.Tensor)]
    got = run(graph, [inputs[i].numpy() for i in used])
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == tuple(e.shape) and g.dtype == e.numpy().dtype, (g.shape, g.dtype, e.shape, e.dtype)
        np.testing.assert_allclose(g.astype(np.float64), e.numpy().astype(np.float64), rtol=rtol, atol=atol)
    return graph


def ops_of(graph):
    return {n.op for n in graph.nodes}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def edge_floats(*extra):
    """Random values plus zeros, tiny, large and negative ones."""
    special = [0.0, -0.0, 1e-8, -1e-8, 1e-4, 30.0, -30.0, *extra]
    return torch.cat([torch.randn(32 - len(special)) * 3, torch.tensor(special)]).reshape(4, 8)


# ----- math --------------------------------------------------------------------------------------------
MATH = {
    "sin": lambda s, x: torch.sin(x) + x.sin() * 2,
    "cos": lambda s, x: torch.cos(x) - x.cos(),
    "tan": lambda s, x: torch.tan(x * 0.3),
    "exp2": lambda s, x: torch.exp2(x),
    "log2": lambda s, x: torch.log2(x.abs() + 1e-3),
    "log10": lambda s, x: torch.log10(x.abs() + 1e-3),
    "log1p": lambda s, x: torch.log1p(x.abs() - 0.999),
    "expm1": lambda s, x: torch.expm1(x),
    "sinh": lambda s, x: torch.sinh(x),
    "cosh": lambda s, x: torch.cosh(x),
    "tanh": lambda s, x: torch.tanh(x),
    "sign": lambda s, x: torch.sign(x) * 3,
    "rsqrt": lambda s, x: torch.rsqrt(x.abs() + 0.5),
    "pow": lambda s, x: torch.pow(x.abs() + 0.1, x * 0.2) + 2 ** (x * 0.1) + x ** 3,
    "clamp": lambda s, x: x.clamp(min=-1.0) + x.clamp(max=0.5) + torch.clamp(x, x * 0.5, x * 0.25 + 1),
}


@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize("name", sorted(MATH))
def test_math_functions_match_torch(name, capture):
    if capture == "dynamo" and name not in ("sin", "cos", "log1p", "expm1", "pow"):
        pytest.skip("the same converters as the trace capture; Dynamo covers a representative few")
    check(MATH[name], edge_floats(), capture=capture, rtol=2e-5, atol=1e-6)


def test_trigonometry_of_integers_promotes_to_float():
    graph = check(lambda s, i: torch.sin(i) + torch.cos(i), torch.arange(-5, 7).reshape(3, 4))
    assert {"sin", "cos", "cast"} <= ops_of(graph)


def test_rotary_embedding_computes_cos_and_sin_from_buffers():
    """Llama's rotary embedding: cos and sin of the positions times a buffer of frequencies."""
    def rotary(s, x):
        freqs = (s.inv_freq[None, :, None].float() @ torch.arange(x.shape[1])[None, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * emb.cos() + rotated * emb.sin()

    inv_freq = 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8))
    for capture in CAPTURES:
        check(rotary, torch.randn(2, 5, 8), capture=capture, inv_freq=inv_freq)


ACTIVATIONS = {
    "elu": lambda s, x: F.elu(x) + F.elu(x, alpha=0.5),
    "selu": lambda s, x: F.selu(x),
    "celu": lambda s, x: F.celu(x, alpha=2.0),
    "softplus": lambda s, x: F.softplus(x) + F.softplus(x, beta=2.0, threshold=5.0),
    "mish": lambda s, x: F.mish(x),
    "logsigmoid": lambda s, x: F.logsigmoid(x),
}


@pytest.mark.parametrize("capture", ["trace", "export"])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_exponential_activations_match_torch(name, capture):
    check(ACTIVATIONS[name], edge_floats(60.0, -60.0), capture=capture, rtol=2e-5, atol=1e-6)


def test_activation_modules_convert():
    stack = nn.Sequential(nn.ELU(0.7), nn.Softplus(beta=1.5), nn.Mish(), nn.SELU(), nn.CELU(1.5), nn.LogSigmoid())
    check(lambda s, x: stack(x), edge_floats())


# ----- gathers with computed indices ---------------------------------------------------------------------
def computed_index(x, n):
    """Indices computed from the data (so nothing folds them into constants)."""
    return ((x.abs() * 7).long()) % n


@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather_with_computed_indices(dim, capture):
    x = torch.randn(4, 5, 6)

    def fn(s, x):
        index = computed_index(x[:3, :4, :5], x.shape[dim])
        return torch.gather(x, dim, index)

    check(fn, x, capture=capture)


def test_gather_with_constant_indices_precomputes_positions():
    index = torch.tensor([[2, 0, 1], [1, 1, 0]])
    graph = check(lambda s, x: x.gather(1, s.index), torch.randn(2, 3), index=index)
    assert ops_of(graph) == {"reshape", "gather"}


def test_index_select_and_embedding_with_computed_indices():
    table = torch.randn(10, 4)

    def fn(s, x):
        index = computed_index(x, 10)
        return torch.index_select(s.table, 0, index[0]), F.embedding(index, s.table), s.table[index - 10]

    for capture in CAPTURES:
        check(fn, torch.randn(3, 5), capture=capture, table=table)


INDEXING = {
    "two tensors": lambda s, x, i: x[i, i.flip(0)],
    "broadcast tensors": lambda s, x, i: x[i[:, None], i[None, :]],
    "adjacent, not leading": lambda s, x, i: x[:, i, i],
    "separated": lambda s, x, i: x[i, :, i],
    "int and tensor": lambda s, x, i: x[1, :, i],
    "negative": lambda s, x, i: x[i - 4],
    "ellipsis": lambda s, x, i: x[..., i],
    "new axis": lambda s, x, i: x[None, i],
    "list": lambda s, x, i: x[[0, 2, -1]],
    "constant mask": lambda s, x, i: x[s.mask],
    "slice then tensors": lambda s, x, i: x[1:, i, 1:3],
}


@pytest.mark.parametrize("capture", ["trace", "dynamo"])
@pytest.mark.parametrize("case", sorted(INDEXING))
def test_indexing_with_index_tensors(case, capture):
    x = torch.randn(4, 4, 4)
    index = torch.tensor([3, 0, 2])
    mask = torch.tensor([True, False, True, True])
    check(INDEXING[case], x, index, capture=capture, mask=mask)


def test_aten_index_with_several_tensors():
    x, i = torch.randn(4, 4, 4), torch.tensor([3, 0, 2])
    check(lambda s, x, i: (x[i, :, i.flip(0)], x[:, i, i]), x, i, capture="export")


def test_padding_mask_built_by_indexing_the_attention_mask():
    """transformers' padding mask: attention_mask[batch_idx, kv_idx] with broadcast aranges."""
    def fn(s, mask):
        batch = torch.arange(mask.shape[0])[:, None, None, None]
        kv = torch.arange(mask.shape[1])[None, None, None, :]
        return mask[batch, kv].bool()

    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, -2:] = 0
    for capture in CAPTURES:
        check(fn, mask, capture=capture)


def test_boolean_mask_computed_at_run_time_is_reported():
    with pytest.raises(UnsupportedOpsError, match="boolean mask indexing with a mask computed at run time"):
        from_module(module(lambda s, x: x[x > 0], 1), (torch.randn(4),))


@pytest.mark.parametrize("capture", ["trace", "export"])  # (Dynamo wraps what its backend raises)
def test_a_tensor_shaped_like_an_unconverted_one_is_reported_not_an_internal_error(capture):
    """zeros_like(h) needs only h's shape: where h itself has no converter (histc), the report names histc; it
    was a KeyError from the converter (Mixtral's router, Mamba's cache and Funnel's pooling under Dynamo)."""
    fn = module(lambda s, x: (torch.zeros_like(torch.histc(x, bins=4)) + 1, x * 2), 1)
    with pytest.raises(UnsupportedOpsError, match="histc") as caught:
        convert(fn, (torch.randn(8),), capture)
    assert "KeyError" not in str(caught.value)


# ----- writes: index_put and item assignment --------------------------------------------------------------
def assign(index_fn, value_fn):
    def fn(s, x, i):
        y = x.clone()
        y[index_fn(i)] = value_fn(x)
        return y
    return fn


WRITES = {
    "tensor index, scalar": assign(lambda i: i, lambda x: 5.0),
    "tensor index, rows": assign(lambda i: i, lambda x: x[:3] * 2),
    "two tensors": assign(lambda i: (i, i.flip(0) % 4), lambda x: -1.0),
    "slices": assign(lambda i: (slice(None), slice(1, 3)), lambda x: x[:, :2] + 1),
    "int and step": assign(lambda i: (0, slice(None, None, 2)), lambda x: 7.0),
    "ellipsis": assign(lambda i: (Ellipsis, 1), lambda x: x[..., 0]),
    "everything": assign(lambda i: slice(None), lambda x: 3.0),
}


@pytest.mark.parametrize("case", sorted(WRITES))
def test_item_assignment(case):
    """Under Dynamo (symbolic_trace cannot trace item assignment; torch.export writes into views)."""
    check(WRITES[case], torch.randn(5, 4), torch.tensor([3, 0, 4]), capture="dynamo")


@pytest.mark.parametrize("capture", CAPTURES)
def test_index_put_with_computed_indices(capture):
    def fn(s, x, v):
        i = computed_index(v[:, 0], 6)
        unique = torch.tensor([5, 1, 3])
        y = x.index_put((unique,), v)
        return y, x.index_put((i,), v, accumulate=True)  # accumulate: duplicate indices add up

    check(fn, torch.randn(6, 2), torch.randn(3, 2), capture=capture)


def test_index_put_last_write_wins_for_constant_duplicates():
    index = torch.tensor([1, 3, 1])
    check(lambda s, x, v: x.index_put((s.index,), v), torch.randn(5), torch.tensor([1.0, 2.0, 3.0]), index=index)


def test_assignment_through_a_computed_mask_is_a_where():
    def fn(s, x):
        y = x.clone()
        y[x > 0.5] = 0.0
        return y

    graph = check(fn, torch.randn(3, 4), capture="dynamo")
    assert "where" in ops_of(graph)


# ----- masks ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("capture", CAPTURES)
def test_masks_computed_from_inputs(capture):
    def fn(s, x, y):
        keep = (x > y) & (x.abs() < 2)
        return torch.where(keep, x, y * 2), x.masked_fill(~keep, -1e9), torch.where(x > 0, x, 0.0), \
            x.long().masked_fill(x < 0, 7)

    check(fn, torch.randn(3, 5), torch.randn(3, 5), capture=capture)


@pytest.mark.parametrize("capture", CAPTURES)
def test_masked_sort_keys_filled_with_int64_max(capture):
    """Masked entries sorted last by an int64-max fill (Mixtral's router): the constant is exact, not refused."""
    def fn(s, x, keep):
        return torch.sort(torch.where(keep, x, torch.iinfo(torch.int64).max), dim=-1).values

    check(fn, torch.randint(0, 100, (2, 8)), torch.rand(2, 8) > 0.3, capture=capture)


@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize("diagonal", [-1, 0, 2])
def test_tril_and_triu_masks(diagonal, capture):
    def fn(s, x):
        causal = torch.ones(x.shape[-2], x.shape[-1], dtype=torch.bool).tril(diagonal)
        return x.tril(diagonal) + x.triu(diagonal), x.masked_fill(~causal, -1e4)

    check(fn, torch.randn(2, 4, 6), capture=capture)


# ----- tensors built from shapes --------------------------------------------------------------------------------
@pytest.mark.parametrize("capture", CAPTURES)
def test_arange_and_full_built_from_shapes(capture):
    def fn(s, x):
        n = x.shape[-1]
        return (x * torch.arange(n), x + torch.arange(2, 2 + 3 * n, 3, dtype=torch.float32),
                x * torch.full((x.shape[0], 1), 2.5), torch.zeros_like(x) + x, x.new_ones(x.shape) * 3,
                torch.full_like(x, 7, dtype=torch.long) + torch.arange(n), x + torch.arange(0.5, n, 1.0))

    graph = check(fn, torch.randn(3, 4), capture=capture)
    assert "iota" in ops_of(graph)


def test_sources_become_ops_not_parameters():
    """(symbolic_trace runs torch.full of constant sizes while tracing: Dynamo records the call)"""
    graph = check(lambda s, x: x + torch.full((64, 64), 0.5) + torch.arange(64), torch.randn(64, 64),
                  capture="dynamo")
    assert not graph.params and {"constant", "iota"} <= ops_of(graph)


# ----- scans, repeats, rolls -------------------------------------------------------------------------------
@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize("length", [1, 2, 7, 16, 17])
def test_cumsum_and_cumprod(length, capture):
    def fn(s, x):
        mask = (x > 0).long()
        return x.cumsum(-1), torch.cumsum(x, 0), mask.cumsum(dim=1), torch.cumsum(x > 0, dim=1), \
            (x * 0.5).cumprod(-1)

    check(fn, torch.randn(3, length), capture=capture, rtol=1e-5, atol=1e-5)


def test_position_ids_from_a_padding_mask():
    """OPT and RoBERTa: positions are the running count of real tokens."""
    def fn(s, mask):
        return (torch.cumsum(mask, dim=1) * mask).long() - 1

    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    for capture in CAPTURES:
        check(fn, mask, capture=capture)


@pytest.mark.parametrize("capture", CAPTURES)
def test_expand_repeat_and_repeat_interleave(capture):
    def fn(s, x):
        return (x[:, None].expand(-1, 3, -1), x.repeat(2, 3), x.repeat(2, 1, 1), x.repeat_interleave(2, dim=0),
                torch.repeat_interleave(x, 3), x.repeat_interleave(s.counts, dim=1))

    check(fn, torch.randn(2, 3), capture=capture, counts=torch.tensor([2, 0, 1]))


@pytest.mark.parametrize("capture", CAPTURES)
def test_roll(capture):
    def fn(s, x):
        return torch.roll(x, 1, 0), x.roll((-2, 5), (1, 2)), torch.roll(x, 3), x.roll(0, 1)

    check(fn, torch.randn(3, 4, 5), capture=capture)


# ----- arg-reductions and topk ------------------------------------------------------------------------------
@pytest.mark.parametrize("capture", CAPTURES)
def test_argmax_argmin_and_max_with_indices(capture):
    def fn(s, x):
        values, indices = x.max(dim=1)
        low = torch.min(x, -1, keepdim=True)
        return (x.argmax(), x.argmax(dim=0), torch.argmin(x, dim=1, keepdim=True), values, indices,
                low.values, low.indices)

    x = torch.randn(4, 6)
    x[1, 2] = x[1, 4] = 9.0  # ties: the first index
    check(fn, x, capture=capture)


def test_argmax_of_integers_and_nan():
    check(lambda s, x: x.long().argmax(1), torch.randint(-3, 3, (4, 5)).float())
    x = torch.randn(2, 5)
    x[0, 3] = float("nan")
    check(lambda s, x: x.argmax(1), x)


@pytest.mark.parametrize("capture", CAPTURES)
def test_topk_and_sort(capture):
    def fn(s, x):
        top = torch.topk(x, 3)
        low = x.topk(2, dim=0, largest=False)
        ordered = torch.sort(x, dim=-1, descending=True)
        return top.values, top.indices, low.values, low.indices, ordered.values, ordered.indices, x.argsort(0)

    check(fn, torch.randn(4, 6), capture=capture)


def test_topk_beyond_the_limit_is_reported():
    with pytest.raises(UnsupportedOpsError, match="topk with k=100"):
        from_module(module(lambda s, x: x.topk(100).values, 1), (torch.randn(2, 200),))


# ----- resampling, norms, pooling ---------------------------------------------------------------------------
INTERPOLATE = {
    "nearest": dict(scale_factor=2, mode="nearest"),
    "nearest size": dict(size=(5, 7), mode="nearest"),
    "nearest-exact": dict(size=(3, 5), mode="nearest-exact"),
    "bilinear": dict(size=(6, 9), mode="bilinear"),
    "bilinear corners": dict(scale_factor=1.5, mode="bilinear", align_corners=True),
    "bicubic": dict(size=(7, 5), mode="bicubic", align_corners=False),
    "area": dict(size=(2, 3), mode="area"),
    "same size": dict(size=(4, 6), mode="bilinear"),
}


@pytest.mark.parametrize("case", sorted(INTERPOLATE))
def test_interpolate(case):
    graph = check(lambda s, x: F.interpolate(x, **INTERPOLATE[case]), torch.randn(1, 2, 4, 6))
    if case != "area":  # area interpolation is adaptive average pooling
        assert ops_of(graph) <= {"gather", "matmul", "transpose", "reshape", "cast"}


def test_interpolate_1d_and_upsample_module_and_export():
    check(lambda s, x: F.interpolate(x, scale_factor=3, mode="linear"), torch.randn(2, 3, 5))
    up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
    check(lambda s, x: up(x), torch.randn(1, 2, 3, 4))
    check(lambda s, x: F.interpolate(x, size=(5, 3), mode="bilinear"), torch.randn(1, 2, 4, 6), capture="export")


@pytest.mark.parametrize("capture", CAPTURES)
def test_movedim_and_moveaxis(capture):
    def fn(s, x):
        return (torch.movedim(x, 0, -1), x.movedim((0, 3), (2, 0)), torch.moveaxis(x, -2, 1),
                x.movedim([1, 2], [3, 1]))

    check(fn, torch.randn(2, 3, 4, 5), capture=capture)


UNFOLD = {  # name: (input shape, F.unfold keyword arguments)
    "3x3 padded": ((2, 3, 5, 6), dict(kernel_size=3, padding=1)),
    "strided, dilated, uneven": ((1, 2, 7, 6), dict(kernel_size=(2, 3), dilation=(2, 1), padding=(1, 0), stride=(2, 1))),
    "convbert 9x1": ((2, 4, 12, 1), dict(kernel_size=(9, 1), padding=(4, 0))),
    "unbatched": ((3, 4, 4), dict(kernel_size=2, stride=2)),
}


@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize("case", sorted(UNFOLD))
def test_unfold_gives_torch_columns(case, capture):
    shape, kwargs = UNFOLD[case]
    check(lambda s, x: F.unfold(x, **kwargs), torch.randn(*shape), capture=capture)


@pytest.mark.parametrize("capture", CAPTURES)
def test_group_norm(capture):
    norm = nn.GroupNorm(2, 6)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    check(lambda s, x: norm(x) + F.group_norm(x, 3), torch.randn(2, 6, 5) * 3 + 1, capture=capture, rtol=1e-4,
          atol=1e-5)


@pytest.mark.parametrize("capture", ["dynamo", "export"])
def test_weight_norm_convolution(capture):
    """Wav2Vec2's positional convolution: a weight-normed, grouped conv1d."""
    conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 4, 3, padding=1, groups=2), dim=2)
    check(lambda s, x: conv(x), torch.randn(1, 4, 7), capture=capture, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("capture", CAPTURES)
def test_one_dimensional_and_ceil_mode_pooling(capture):
    def fn(s, x):
        image = x.reshape(1, 2, 5, 7)
        return (F.adaptive_avg_pool1d(x, 1), F.adaptive_avg_pool1d(x, 3), F.avg_pool1d(x, 2),
                F.max_pool1d(x, 3, stride=2, ceil_mode=True), F.max_pool2d(image, 2, ceil_mode=True),
                F.avg_pool2d(image, 3, stride=2, padding=1, ceil_mode=True),
                F.avg_pool2d(image, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
                F.avg_pool2d(image, 8, ceil_mode=True))

    check(fn, torch.randn(2, 5, 7), capture=capture)


# ----- empty pieces --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("capture", CAPTURES)
def test_an_empty_slice_concatenated_away(capture):
    """Phi-3's partial rotary: x[..., rotary_dim:] is empty when the rotary covers the whole head."""
    def fn(s, x):
        rotary, rest = x[..., :8], x[..., 8:]
        return torch.cat((rotary.sin(), rest), dim=-1)

    check(fn, torch.randn(2, 3, 8), capture=capture)


# ----- floor division, remainders, rounding ----------------------------------------------------------------
@pytest.mark.parametrize("capture", CAPTURES)
def test_floor_division_remainder_and_rounding(capture):
    def fn(s, x, i):
        j = i + (i == 0).long()  # no zero divisors
        small = x.clamp(-1e5, 1e5)  # a float remainder is exact while the quotient stays below 2**22
        return (i // 3, i % -3, torch.remainder(i, j), torch.fmod(i, j), torch.div(i, j, rounding_mode="floor"),
                torch.div(i, j, rounding_mode="trunc"), x // 0.7, small % 1.5, torch.fmod(small, -1.5), x.floor(),
                x.ceil(), x.trunc(), torch.div(x, 0.3, rounding_mode="floor"))

    x = edge_floats(2.5, -2.5, 1e9, -3e7)
    i = torch.arange(-12, 12).reshape(4, 6)
    check(fn, x, i, capture=capture)


def test_flip():
    check(lambda s, x: (x.flip(0), torch.flip(x, (1, 2)), x.fliplr(), x.flipud()), torch.randn(3, 4, 2))


def test_take_along_dim():
    check(lambda s, x: (torch.take_along_dim(x, x.argsort(1), 1), torch.take_along_dim(x, s.flat)),
          torch.randn(3, 4), flat=torch.tensor([0, 11, 5]))


@pytest.mark.parametrize("capture", ["trace", "dynamo"])
def test_same_padding_with_even_kernels_pads_after(capture):
    """torch pads 'same' with an even effective kernel one more after than before: padding_end."""
    conv2 = nn.Conv2d(3, 4, 4, padding="same", dilation=(1, 3))
    conv1 = nn.Conv1d(4, 2, 2, padding="same")
    graph = check(lambda self, x: conv1(conv2(x).mean(2)), torch.randn(2, 3, 9, 10), capture=capture,
                  rtol=1e-4, atol=1e-5)
    convs = [n for n in graph.nodes if n.op == "conv2d"]
    assert [tuple(n.attrs["padding_end"]) for n in convs] == [(2, 5), (0, 1)]


def test_zero_padding_before_a_convolution_becomes_its_padding():
    """F.pad's zeros (TF-style "same" padding, MobileNetV2) go into the convolution after canonicalize:
    no padded copy of the input is made."""
    from tilegraph.passes import PassManager

    conv = nn.Conv2d(3, 4, 3, stride=2)
    graph = check(lambda self, x: conv(F.pad(x, (0, 1, 1, 2))), torch.randn(1, 3, 9, 10))
    assert "concat" in ops_of(graph)
    program = PassManager("canonicalize").run(graph)
    assert "concat" not in ops_of(program.graph)
    (node,) = [n for n in program.graph.nodes if n.op == "conv2d"]
    assert tuple(node.attrs["padding"]) == (1, 0) and tuple(node.attrs["padding_end"]) == (2, 1)
    x = torch.randn(1, 3, 9, 10)
    np.testing.assert_allclose(run(program.graph, [x.numpy()])[0], conv(F.pad(x, (0, 1, 1, 2))).detach().numpy(),
                               rtol=1e-5, atol=1e-5)
