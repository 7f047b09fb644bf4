"""Op semantics against formulas written here (not the ops' own references), composite decompositions
against the composites, PyTorch where it is installed, and the wording of shape errors."""
from __future__ import annotations

import itertools
import math
import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from strategies import case_inputs, single_op_cases

from tilegraph.backends.reference import run
from tilegraph.ir import DType, GraphBuilder, ShapeError, TensorType, all_ops, get_op
from tilegraph.ir.verifier import verify

F32, F16, BF16, I32, I64, BOOL = DType.f32, DType.f16, DType.bf16, DType.i32, DType.i64, DType.bool
COMPOSITES = sorted(name for name, op in all_ops().items() if op.decompose_fn is not None)


# ----- helpers ----------------------------------------------------------------------------------------
def run_op(op: str, arrays, types=None, **attrs) -> np.ndarray:
    """Build a one-node graph through GraphBuilder, verify it, run it on the reference backend."""
    arrays = [np.asarray(a) for a in arrays]
    types = types or [TensorType(a.shape, DType.from_numpy(a.dtype)) for a in arrays]
    b = GraphBuilder(op)
    values = [b.input(f"in{i}", t) for i, t in enumerate(types)]
    graph = b.output(b.op(op, *values, **attrs))
    verify(graph)
    (out,) = run(graph, arrays)
    assert out.shape == graph.outputs[0].shape and out.dtype == graph.outputs[0].dtype.numpy
    return out


def draw_case(data, op: str, dtypes=(F32,), **kw):
    types, attrs = data.draw(single_op_cases(op, dtypes=dtypes, **kw), label="case")
    arrays = data.draw(case_inputs(op, types, attrs), label="inputs")
    return types, attrs, arrays


def operand_index(out_index, shape):
    """numpy broadcasting, written out: the operand element an output element reads."""
    offset = len(out_index) - len(shape)
    return tuple(0 if size == 1 else out_index[offset + axis] for axis, size in enumerate(shape))


def broadcast_loop(fn, arrays, out_shape):
    out = np.empty(out_shape, dtype=np.float64)
    for index in itertools.product(*map(range, out_shape)):
        out[index] = fn(*(a[operand_index(index, a.shape)].item() for a in arrays))
    return out


def close(got, expected, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64),
                               rtol=rtol, atol=atol)


def floats(shape, lo=-3.0, hi=3.0):
    return hnp.arrays(np.float32, shape, elements=st.floats(lo, hi, width=32))


SMALL_SHAPES = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)


# ----- elementwise ------------------------------------------------------------------------------------
def _gelu_tanh(x):
    return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


UNARY = {
    "neg": (lambda x: -x, -3, 3),
    "abs": (abs, -3, 3),
    "exp": (math.exp, -3, 3),
    "log": (math.log, 0.0625, 5),
    "sqrt": (math.sqrt, 0, 5),
    "rsqrt": (lambda x: 1 / math.sqrt(x), 0.0625, 5),
    "tanh": (math.tanh, -3, 3),
    "erf": (math.erf, -3, 3),
    "sigmoid": (lambda x: 1 / (1 + math.exp(-x)), -8, 8),
    "sin": (math.sin, -10, 10),
    "cos": (math.cos, -10, 10),
    "exp2": (lambda x: 2.0 ** x, -10, 10),
    "log2": (math.log2, 0.0625, 5),
    "log1p": (math.log1p, -0.875, 5),
    "expm1": (math.expm1, -3, 3),
    "relu": (lambda x: max(x, 0.0), -3, 3),
    "relu6": (lambda x: min(max(x, 0.0), 6.0), -8, 8),
    "silu": (lambda x: x / (1 + math.exp(-x)), -8, 8),
    "gelu": (lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2))), -4, 4),
}


@pytest.mark.parametrize("op", sorted(UNARY))
@settings(max_examples=15)
@given(data=st.data())
def test_unary_matches_math(op, data):
    fn, lo, hi = UNARY[op]
    x = data.draw(floats(data.draw(SMALL_SHAPES), lo, hi))
    expected = np.vectorize(lambda v: fn(float(v)), otypes=[np.float64])(x) if x.size else x
    close(run_op(op, [x]), expected, rtol=2e-6, atol=1e-6)


@given(x=floats((3, 4), -4, 4))
def test_gelu_tanh_approximation(x):
    close(run_op("gelu", [x], approximate="tanh"), np.vectorize(_gelu_tanh)(x.astype(np.float64)), 2e-6, 1e-6)


def test_unary_on_integers_keeps_the_dtype():
    x = np.array([-3, 0, 4], dtype=np.int32)
    np.testing.assert_array_equal(run_op("neg", [x]), [3, 0, -4])
    np.testing.assert_array_equal(run_op("abs", [x]), [3, 0, 4])
    np.testing.assert_array_equal(run_op("relu", [x]), [0, 0, 4])
    assert run_op("relu", [x]).dtype == np.int32


BINARY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv, "pow": operator.pow,
    "maximum": max, "minimum": min, "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
    "gt": operator.gt, "ge": operator.ge,
}


def _int_div(a, b):
    return math.trunc(a / b)  # true division, then truncation toward zero


@pytest.mark.parametrize("op", sorted(BINARY))
@settings(max_examples=20)
@given(data=st.data())
def test_binary_broadcasting_matches_a_written_out_loop(op, data):
    types, attrs, arrays = draw_case(data, op, dtypes=(F32, I32), max_numel=64)
    fn = _int_div if op == "div" and types[0].dtype is I32 else BINARY[op]
    out_shape = np.broadcast_shapes(*(t.shape for t in types))
    got = run_op(op, arrays, types)
    assert got.shape == out_shape
    expected = broadcast_loop(fn, arrays, out_shape)
    if types[0].dtype is I32 or got.dtype == np.bool_:
        np.testing.assert_array_equal(got, expected.astype(got.dtype))
    else:
        close(got, expected, rtol=3e-6, atol=1e-6)


def test_broadcasting_edge_cases():
    col, row = np.array([[1.0], [2.0], [3.0]], np.float32), np.array([[10.0, 20.0]], np.float32)
    np.testing.assert_array_equal(run_op("add", [col, row]), [[11, 21], [12, 22], [13, 23]])
    scalar = np.array(5.0, np.float32)
    cube = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(run_op("sub", [scalar, cube]), 5.0 - cube)
    np.testing.assert_array_equal(run_op("mul", [cube, np.ones((1, 1, 1, 1), np.float32)]), cube[None])
    assert run_op("add", [scalar, scalar]).shape == ()
    np.testing.assert_array_equal(run_op("maximum", [np.array([1.0, 1.0], np.float32), np.array(3.0, np.float32)]),
                                  [3, 3])


@settings(max_examples=20)
@given(data=st.data())
def test_where_matches_a_written_out_loop(data):
    types, attrs, arrays = draw_case(data, "where", dtypes=(F32, BOOL), max_numel=64)
    out_shape = np.broadcast_shapes(*(t.shape for t in types))
    got = run_op("where", arrays, types)
    expected = broadcast_loop(lambda c, a, b: a if c else b, arrays, out_shape)
    np.testing.assert_array_equal(got, expected.astype(got.dtype))


def test_cast_truncates_toward_zero_and_rounds_bf16():
    x = np.array([-1.7, -0.5, 0.0, 0.5, 2.9], np.float32)
    np.testing.assert_array_equal(run_op("cast", [x], dtype="i32"), [-1, 0, 0, 0, 2])
    np.testing.assert_array_equal(run_op("cast", [x], dtype="bool"), [True, True, False, True, True])
    np.testing.assert_array_equal(run_op("cast", [np.array([True, False])], dtype=F32), [1.0, 0.0])
    ones = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -7], np.float32)  # halfway cases round to even
    np.testing.assert_array_equal(run_op("cast", [ones], dtype="bf16"), [1.0, 1 + 2 ** -6, 1 + 2 ** -7])
    np.testing.assert_array_equal(run_op("cast", [np.array([7, -3], np.int64)], dtype="f16"), [7.0, -3.0])


def test_constant_and_iota():
    b = GraphBuilder()
    c = b.constant(3, DType.i32, shape=(2, 2))
    i0 = b.iota(shape=(2, 3), axis=0, dtype=F32)
    i1 = b.iota(shape=(2, 3), axis=-1)
    flags = b.iota(shape=(3,), dtype="bool")
    outs = run(b.output(c, i0, i1, flags))
    np.testing.assert_array_equal(outs[0], np.full((2, 2), 3, np.int32))
    np.testing.assert_array_equal(outs[1], [[0, 0, 0], [1, 1, 1]])
    np.testing.assert_array_equal(outs[2], [[0, 1, 2], [0, 1, 2]])
    assert outs[2].dtype == np.int64 and outs[1].dtype == np.float32
    np.testing.assert_array_equal(outs[3], [False, True, True])


def test_builder_numbers_become_constants_of_the_operand_dtype():
    b = GraphBuilder()
    x = b.input("x", "i32[3]")
    y = b.mul(x, 2)
    g = b.output(y)
    assert [n.op for n in g.nodes] == ["constant", "mul"] and y.dtype is I32
    np.testing.assert_array_equal(run(g, [np.array([1, 2, 3], np.int32)])[0], [2, 4, 6])


# ----- reductions ---------------------------------------------------------------------------------------
def reduce_loop(x: np.ndarray, axes, keepdims: bool, fold) -> np.ndarray:
    rank = x.ndim
    axes = tuple(range(rank)) if axes is None else tuple(sorted({a % rank for a in ([axes] if isinstance(axes, int)
                                                                                  else axes)}))
    out_shape = tuple(1 if a in axes else s for a, s in enumerate(x.shape)) if keepdims else \
        tuple(s for a, s in enumerate(x.shape) if a not in axes)
    groups: dict[tuple, list] = {}
    for index in itertools.product(*map(range, x.shape)):
        key = tuple(0 if a in axes else i for a, i in enumerate(index)) if keepdims else \
            tuple(i for a, i in enumerate(index) if a not in axes)
        groups.setdefault(key, []).append(x[index].item())
    out = np.empty(out_shape, dtype=np.float64)
    for key, values in groups.items():
        out[key] = fold(values)
    return out


FOLDS = {"sum": math.fsum, "max": max, "min": min, "mean": lambda v: math.fsum(v) / len(v)}


@pytest.mark.parametrize("op", sorted(FOLDS))
@settings(max_examples=25)
@given(data=st.data())
def test_reductions_match_a_written_out_loop(op, data):
    dtypes = (F32,) if op == "mean" else (F32, I32)
    types, attrs, arrays = draw_case(data, op, dtypes=dtypes, max_numel=96)
    got = run_op(op, arrays, types, **attrs)
    expected = reduce_loop(arrays[0], attrs.get("axes"), attrs.get("keepdims", False), FOLDS[op])
    assert got.shape == expected.shape
    if types[0].dtype is I32:
        np.testing.assert_array_equal(got, expected.astype(np.int32))
    else:
        close(got, expected, rtol=1e-5, atol=1e-5)


def test_reduction_axes_negative_keepdims_and_scalars():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert run_op("sum", [x], axes=[-1, 0]).shape == (3,)
    np.testing.assert_array_equal(run_op("sum", [x], axes=[-1, 0]), x.sum(axis=(0, 2)))
    assert run_op("max", [x], axes=1, keepdims=True).shape == (2, 1, 4)
    assert float(run_op("min", [x])) == 0.0  # no axes: every axis
    np.testing.assert_array_equal(run_op("sum", [x], axes=[]), x)  # an empty list: no axis
    assert float(run_op("mean", [np.array(2.5, np.float32)])) == 2.5
    with pytest.raises(ShapeError, match="sum: repeated axis"):
        run_op("sum", [x], axes=[1, -2])


# ----- contractions -----------------------------------------------------------------------------------
def matmul_loop(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    out = np.zeros(batch + (m, n))
    for index in itertools.product(*map(range, batch)):
        ai, bi = operand_index(index, a.shape[:-2]), operand_index(index, b.shape[:-2])
        for i, j in itertools.product(range(m), range(n)):
            out[index + (i, j)] = math.fsum(a[ai + (i, kk)].item() * b[bi + (kk, j)].item() for kk in range(k))
    return out


@pytest.mark.parametrize("op", ["matmul", "batch_matmul"])
@settings(max_examples=25)
@given(data=st.data())
def test_matmul_matches_a_written_out_loop(op, data):
    types, attrs, arrays = draw_case(data, op, dtypes=(F32, I64), max_numel=96)
    got = run_op(op, arrays, types)
    expected = matmul_loop(*arrays)
    if types[0].dtype.is_int:
        np.testing.assert_array_equal(got, expected.astype(np.int64))
    else:
        close(got, expected, rtol=1e-5, atol=1e-5)


def test_matmul_flops_and_bytes():
    b = GraphBuilder()
    y = b.matmul(b.input("a", "f32[4, 5]"), b.input("b", "f32[5, 6]"))
    node = b.graph.nodes[0]
    assert y.shape == (4, 6)
    assert node.flops() == 2 * 4 * 5 * 6
    assert node.bytes() == 4 * (20 + 30 + 24)


def conv_loop(x, w, stride, padding, dilation, groups, padding_end=None):
    n_, c_, h, wd = x.shape
    f_, cg, kh_, kw_ = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    eh, ew = padding if padding_end is None else padding_end
    oh_ = (h + ph + eh - dh * (kh_ - 1) - 1) // sh + 1
    ow_ = (wd + pw + ew - dw * (kw_ - 1) - 1) // sw + 1
    per_group = f_ // groups
    out = np.zeros((n_, f_, oh_, ow_))
    for n, f, oh, ow in itertools.product(range(n_), range(f_), range(oh_), range(ow_)):
        g = f // per_group
        total = 0.0
        for c, kh, kw in itertools.product(range(cg), range(kh_), range(kw_)):
            ih, iw = oh * sh - ph + kh * dh, ow * sw - pw + kw * dw
            if 0 <= ih < h and 0 <= iw < wd:
                total += float(x[n, g * cg + c, ih, iw]) * float(w[f, c, kh, kw])
        out[n, f, oh, ow] = total
    return out


@settings(max_examples=30)
@given(data=st.data())
def test_conv2d_matches_a_direct_loop(data):
    types, attrs, arrays = draw_case(data, "conv2d", dtypes=(F32, I32), max_numel=150)
    normal = get_op("conv2d").normalize_attrs(types, attrs)
    got = run_op("conv2d", arrays, types, **attrs)
    expected = conv_loop(*arrays, normal["stride"], normal["padding"], normal["dilation"], normal["groups"],
                         normal["padding_end"])
    assert got.shape == expected.shape
    close(got, expected, rtol=1e-5, atol=1e-5)
    node_flops = get_op("conv2d").flops(types, normal, [TensorType(got.shape, types[0].dtype)])
    f_, cg, kh, kw = types[1].shape
    assert node_flops == 2 * got.size * cg * kh * kw


def test_conv2d_hand_example_with_padding_stride_and_groups():
    x = np.arange(2 * 4 * 4, dtype=np.float32).reshape(1, 2, 4, 4)
    w = np.ones((2, 1, 3, 3), np.float32)  # two groups, one filter each: a 3x3 box sum per channel
    got = run_op("conv2d", [x, w], stride=2, padding=1, groups=2)
    assert got.shape == (1, 2, 2, 2)
    first = x[0, 0]
    assert got[0, 0, 0, 0] == first[0:2, 0:2].sum()  # top-left window hangs over the padding
    assert got[0, 0, 1, 1] == first[1:4, 1:4].sum()
    assert got[0, 1, 0, 0] == x[0, 1, 0:2, 0:2].sum()
    after = run_op("conv2d", [x, w], stride=2, padding=0, padding_end=1, groups=2)  # TF "same": zeros after only
    assert after.shape == (1, 2, 2, 2)
    assert after[0, 0, 0, 0] == first[0:3, 0:3].sum() and after[0, 0, 1, 1] == first[2:4, 2:4].sum()
    with pytest.raises(ShapeError, match="padding non-negative"):
        run_op("conv2d", [x, w], padding_end=(0, -1), groups=2)
    dilated = run_op("conv2d", [x[:, :1], np.ones((1, 1, 2, 2), np.float32)], dilation=2)
    assert dilated.shape == (1, 1, 2, 2)
    assert dilated[0, 0, 0, 0] == first[0, 0] + first[0, 2] + first[2, 0] + first[2, 2]


def pool_loop(x, kernel, stride, padding, kind):
    n_, c_, h, w = x.shape
    (kh_, kw_), (sh, sw), (ph, pw) = kernel, stride, padding
    oh_, ow_ = (h + 2 * ph - kh_) // sh + 1, (w + 2 * pw - kw_) // sw + 1
    out = np.zeros((n_, c_, oh_, ow_))
    for n, c, oh, ow in itertools.product(range(n_), range(c_), range(oh_), range(ow_)):
        values = []
        for kh, kw in itertools.product(range(kh_), range(kw_)):
            ih, iw = oh * sh - ph + kh, ow * sw - pw + kw
            inside = 0 <= ih < h and 0 <= iw < w
            if inside:
                values.append(float(x[n, c, ih, iw]))
            elif kind == "avg":
                values.append(0.0)  # count_include_pad
        out[n, c, oh, ow] = max(values) if kind == "max" else sum(values) / (kh_ * kw_)
    return out


@pytest.mark.parametrize("op", ["max_pool2d", "avg_pool2d"])
@settings(max_examples=30)
@given(data=st.data())
def test_pooling_matches_a_direct_loop(op, data):
    dtypes = (F32, I32) if op == "max_pool2d" else (F32,)
    types, attrs, arrays = draw_case(data, op, dtypes=dtypes, max_numel=150)
    normal = get_op(op).normalize_attrs(types, attrs)
    got = run_op(op, arrays, types, **attrs)
    expected = pool_loop(arrays[0], normal["kernel"], normal["stride"], normal["padding"], op[:3])
    close(got, expected, rtol=1e-6, atol=1e-6)


def test_max_pool_padding_never_wins():
    x = -np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)  # all negative: a zero pad would win
    got = run_op("max_pool2d", [x], kernel=3, stride=2, padding=1)
    np.testing.assert_array_equal(got[0, 0], [[-1, -2], [-5, -6]])
    xi = x.astype(np.int32)
    np.testing.assert_array_equal(run_op("max_pool2d", [xi], kernel=3, stride=2, padding=1), got.astype(np.int32))
    avg = run_op("avg_pool2d", [np.ones((1, 1, 2, 2), np.float32)], kernel=2, stride=1, padding=1)
    np.testing.assert_array_equal(avg[0, 0], [[0.25, 0.5, 0.25], [0.5, 1.0, 0.5], [0.25, 0.5, 0.25]])


# ----- layout ------------------------------------------------------------------------------------------
@settings(max_examples=25)
@given(data=st.data())
def test_transpose_moves_every_element(data):
    types, attrs, (x,) = draw_case(data, "transpose", dtypes=(F32, I32), max_numel=96)
    got = run_op("transpose", [x], types, **attrs)
    perm = [p % x.ndim for p in attrs["perm"]] if "perm" in attrs else list(reversed(range(x.ndim)))
    assert got.shape == tuple(x.shape[p] for p in perm)
    for index in itertools.product(*map(range, got.shape)):
        source = [0] * x.ndim
        for axis, p in enumerate(perm):
            source[p] = index[axis]
        assert got[index] == x[tuple(source)]


@settings(max_examples=25)
@given(data=st.data())
def test_reshape_keeps_row_major_order(data):
    types, attrs, (x,) = draw_case(data, "reshape", dtypes=(F32, I32), max_numel=96)
    got = run_op("reshape", [x], types, **attrs)
    wanted = list(attrs["shape"])
    if -1 in wanted:
        wanted[wanted.index(-1)] = x.size // max(1, math.prod(d for d in wanted if d != -1))
    assert got.shape == tuple(wanted)
    flat_in = [x[i].item() for i in itertools.product(*map(range, x.shape))]
    flat_out = [got[i].item() for i in itertools.product(*map(range, got.shape))]
    assert flat_in == flat_out


@settings(max_examples=25)
@given(data=st.data())
def test_broadcast_to_repeats(data):
    types, attrs, (x,) = draw_case(data, "broadcast_to", dtypes=(F32, BOOL), max_numel=96)
    got = run_op("broadcast_to", [x], types, **attrs)
    assert got.shape == tuple(attrs["shape"])
    for index in itertools.product(*map(range, got.shape)):
        assert got[index] == x[operand_index(index, x.shape)]


@settings(max_examples=40)
@given(data=st.data())
def test_slice_follows_python_slicing(data):
    types, attrs, (x,) = draw_case(data, "slice", dtypes=(F32, I64), max_numel=96)
    got = run_op("slice", [x], types, **attrs)
    steps = attrs.get("step") or [1] * x.ndim
    kept = [list(range(n))[slice(a, b, s)] for n, a, b, s in zip(x.shape, attrs["start"], attrs["stop"], steps)]
    assert got.shape == tuple(len(k) for k in kept)
    for index in itertools.product(*map(range, got.shape)):
        assert got[index] == x[tuple(k[i] for k, i in zip(kept, index))]


def test_slice_negative_indices_and_clamping():
    x = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(run_op("slice", [x], start=[-3], stop=[100]), [7, 8, 9])
    np.testing.assert_array_equal(run_op("slice", [x], start=[1], stop=[-1], step=[3]), [1, 4, 7])
    node_attrs = GraphBuilder().graph.create_node("slice", [GraphBuilder().input("x", "f32[10]")],
                                                  {"start": [-3], "stop": [100]}).attrs
    assert node_attrs == {"start": (7,), "stop": (10,), "step": (1,)}  # stored in canonical form
    with pytest.raises(ShapeError, match="slice: empty slice"):
        run_op("slice", [x], start=[5], stop=[5])


@settings(max_examples=25)
@given(data=st.data())
def test_concat_joins_in_order(data):
    types, attrs, arrays = draw_case(data, "concat", dtypes=(F32, I32), max_numel=96)
    got = run_op("concat", arrays, types, **attrs)
    axis = attrs.get("axis", 0) % arrays[0].ndim
    starts = attrs.get("starts") or [0] * len(arrays)
    sizes = attrs.get("sizes") or [a.shape[axis] for a in arrays]
    pieces = []
    for a, start, size in zip(arrays, starts, sizes):  # each operand's window, in order
        pieces += [np.take(a, i, axis=axis) for i in range(start, start + size)]
    assert got.shape[axis] == len(pieces)
    for i, piece in enumerate(pieces):
        np.testing.assert_array_equal(np.take(got, i, axis=axis), piece)


@settings(max_examples=25)
@given(data=st.data())
def test_gather_picks_rows_including_negative_indices(data):
    types, attrs, (table, idx) = draw_case(data, "gather", dtypes=(F32, I32), max_numel=96)
    got = run_op("gather", [table, idx], types, **attrs)
    axis = attrs.get("axis", 0) % table.ndim
    assert got.shape == table.shape[:axis] + idx.shape + table.shape[axis + 1:]
    for index in itertools.product(*map(range, got.shape)):
        before, picked, after = index[:axis], index[axis:axis + idx.ndim], index[axis + idx.ndim:]
        row = int(idx[picked]) % table.shape[axis]
        assert got[index] == table[before + (row,) + after]


def test_gather_embedding_lookup_and_out_of_range():
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    ids = np.array([[3, 0], [-1, 1]], np.int64)
    got = run_op("gather", [table, ids])
    assert got.shape == (2, 2, 3)
    np.testing.assert_array_equal(got[1, 0], table[3])
    with pytest.raises(IndexError, match="gather: index out of range"):
        run_op("gather", [table, np.array([4], np.int64)])


# ----- composites ----------------------------------------------------------------------------------------
def expand_fully(graph, rounds: int = 8):
    """Replace composite nodes by their decompositions (GraphBuilder before the node, then
    replace_all_uses and erase_node) until none is left; composites may use other composites."""
    for _ in range(rounds):
        composites = [n for n in graph.nodes if n.opdef.is_composite]
        if not composites:
            return graph
        for node in composites:
            b = GraphBuilder(graph, before=node)
            new = node.opdef.decompose_fn(b, list(node.inputs), node.attrs)
            assert [v.type for v in new] == list(node.result_types), node
            for old, value in zip(node.results, new):
                graph.replace_all_uses(old, value)
            graph.erase_node(node)
        verify(graph)
    raise AssertionError(f"composites still left after {rounds} rounds: {[n.op for n in graph.nodes]}")


@pytest.mark.parametrize("op", COMPOSITES)
@settings(max_examples=30)
@given(data=st.data())
def test_decomposition_matches_the_composite(op, data):
    types, attrs, arrays = draw_case(data, op, dtypes=(F32,), max_numel=128)
    opdef = get_op(op)
    normal = opdef.normalize_attrs(types, attrs)
    results = list(opdef.infer(types, normal))
    expanded = opdef.expand(types, normal)
    verify(expanded)
    assert [v.type for v in expanded.outputs] == results
    (once,) = run(expanded, arrays)
    expand_fully(expanded)
    assert all(not n.opdef.is_composite for n in expanded.nodes), [n.op for n in expanded.nodes]
    (got,) = run(expanded, arrays)
    (expected,) = opdef.reference(arrays, normal, results)
    close(got, expected, rtol=1e-5, atol=1e-5)
    close(once, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", COMPOSITES)
@settings(max_examples=10)
@given(data=st.data())
def test_decomposition_in_half_precision_stays_close(op, data):
    types, attrs, arrays = draw_case(data, op, dtypes=(F16, BF16), max_numel=64)
    opdef = get_op(op)
    normal = opdef.normalize_attrs(types, attrs)
    (got,) = run(opdef.expand(types, normal), arrays)
    (expected,) = opdef.reference(arrays, normal, opdef.infer(types, normal))
    assert got.dtype == expected.dtype == types[0].dtype.numpy
    scale = max(1.0, float(np.max(np.abs(expected.astype(np.float64)), initial=0)))
    close(got, expected, rtol=0.1, atol=0.1 * scale)


def softmax_rows(x: np.ndarray, axis: int, log: bool = False) -> np.ndarray:
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    out = np.empty_like(moved)
    for index in itertools.product(*map(range, moved.shape[:-1])):
        row = [float(v) for v in moved[index]]
        top = max(row)
        total = math.fsum(math.exp(v - top) for v in row)
        out[index] = [(v - top - math.log(total)) if log else math.exp(v - top) / total for v in row]
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@settings(max_examples=20)
@given(data=st.data())
def test_softmax_formula(op, data):
    types, attrs, (x,) = draw_case(data, op, max_numel=96)
    got = run_op(op, [x], types, **attrs)
    axis = attrs.get("axis", -1)
    close(got, softmax_rows(x, axis, log=op == "log_softmax"), 1e-5, 1e-6)
    if op == "softmax":
        close(got.sum(axis=axis), np.ones(np.delete(np.array(x.shape), axis % x.ndim)), 1e-5, 1e-5)


def test_softmax_is_shift_invariant_and_survives_large_inputs():
    x = np.array([[1000.0, 1001.0, 1002.0]], np.float32)
    close(run_op("softmax", [x]), softmax_rows(x - 1000, -1), 1e-6, 1e-7)
    assert np.all(np.isfinite(run_op("log_softmax", [x])))


def norm_rows(x, count, eps, rms=False):
    shape = x.shape
    rows = x.astype(np.float64).reshape(-1, math.prod(shape[len(shape) - count:]))
    out = np.empty_like(rows)
    for r, row in enumerate(rows):
        values = [float(v) for v in row]
        if rms:
            denom = math.sqrt(math.fsum(v * v for v in values) / len(values) + eps)
            out[r] = [v / denom for v in values]
        else:
            mu = math.fsum(values) / len(values)
            var = math.fsum((v - mu) ** 2 for v in values) / len(values)
            out[r] = [(v - mu) / math.sqrt(var + eps) for v in values]
    return out.reshape(shape)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@settings(max_examples=20)
@given(data=st.data())
def test_norm_formulas(op, data):
    types, attrs, arrays = draw_case(data, op, max_numel=96)
    normal = get_op(op).normalize_attrs(types, attrs)
    got = run_op(op, arrays, types, **attrs)
    x, *affine = arrays
    expected = norm_rows(x, len(normal["axes"]), normal["eps"], rms=op == "rms_norm")
    if affine:
        expected = expected * affine[0].astype(np.float64)
    if len(affine) > 1:
        expected = expected + affine[1]
    close(got, expected, 1e-5, 1e-5)


@settings(max_examples=20)
@given(data=st.data())
def test_batch_norm_formula(data):
    types, attrs, arrays = draw_case(data, "batch_norm", max_numel=96)
    eps = get_op("batch_norm").normalize_attrs(types, attrs)["eps"]
    got = run_op("batch_norm", arrays, types, **attrs)
    x, mean, var, *affine = arrays
    expected = np.empty(x.shape)
    for index in itertools.product(*map(range, x.shape)):
        c = index[1]
        y = (float(x[index]) - float(mean[c])) / math.sqrt(float(var[c]) + eps)
        if affine:
            y *= float(affine[0][c])
        if len(affine) > 1:
            y += float(affine[1][c])
        expected[index] = y
    close(got, expected, 1e-5, 1e-5)


def attention_loop(q, k, v, mask, causal, scale):
    length, source = q.shape[-2], k.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores_shape = q.shape[:-1] + (source,)
    out = np.empty(q.shape[:-1] + (v.shape[-1],))
    for index in itertools.product(*map(range, q.shape[:-2])):
        for i in range(length):
            logits = []
            for j in range(source):
                s = math.fsum(float(a) * float(b) for a, b in zip(q[index + (i,)], k[index + (j,)])) * scale
                keep = True
                if causal:
                    keep = j <= i
                if mask is not None:
                    m = mask[operand_index(index + (i, j), mask.shape)] if mask.ndim else mask[()]
                    if mask.dtype == np.bool_:
                        keep = bool(m)
                    else:
                        s += float(m)
                logits.append(s if keep else -math.inf)
            top = max(logits)
            weights = [math.exp(s - top) for s in logits]
            total = math.fsum(weights)
            out[index + (i,)] = [math.fsum(w * float(v[index + (j, d)]) for j, w in enumerate(weights)) / total
                                 for d in range(v.shape[-1])]
    assert len(scores_shape) == q.ndim
    return out


@settings(max_examples=25)
@given(data=st.data())
def test_attention_formula(data):
    types, attrs, arrays = draw_case(data, "attention", dtypes=(F32, BOOL), max_numel=96)
    got = run_op("attention", arrays, types, **attrs)
    q, k, v, *mask = arrays
    expected = attention_loop(q, k, v, mask[0] if mask else None, attrs.get("causal", False), attrs.get("scale"))
    close(got, expected, 1e-5, 1e-5)


# ----- PyTorch ------------------------------------------------------------------------------------------
def _torch():
    return pytest.importorskip("torch", reason="PyTorch is optional (pip install tilegraph[torch]); "
                                               "the torch comparisons need it")


def _t(a):
    torch = _torch()
    return torch.from_numpy(np.ascontiguousarray(a))


TORCH_OPS = ["conv2d", "max_pool2d", "avg_pool2d", "softmax", "log_softmax", "layer_norm", "rms_norm", "batch_norm",
             "attention", "gelu", "silu", "sigmoid", "matmul", "gather", "relu6", "erf"]


def torch_reference(op, arrays, normal, raw):
    torch = _torch()
    F = torch.nn.functional
    t = [_t(a) for a in arrays]
    if op == "conv2d":
        (ph, pw), end = normal["padding"], normal["padding_end"] or normal["padding"]
        x = F.pad(t[0], (pw, end[1], ph, end[0]))  # torch's own padding is symmetric
        return F.conv2d(x, t[1], stride=normal["stride"], dilation=normal["dilation"], groups=normal["groups"])
    if op == "max_pool2d":
        return F.max_pool2d(t[0], normal["kernel"], normal["stride"], normal["padding"])
    if op == "avg_pool2d":
        return F.avg_pool2d(t[0], normal["kernel"], normal["stride"], normal["padding"], count_include_pad=True)
    if op in ("softmax", "log_softmax"):
        return getattr(F, op)(t[0], dim=normal["axis"])
    if op in ("layer_norm", "rms_norm"):
        shape = tuple(arrays[0].shape[a] for a in normal["axes"])
        if op == "layer_norm":
            return F.layer_norm(t[0], shape, *(t[1:] + [None, None])[:2], eps=normal["eps"])
        return F.rms_norm(t[0], shape, t[1] if len(t) > 1 else None, eps=normal["eps"])
    if op == "batch_norm":
        return F.batch_norm(t[0], t[1], t[2], *(t[3:] + [None, None])[:2], training=False, eps=normal["eps"])
    if op == "attention":
        mask = t[3].reshape((1,) * (2 - t[3].dim()) + tuple(t[3].shape)) if len(t) > 3 else None  # torch: rank >= 2
        return F.scaled_dot_product_attention(t[0], t[1], t[2], attn_mask=mask,
                                              is_causal=normal["causal"], scale=normal["scale"])
    if op == "gelu":
        return F.gelu(t[0], approximate=normal["approximate"])
    if op in ("silu", "relu6"):
        return getattr(F, op)(t[0])
    if op in ("sigmoid", "erf"):
        return getattr(torch, op)(t[0])
    if op == "matmul":
        return torch.matmul(t[0], t[1])
    if op == "gather":
        idx = t[1].long()
        axis = normal["axis"]
        picked = torch.index_select(t[0], axis, idx.reshape(-1) % arrays[0].shape[axis])
        return picked.reshape(arrays[0].shape[:axis] + arrays[1].shape + arrays[0].shape[axis + 1:])
    raise AssertionError(op)


@pytest.mark.parametrize("op", TORCH_OPS)
@settings(max_examples=15)
@given(data=st.data())
def test_matches_torch(op, data):
    _torch()
    dtypes = (F32, BOOL, I64) if op in ("attention", "gather") else (F32,)
    types, attrs, arrays = draw_case(data, op, dtypes=dtypes, max_numel=128)
    normal = get_op(op).normalize_attrs(types, attrs)
    got = run_op(op, arrays, types, **attrs)
    expected = torch_reference(op, arrays, normal, attrs).numpy()
    close(got, expected, rtol=1e-5, atol=1e-5)


def test_matches_torch_mlp_block():
    torch = _torch()
    rng = np.random.default_rng(0)
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (8, 16), (16, 8)))
    gamma = rng.standard_normal(8).astype(np.float32)
    b = GraphBuilder()
    xi, p1, p2, g = b.input("x", x.shape), b.param("w1", w1.shape), b.param("w2", w2.shape), b.param("g", (8,))
    h = b.gelu(b.matmul(xi, p1), approximate="tanh")
    y = b.layer_norm(b.add(b.matmul(h, p2), xi), g)
    graph = b.output(b.softmax(y, axis=-1))
    (got,) = run(graph, [x], params={"w1": w1, "w2": w2, "g": gamma})
    F = torch.nn.functional
    tx = _t(x)
    ty = F.layer_norm(F.gelu(tx @ _t(w1), approximate="tanh") @ _t(w2) + tx, (8,), _t(gamma))
    close(got, F.softmax(ty, dim=-1).numpy(), 1e-5, 1e-6)


# ----- shape errors name the op and the shapes ------------------------------------------------------------
def build(op, *types, **attrs):
    b = GraphBuilder()
    values = [b.input(f"x{i}", t) for i, t in enumerate(types)]
    return b.op(op, *values, **attrs)


def test_matmul_inner_dim_error_names_op_and_shapes():
    with pytest.raises(ShapeError) as info:
        build("matmul", "f32[128, 256]", "f32[128, 1024]")
    assert "matmul: inner dims differ: f32[128,256] @ f32[128,1024]" in str(info.value)


@pytest.mark.parametrize("op, types, attrs, message", [
    ("matmul", ["f32[4]", "f32[4, 2]"], {}, "matmul: operands need rank 2 or more: f32[4] @ f32[4,2]"),
    ("matmul", ["f32[2, 3, 4]", "f32[5, 4, 6]"], {}, "matmul: batch dims do not broadcast: f32[2,3,4] @ f32[5,4,6]"),
    ("matmul", ["f32[2, 3]", "f16[3, 4]"], {}, "matmul: operands must have one dtype, got f32[2,3], f16[3,4]"),
    ("batch_matmul", ["f32[2, 3, 4]", "f32[3, 4, 5]"], {}, "batch_matmul: needs [B,M,K] @ [B,K,N] with one batch"),
    ("add", ["f32[2, 3]", "f32[3, 2]"], {}, "add: cannot broadcast sizes [2, 3] at axis -2: f32[2,3], f32[3,2]"),
    ("where", ["f32[2]", "f32[2]", "f32[2]"], {}, "where: condition must be bool, got f32[2]"),
    ("exp", ["i32[2]"], {}, "exp: needs a floating-point operand, got i32[2]"),
    ("mean", ["i64[2]"], {}, "mean: needs a floating-point operand, got i64[2]"),
    ("conv2d", ["f32[1, 3, 8, 8]", "f32[4, 2, 3, 3]"], {},
     "conv2d: weight has 2 channels per group, input has 3 channels in 1 group(s): input f32[1,3,8,8], "
     "weight f32[4,2,3,3]"),
    ("conv2d", ["f32[1, 4, 8, 8]", "f32[4, 2, 3, 3]"], {"groups": 3}, "conv2d: groups=3 must divide input channels 4"),
    ("conv2d", ["f32[1, 1, 2, 2]", "f32[1, 1, 3, 3]"], {}, "conv2d: kernel larger than padded input"),
    ("conv2d", ["f32[3, 8, 8]", "f32[4, 3, 3, 3]"], {}, "conv2d: needs input [N,C,H,W] and weight"),
    ("max_pool2d", ["f32[1, 1, 4, 4]"], {"kernel": 2, "padding": 2}, "max_pool2d: padding [2, 2] must be at most half"),
    ("avg_pool2d", ["f32[4, 4]"], {"kernel": 2}, "avg_pool2d: needs an [N,C,H,W] input, got f32[4,4]"),
    ("reshape", ["f32[2, 3]"], {"shape": [4]}, "reshape: cannot reshape f32[2,3] (6 elements) to [4]"),
    ("reshape", ["f32[2, 3]"], {"shape": [-1, -1]}, "reshape: at most one -1 in shape"),
    ("concat", ["f32[2, 3]", "f32[3, 3]"], {"axis": 1}, "concat: operands differ outside axis 1: f32[2,3], f32[3,3]"),
    ("gather", ["f32[4, 3]", "f32[2]"], {}, "gather: indices must be i32 or i64, got f32[2]"),
    ("transpose", ["f32[2, 3]"], {"perm": [0, 0]}, "transpose: perm [0, 0] is not a permutation of 2 axes"),
    ("broadcast_to", ["f32[3]"], {"shape": [4]}, "broadcast_to: cannot broadcast f32[3] to [4]"),
    ("slice", ["f32[4]"], {"start": [0, 0], "stop": [1, 1]}, "slice: start, stop and step need one entry per axis"),
    ("sum", ["f32[2, 3]"], {"axes": 2}, "sum: axis 2 out of range for rank 2"),
    ("layer_norm", ["f32[2, 3]"], {"axes": 0}, "layer_norm: axes [0] must be the trailing axes of f32[2,3]"),
    ("layer_norm", ["f32[2, 3]", "f32[2]"], {}, "layer_norm: scale/shift f32[2] must have the normalized shape [3]"),
    ("batch_norm", ["f32[2, 3]", "f32[2]", "f32[3]"], {}, "batch_norm: statistics f32[2] must have shape [3]"),
    ("attention", ["f32[2, 4]", "f32[3, 5]", "f32[3, 4]"], {}, "attention: need q[..., L, D], k[..., S, D]"),
    ("attention", ["f32[2, 4]", "f32[3, 4]", "f32[3, 4]", "bool[2, 3]"], {"causal": True},
     "attention: give either a mask or causal=true, not both"),
    # rank-0 operands have no axis to index (these used to crash with IndexError/AxisError)
    ("iota", [], {"shape": []}, "iota: axis 0 out of range for rank 0"),
    ("concat", ["f32[]", "f32[]"], {}, "concat: axis 0 out of range for rank 0"),
    ("gather", ["f32[]", "i32[2]"], {}, "gather: axis 0 out of range for rank 0"),
    ("sum", ["f32[]"], {"axes": 0}, "sum: axis 0 out of range for rank 0"),
    ("softmax", ["f32[]"], {"axis": 0}, "softmax: axis 0 out of range for rank 0"),
    # numpy has no bool negative/subtract, and integer average pooling would truncate each step
    ("neg", ["bool[2]"], {}, "neg: needs a numeric operand, got bool[2]"),
    ("sub", ["bool[2]", "bool[2]"], {}, "sub: needs numeric operands, got bool[2], bool[2]"),
    ("avg_pool2d", ["i32[1, 1, 2, 2]"], {"kernel": 2}, "avg_pool2d: needs a floating-point operand"),
])
def test_shape_errors_name_the_op_and_the_shapes(op, types, attrs, message):
    with pytest.raises(ShapeError) as info:
        build(op, *types, **attrs)
    assert message in str(info.value)


def test_attribute_and_arity_errors():
    with pytest.raises(ShapeError, match=r"softmax: unknown attribute 'axes' \(attributes: axis\)"):
        build("softmax", "f32[2]", axes=0)
    with pytest.raises(ShapeError, match="reshape: missing attribute shape"):
        build("reshape", "f32[2]")
    with pytest.raises(ShapeError, match="add: takes 2 operands, got 3"):
        build("add", "f32[2]", "f32[2]", "f32[2]")
    with pytest.raises(ShapeError, match="conv2d: attribute groups must be an integer, got 1.5"):
        build("conv2d", "f32[1, 1, 3, 3]", "f32[1, 1, 1, 1]", groups=1.5)
    with pytest.raises(ShapeError, match="gelu: attribute approximate='fast' is not valid; expected one of none, tanh"):
        build("gelu", "f32[2]", approximate="fast")
    with pytest.raises(ShapeError, match="unknown op 'matmull'; did you mean matmul"):
        get_op("matmull")
    with pytest.raises(AttributeError, match="did you mean"):
        GraphBuilder().matmull  # noqa: B018
    with pytest.raises(ShapeError, match="cast: attribute dtype: unknown dtype 'f8'"):
        build("cast", "f32[2]", dtype="f8")
    with pytest.raises(ShapeError, match="constant: value 1.5 is not an integer for i32"):
        GraphBuilder().constant(1.5, DType.i32)
    # integers are exact: int64's extremes (torch's fill for masked sort keys) stay what they are
    for extreme in (2 ** 63 - 1, -2 ** 63, np.int64(2 ** 63 - 1)):
        assert GraphBuilder().constant(extreme, DType.i64).producer.attrs["value"] == int(extreme)
