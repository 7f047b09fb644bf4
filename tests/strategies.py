"""Hypothesis strategies shared by every test suite: tensor types, single-op cases, random graphs, inputs.

Main entries
- `graphs(max_nodes, ops, dtypes)`: random well-typed, verified graphs over the whole op library.
- `graph_inputs(graph)`: input arrays valid for a graph (gather indices in range, masks usable, ...).
- `single_op_cases(op)`: `(input types, attrs)` for one op, valid by construction; `case_inputs` fills them.
- `tensor_types()`, `shapes()`: the building blocks.

Value ranges. Every graph from `graphs()` is numerically tame for *any* inputs in the standard ranges:
floats in [-1, 1], integers in [-8, 8), any bools (`reference.random_params` stays in these). The
generator tracks an interval per value (`value_bounds` recomputes them) and inserts guard ops so that
log/sqrt/rsqrt/pow bases and batch-norm variances are >= 0.5 (`add(abs(x), 0.5)`), divisors stay
away from zero, and no value grows past `VALUE_LIMIT` (`tanh(x)` in front of an op that would
overflow). Only three kinds of operand need special inputs, and they are always graph inputs used
directly: gather indices (in [-n, n)), integer `pow` exponents (in [0, 4)) and bool attention masks
(each row keeps at least one key, else softmax of all -inf gives NaN). When `ops` leaves out the
guard ops (abs, add, constant, tanh), guarded operands become graph inputs of a restricted domain too.
`graph_inputs` knows every domain (it derives them from the uses, so it also serves hand-built
graphs); `reference.random_inputs` gets the gather indices and batch-norm variances right but not
bool attention masks, so use `graph_inputs` for graphs that may hold them.

Generation is constructive (no `assume`, no filtering): every op's generator builds a valid case,
reusing pool values of a fitting type where it can and creating fresh inputs/params otherwise.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence

import numpy as np
from hypothesis import strategies as st

from tilegraph.ir import DType, Graph, GraphBuilder, TensorType, Value, ValueKind, all_ops, get_op
from tilegraph.ir.types import to_dtype
from tilegraph.ir.verifier import verify

F32, F16, BF16, I32, I64, BOOL = DType.f32, DType.f16, DType.bf16, DType.i32, DType.i64, DType.bool
FLOAT_DTYPES = (F32, F16, BF16)
INT_DTYPES = (I32, I64)
ALL_DTYPES = (F32, F16, BF16, I32, I64, BOOL)
# graphs() default: full-precision floats, integers and bools; pass dtypes=ALL_DTYPES for f16/bf16 too.
DEFAULT_DTYPES = (F32, I32, I64, BOOL)

MAX_RANK = 4
MAX_SIDE = 6
VALUE_LIMIT = 1e3  # no value of a generated graph exceeds this in magnitude (for the standard inputs)
FLOAT_RANGE = (-1.0, 1.0)
INT_RANGE = (-8, 7)  # inclusive
Interval = tuple[float, float]

__all__ = [
    "ALL_DTYPES", "DEFAULT_DTYPES", "FLOAT_DTYPES", "INT_DTYPES", "MAX_RANK", "MAX_SIDE", "VALUE_LIMIT",
    "shapes", "tensor_types", "single_op_cases", "case_inputs", "graphs", "graph_inputs", "input_domains",
    "operand_domains", "arrays_for", "value_bounds", "propagate_interval", "GENERATORS", "broadcastable",
]


# ----- shapes and types -------------------------------------------------------------------------
def _draw_dims(draw, rank: int, max_side: int, max_numel: int | None) -> tuple[int, ...]:
    dims, budget = [], max_numel if max_numel is not None else max_side ** max(rank, 1)
    for _ in range(rank):
        d = draw(st.integers(1, max(1, min(max_side, budget))))
        dims.append(d)
        budget //= d  # the product of all dims stays <= max_numel
    return tuple(dims)


@st.composite
def shapes(draw, min_rank: int = 0, max_rank: int = MAX_RANK, max_side: int = MAX_SIDE,
           max_numel: int | None = None) -> tuple[int, ...]:
    """Static shapes, dims 1..max_side (size-1 dims are common), at most max_numel elements."""
    return _draw_dims(draw, draw(st.integers(min_rank, max_rank)), max_side, max_numel)


def _draw_dtype(draw, candidates: Sequence[DType]) -> DType:
    """The first candidate most of the time (and when shrinking), any of them sometimes."""
    if len(candidates) == 1 or draw(st.integers(0, 9)) < 6:
        return candidates[0]
    return draw(st.sampled_from(list(candidates[1:])))


def tensor_types(dtypes: Collection[DType] = DEFAULT_DTYPES, min_rank: int = 0, max_rank: int = MAX_RANK,
                 max_side: int = MAX_SIDE, max_numel: int | None = None) -> st.SearchStrategy[TensorType]:
    """TensorTypes with small static shapes over `dtypes` (the first dtype is the most common)."""
    ordered = _ordered(dtypes)

    @st.composite
    def build(draw):
        return TensorType(draw(shapes(min_rank, max_rank, max_side, max_numel)), _draw_dtype(draw, ordered))

    return build()


def _ordered(dtypes: Collection[DType]) -> list[DType]:
    dtypes = [DType.parse(d) if isinstance(d, str) else d for d in dtypes]
    first = [d for d in ALL_DTYPES if d in dtypes]
    return first


def broadcastable(a: Sequence[int], b: Sequence[int]) -> bool:
    return all(x == y or x == 1 or y == 1 for x, y in zip(reversed(a), reversed(b)))


def _broadcast(*shapes_: Sequence[int]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes_)))


# ----- the drawing context shared by single-op cases and graphs -------------------------------------
KIND_TEST: dict[str, Callable[[DType], bool]] = {
    "float": lambda d: d.is_float,
    "int": lambda d: d.is_int,
    "numeric": lambda d: d is not BOOL,
    "bool": lambda d: d is BOOL,
    "any": lambda d: True,
}


class _Ctx:
    """What an op generator may ask for: dtypes, shapes, pool values to reuse, sizes."""

    def __init__(self, draw, dtypes: Sequence[DType], pool: Sequence[TensorType] = (), max_rank: int = MAX_RANK,
                 max_side: int = MAX_SIDE, max_numel: int | None = None, reuse: int = 8) -> None:
        self.draw = draw
        self.dtypes = list(dtypes)
        self.pool = list(pool)
        self.max_rank = max_rank
        self.max_side = max_side
        self.max_numel = max_numel if max_numel is not None else max_side ** max_rank
        self.reuse = reuse  # out of 10: how often an existing value of a fitting type is taken
        self.op: str | None = None  # the op being generated
        self.anchor: TensorType | None = None  # the type of the value the graph wants to extend

    def has(self, kind: str) -> bool:
        return any(KIND_TEST[kind](d) for d in self.dtypes)

    def dtype(self, kind: str) -> DType:
        candidates = [d for d in self.dtypes if KIND_TEST[kind](d)]
        if not candidates:
            raise ValueError(f"no dtype of kind {kind} among {self.dtypes}")
        return _draw_dtype(self.draw, candidates)

    def side(self, lo: int = 1, hi: int | None = None) -> int:
        return self.draw(st.integers(lo, max(lo, min(self.max_side, hi or self.max_side))))

    def shape(self, min_rank: int = 0, max_rank: int | None = None, max_numel: int | None = None) -> tuple[int, ...]:
        max_rank = self.max_rank if max_rank is None else min(max_rank, self.max_rank)
        return self.draw(shapes(min_rank, max_rank, self.max_side, max_numel or self.max_numel))

    def coin(self, out_of_ten: int = 5) -> bool:
        return self.draw(st.integers(0, 9)) < out_of_ten

    def pick(self, accept: Callable[[TensorType], bool], fresh: Callable[[], TensorType]) -> TensorType:
        """The type of a pool value that `accept`s (usually, if there is one), else a fresh type."""
        candidates = [t for t in self.pool if accept(t)]
        if candidates and self.coin(self.reuse):
            return self.draw(st.sampled_from(candidates))
        return fresh()

    def first(self, fresh: Callable[[], TensorType] | None = None) -> TensorType:
        """The first operand of the op being generated: the anchor (the value the graph is growing from)
        when it fits, else a pool value of the right kind and rank, else a fresh type."""
        kind, min_rank, max_rank = OP_FIRST[self.op]
        max_rank = min(max_rank, self.max_rank)

        def accept(t: TensorType) -> bool:
            return KIND_TEST[kind](t.dtype) and min_rank <= t.rank <= max_rank and t.numel <= self.max_numel

        if self.anchor is not None and accept(self.anchor) and self.coin(9):
            return self.anchor
        return self.pick(accept, fresh or (lambda: TensorType(self.shape(min_rank, max_rank), self.dtype(kind))))

    def partner(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A shape that broadcasts with `shape` (same, scalar, with size-1 dims, shorter, or longer)."""
        mode = self.draw(st.integers(0, 4))
        if mode == 0:
            return shape
        if mode == 1:
            return ()
        if mode in (2, 3):
            return self.under(shape)
        rank = self.draw(st.integers(0, self.max_rank))
        dims = []
        for axis in range(rank):
            back = rank - axis  # position from the right
            if back <= len(shape):
                size = shape[-back]
                dims.append(self.side() if size == 1 else (size if self.coin(6) else 1))
            else:
                dims.append(self.side())
        result = _broadcast(shape, dims)
        return tuple(dims) if math.prod(result) <= self.max_numel else self.under(shape)

    def under(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A shape that broadcasts *to* `shape`: leading dims dropped, some dims set to 1."""
        keep = self.draw(st.integers(0, len(shape)))
        tail = shape[len(shape) - keep:]
        return tuple(1 if self.coin(3) else d for d in tail)

    def over(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A shape `shape` broadcasts to: size-1 dims grown, leading dims added."""
        extra = self.draw(st.integers(0, self.max_rank - len(shape)))
        grown = [self.side() for _ in range(extra)] + [self.side() if d == 1 and self.coin(6) else d for d in shape]
        return tuple(grown) if math.prod(grown) <= self.max_numel else shape

    def axis(self, rank: int) -> int:
        """An axis of a rank>=1 tensor, sometimes written negative."""
        axis = self.draw(st.integers(0, rank - 1))
        return axis - rank if self.coin(3) else axis

    def pair(self, a: int, b: int):
        """A `pair` attribute as users write it: an int when both agree (sometimes), else a list."""
        if a == b and self.coin(5):
            return a
        return [a, b]


# ----- per-op generators: (ctx) -> (operand types, attrs as a user writes them) ----------------------
OpGen = Callable[[_Ctx], tuple[list[TensorType], dict]]
GENERATORS: dict[str, OpGen] = {}
# what each op's first operand must be: (dtype kind, min rank, max rank); None for ops without operands
OP_FIRST: dict[str, tuple[str, int, int] | None] = {}
OP_KIND: dict[str, str] = {}  # the dtype kind an op's data operands need


def _gen(names: Sequence[str] | str, kind: str = "any", min_rank: int = 0, max_rank: int = MAX_RANK,
         operands: bool = True):
    def register(fn: OpGen) -> OpGen:
        for name in [names] if isinstance(names, str) else names:
            GENERATORS[name] = fn
            OP_KIND[name] = kind
            OP_FIRST[name] = (kind, min_rank, max_rank) if operands else None
        return fn
    return register


def accepts_first(op: str, t: TensorType) -> bool:
    """Whether `t` can be the first operand of `op` as its generator builds it."""
    first = OP_FIRST[op]
    return first is not None and KIND_TEST[first[0]](t.dtype) and first[1] <= t.rank <= first[2]


FLOAT_UNARY = ("exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "relu6", "silu", "sin", "cos", "exp2", "log2",
               "log1p", "expm1")  # gelu: below


def _gen_unary(c: _Ctx):
    return [c.first()], {}


_gen(FLOAT_UNARY, "float")(_gen_unary)
_gen("neg", "numeric")(_gen_unary)
_gen(("abs", "relu"), "any")(_gen_unary)


@_gen("gelu", "float")
def _gen_gelu(c: _Ctx):
    x = c.first()
    mode = c.draw(st.integers(0, 2))
    return [x], ({} if mode == 0 else {"approximate": ["none", "tanh"][mode - 1]})


@_gen("cast", "any")
def _gen_cast(c: _Ctx):
    x = c.first()
    target = c.dtype("any")
    return [x], {"dtype": target if c.coin(5) else str(target)}


def _binary():
    def gen(c: _Ctx):
        x = c.first()
        y_shape = c.partner(x.shape)
        y = c.pick(lambda t: t.dtype is x.dtype and broadcastable(t.shape, x.shape)
                   and len(_broadcast(t.shape, x.shape)) <= c.max_rank
                   and math.prod(_broadcast(t.shape, x.shape)) <= c.max_numel,
                   lambda: TensorType(y_shape, x.dtype))
        return ([y, x] if c.coin(2) else [x, y]), {}
    return gen


for _name in ("add", "mul", "maximum", "minimum"):
    _gen(_name, "any")(_binary())
for _name in ("sub", "div", "pow"):
    _gen(_name, "numeric")(_binary())
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    _gen(_name, "any")(_binary())


@_gen("where", "bool")
def _gen_where(c: _Ctx):
    cond = c.first()

    def fits(t: TensorType, shape: tuple[int, ...]) -> bool:
        if not broadcastable(t.shape, shape):
            return False
        joint = _broadcast(t.shape, shape)
        return len(joint) <= c.max_rank and math.prod(joint) <= c.max_numel

    a = c.pick(lambda t: fits(t, cond.shape), lambda: TensorType(c.partner(cond.shape), c.dtype("any")))
    joint = _broadcast(cond.shape, a.shape)
    b = c.pick(lambda t: t.dtype is a.dtype and fits(t, joint), lambda: TensorType(c.under(joint), a.dtype))
    return [cond, a, b] if c.coin(7) else [cond, b, a], {}


def _value_of(c: _Ctx, dtype: DType):
    if dtype.is_float:
        return c.draw(st.sampled_from([0.0, 1.0, -1.0, 0.5, 0.25, -0.75]) | st.floats(-1, 1, width=32))
    if dtype.is_int:
        return c.draw(st.integers(INT_RANGE[0], INT_RANGE[1]))
    return c.draw(st.booleans())


@_gen("constant", "any", operands=False)
def _gen_constant(c: _Ctx):
    dtype = c.dtype("any")
    shape = c.shape() if c.coin(4) else ()
    attrs = {"value": _value_of(c, dtype)}
    if shape or c.coin(3):
        attrs["shape"] = shape
    if dtype is not F32 or c.coin(3):
        attrs["dtype"] = dtype
    return [], attrs


@_gen("iota", "any", operands=False)
def _gen_iota(c: _Ctx):
    shape = c.shape(min_rank=1)
    attrs = {"shape": shape}
    if c.coin(7):
        attrs["axis"] = c.axis(len(shape))
    if I64 not in c.dtypes or c.coin(7):  # left out, the dtype is i64
        attrs["dtype"] = c.dtype("any")
    return [], attrs


def _axes_attr(c: _Ctx, rank: int) -> dict:
    """Reduction axes as users write them: left out or None (all), one int, a list (maybe empty: none)."""
    mode = c.draw(st.integers(0, 4))
    if mode == 0:
        return {}
    if mode == 1:
        return {"axes": None}
    if mode == 2 and rank:
        return {"axes": c.axis(rank)}
    if rank == 0:
        return {"axes": []}
    chosen = c.draw(st.lists(st.integers(0, rank - 1), min_size=0 if mode == 4 else 1, max_size=rank, unique=True))
    return {"axes": [a - rank if c.coin(3) else a for a in chosen]}


def _reduction():
    def gen(c: _Ctx):
        x = c.first()
        attrs = _axes_attr(c, x.rank)
        if c.coin(6):
            attrs["keepdims"] = c.coin(5)
        return [x], attrs
    return gen


for _name in ("sum", "max", "min"):
    _gen(_name, "any")(_reduction())
_gen("mean", "float")(_reduction())


def _batch_partner(c: _Ctx, batch: tuple[int, ...], max_rank: int) -> tuple[int, ...]:
    mode = c.draw(st.integers(0, 3))
    if mode == 0 or max_rank == 0:
        return batch if len(batch) <= max_rank else batch[len(batch) - max_rank:]
    if mode == 1:
        return c.under(batch)
    rank = c.draw(st.integers(0, max_rank))
    dims = []
    for axis in range(rank):
        back = rank - axis
        if back <= len(batch):
            dims.append(c.side(1, 3) if batch[-back] == 1 else (batch[-back] if c.coin(6) else 1))
        else:
            dims.append(c.side(1, 3))
    return tuple(dims)


@_gen("matmul", "numeric", min_rank=2)
def _gen_matmul(c: _Ctx):
    a = c.first()
    k = a.shape[-1]
    batch = a.shape[:-2]

    def fits(t: TensorType) -> bool:
        return (t.dtype is a.dtype and t.rank >= 2 and t.shape[-2] == k and broadcastable(t.shape[:-2], batch)
                and len(_broadcast(t.shape[:-2], batch)) + 2 <= c.max_rank)

    b = c.pick(fits, lambda: TensorType(_batch_partner(c, batch, c.max_rank - 2) + (k, c.side()), a.dtype))
    return [a, b], {}


@_gen("batch_matmul", "numeric", min_rank=3, max_rank=3)
def _gen_batch_matmul(c: _Ctx):
    a = c.first()
    bsz, _, k = a.shape
    b = c.pick(lambda t: t.dtype is a.dtype and t.rank == 3 and t.shape[:2] == (bsz, k),
               lambda: TensorType((bsz, k, c.side()), a.dtype))
    return [a, b], {}


def _fresh_nchw(c: _Ctx, kind: str, max_n: int = 2, max_c: int = 4) -> TensorType:
    return TensorType((c.side(1, max_n), c.side(1, max_c), c.side(), c.side()), c.dtype(kind))


@_gen("conv2d", "numeric", min_rank=4)
def _gen_conv2d(c: _Ctx):
    x = c.first(lambda: _fresh_nchw(c, "numeric"))
    channels = x.shape[1]
    groups = c.draw(st.sampled_from([g for g in range(1, channels + 1) if channels % g == 0]))
    filters = groups * c.side(1, 3)
    kernel, stride, padding, dilation, padding_end = [], [], [], [], []
    asymmetric = c.coin(3)  # zeros after the input differ from those before (TF "same" padding)
    for size in x.shape[2:]:
        k, s, p, d = c.side(1, 3), c.side(1, 3), c.draw(st.integers(0, 2)), c.side(1, 2)
        e = c.draw(st.integers(0, 2)) if asymmetric else p
        if size + p + e < d * (k - 1) + 1:
            d = 1
            k = min(k, size + p + e)
        kernel.append(k), stride.append(s), padding.append(p), dilation.append(d), padding_end.append(e)
    w = TensorType((filters, channels // groups, *kernel), x.dtype)
    attrs = {}
    for name, values in (("stride", stride), ("padding", padding), ("dilation", dilation)):
        default = [0, 0] if name == "padding" else [1, 1]
        if values != default or c.coin(2):
            attrs[name] = c.pair(*values)
    if padding_end != padding:
        attrs["padding_end"] = c.pair(*padding_end)
    if groups != 1 or c.coin(2):
        attrs["groups"] = groups
    return [x, w], attrs


def _pool(kind: str):
    def gen(c: _Ctx):
        x = c.first(lambda: _fresh_nchw(c, kind, 3, 3))
        kernel, padding, stride = [], [], []
        for size in x.shape[2:]:
            k = c.side(1, 3)
            p = c.draw(st.integers(0, k // 2))
            if size + 2 * p < k:
                k, p = size, 0
            kernel.append(k), padding.append(p), stride.append(c.side(1, 3))
        attrs = {"kernel": c.pair(*kernel)}
        if c.coin(6):
            attrs["stride"] = c.pair(*stride)
        if padding != [0, 0] or c.coin(2):
            attrs["padding"] = c.pair(*padding)
        return [x], attrs
    return gen


_gen("max_pool2d", "numeric", min_rank=4)(_pool("numeric"))
_gen("avg_pool2d", "float", min_rank=4)(_pool("float"))


@_gen("transpose", "any")
def _gen_transpose(c: _Ctx):
    x = c.first()
    if c.coin(2):
        return [x], {}
    perm = c.draw(st.permutations(range(x.rank)))
    return [x], {"perm": [p - x.rank if c.coin(2) else p for p in perm]}


def _factorize(c: _Ctx, n: int) -> list[int]:
    rank = c.draw(st.integers(0 if n == 1 else 1, c.max_rank))
    dims, remaining = [], n
    for _ in range(rank - 1):
        d = c.draw(st.sampled_from([d for d in range(1, remaining + 1) if remaining % d == 0]))
        dims.append(d)
        remaining //= d
    return dims + [remaining] if rank else []


@_gen("reshape", "any")
def _gen_reshape(c: _Ctx):
    x = c.first()
    dims = _factorize(c, x.numel)
    if dims and c.coin(3):
        dims[c.draw(st.integers(0, len(dims) - 1))] = -1
    return [x], {"shape": dims}


@_gen("broadcast_to", "any")
def _gen_broadcast_to(c: _Ctx):
    x = c.first()
    return [x], {"shape": list(c.over(x.shape))}


@_gen("slice", "any")
def _gen_slice(c: _Ctx):
    x = c.first()
    start, stop, step = [], [], []
    for n in x.shape:
        a = c.draw(st.integers(0, n - 1))
        s = c.side(1, 3)
        b = c.draw(st.integers(a + 1, n))
        start.append(a - n if c.coin(3) else a)
        if b == n:
            stop.append(b + c.draw(st.integers(0, 50)) if c.coin(5) else b)
        else:
            stop.append(b - n if c.coin(3) else b)
        step.append(s)
    attrs = {"start": start, "stop": stop}
    if any(s != 1 for s in step) or c.coin(3):
        attrs["step"] = step
    return [x], attrs


@_gen("concat", "any", min_rank=1)
def _gen_concat(c: _Ctx):
    x = c.first()
    axis = c.axis(x.rank)
    normal = axis % x.rank
    operands = [x]
    # up to CONCAT_READS operands make a structured concat (a select between padded reads); more, a copy
    for _ in range(c.draw(st.integers(0, 2)) if c.coin(8) else 4):
        fresh = x.shape[:normal] + (c.side(),) + x.shape[normal + 1:]
        operands.append(c.pick(
            lambda t: t.dtype is x.dtype and t.rank == x.rank
            and all(a == b for i, (a, b) in enumerate(zip(t.shape, x.shape)) if i != normal),
            lambda: TensorType(fresh, x.dtype)))
    if sum(t.numel for t in operands) > c.max_numel:
        operands = operands[:1]
    perm = c.draw(st.permutations(range(len(operands))))
    operands = [operands[i] for i in perm]
    attrs = {} if normal == 0 and c.coin(3) else {"axis": axis}
    if c.coin(3):  # a window of each operand (as canonicalize folds a slice into it)
        sizes = [c.draw(st.integers(1, t.shape[normal])) for t in operands]
        attrs["starts"] = [c.draw(st.integers(0, t.shape[normal] - size)) for t, size in zip(operands, sizes)]
        attrs["sizes"] = sizes
    return operands, attrs


@_gen("gather", "any", min_rank=1)
def _gen_gather(c: _Ctx):
    table = c.first()
    axis = c.axis(table.rank)
    idx_rank = c.draw(st.integers(0, min(2, c.max_rank - table.rank + 1)))
    idx_shape = tuple(c.side(1, 4) for _ in range(idx_rank))
    if table.numel // table.shape[axis] * math.prod(idx_shape) > c.max_numel:
        idx_shape = ()
    indices = TensorType(idx_shape, c.dtype("int"))
    return [table, indices], ({} if axis == 0 and c.coin(3) else {"axis": axis})


@_gen(("softmax", "log_softmax"), "float", min_rank=1)
def _gen_softmax(c: _Ctx):
    x = c.first()
    return [x], ({} if c.coin(3) else {"axis": c.axis(x.rank)})


def _eps(c: _Ctx, attrs: dict) -> dict:
    if c.coin(3):
        attrs["eps"] = c.draw(st.sampled_from([1e-5, 1e-3, 0.1, 1.0]))
    return attrs


def _norm(max_affine: int):
    def gen(c: _Ctx):
        x = c.first()
        count = c.draw(st.integers(1, x.rank))
        axes = list(range(x.rank - count, x.rank))
        if count == 1 and c.coin(3):
            attrs = {}
        elif count == 1 and c.coin(5):
            attrs = {"axes": -1 if c.coin(5) else x.rank - 1}
        else:
            attrs = {"axes": [a - x.rank if c.coin(5) else a for a in axes]}
        normalized = x.shape[x.rank - count:]
        affine = [TensorType(normalized, x.dtype) for _ in range(c.draw(st.integers(0, max_affine)))]
        return [x, *affine], _eps(c, attrs)
    return gen


_gen("layer_norm", "float", min_rank=1)(_norm(2))
_gen("rms_norm", "float", min_rank=1)(_norm(1))


@_gen("batch_norm", "float", min_rank=2)
def _gen_batch_norm(c: _Ctx):
    x = c.first()
    stat = TensorType((x.shape[1],), x.dtype)
    return [x, stat, stat] + [stat] * c.draw(st.integers(0, 2)), _eps(c, {})


@_gen("attention", "float", min_rank=2)
def _gen_attention(c: _Ctx):
    q = c.first()
    batch, length, depth = q.shape[:-2], q.shape[-2], q.shape[-1]
    source, depth_v = c.side(), c.side()
    k = TensorType(batch + (source, depth), q.dtype)
    v = TensorType(batch + (source, depth_v), q.dtype)
    operands = [q, k, v]
    attrs = {}
    mode = c.draw(st.integers(0, 3))
    scores = batch + (length, source)
    if mode == 1:
        operands.append(TensorType(c.under(scores), BOOL if c.has("bool") else q.dtype))
    elif mode == 2:
        operands.append(TensorType(c.under(scores), q.dtype))
    elif mode == 3:
        attrs["causal"] = True
    if c.coin(3):
        attrs["scale"] = c.draw(st.sampled_from([0.5, 1.0, 0.125]))
    return operands, attrs


# ----- operand domains: which values an operand may take -----------------------------------------
def operand_domains(op: str, types: Sequence[TensorType], attrs: dict) -> list[str]:
    """Per operand: "any", "positive" (>= 0.5), "nonzero" (|x| >= 0.5, or >= 1 for ints),
    "index:N" (integers in [-N, N)), "exponent" (integers in [0, 4)) or "mask" (bool, a True in
    every row of the last axis). `attrs` may be raw or normalized."""
    domains = ["any"] * len(types)
    if op in ("log", "sqrt", "rsqrt", "log2", "log1p"):
        domains[0] = "positive"
    elif op == "div":
        domains[1] = "nonzero"
    elif op == "pow":
        if types[0].dtype.is_float:
            domains[0] = "positive"
        else:
            domains[1] = "exponent"
    elif op == "gather":
        axis = attrs.get("axis", 0)
        domains[1] = f"index:{types[0].shape[axis]}"
    elif op == "batch_norm":
        domains[2] = "positive"
    elif op == "attention" and len(types) == 4 and types[3].dtype is BOOL:
        domains[3] = "mask"
    return domains


def _special(domain: str) -> bool:
    """Domains no guard op can establish: the operand must be a graph input (or a constant)."""
    return domain.startswith("index:") or domain in ("mask", "exponent")


def _combine(domains: Collection[str]) -> str:
    """The narrowest of several domains one input must satisfy at once."""
    indices = [int(d.split(":")[1]) for d in domains if d.startswith("index:")]
    if indices:
        n = min(indices)
        return f"index:{min(n, 4)}+" if "exponent" in domains else f"index:{n}"
    for d in ("exponent", "mask", "positive", "nonzero"):
        if d in domains:
            return d
    return "any"


def arrays_for(types: Sequence[TensorType], domains: Sequence[str], rng: np.random.Generator,
               style: str = "uniform") -> list[np.ndarray]:
    """Arrays for `types`, each in its domain. style "uniform" draws floats uniformly; "grid" draws
    them from a few exact values (zeros, ties, halves) that corner cases love."""
    return [_array(t, d, rng, style) for t, d in zip(types, domains)]


def _array(t: TensorType, domain: str, rng: np.random.Generator, style: str) -> np.ndarray:
    shape = t.shape
    if t.dtype is BOOL:
        out = rng.random(shape) < 0.5
        if domain == "mask":  # keep the first key of every row, so no softmax row is all -inf
            out = np.array(out)
            if out.ndim:
                out[..., 0] = True
            else:
                out = np.array(True)
        return np.asarray(out)
    if t.dtype.is_int:
        if domain.startswith("index:"):
            text = domain[len("index:"):]
            n = int(text.rstrip("+"))
            lo = 0 if text.endswith("+") else -n
            out = rng.integers(lo, n, size=shape)
        elif domain == "exponent":
            out = rng.integers(0, 4, size=shape)
        elif domain in ("positive", "nonzero"):
            out = rng.integers(1, INT_RANGE[1] + 1, size=shape)
            if domain == "nonzero":
                out = out * rng.choice([-1, 1], size=shape)
        else:
            out = rng.integers(INT_RANGE[0], INT_RANGE[1] + 1, size=shape)
        return np.asarray(out).astype(t.dtype.numpy)
    if style == "grid":
        values = {"positive": [0.5, 1.0, 1.5, 2.0], "nonzero": [-1.0, -0.5, 0.5, 1.0]}.get(
            domain, [-1.0, -0.5, 0.0, 0.5, 1.0])
        out = rng.choice(values, size=shape)
    elif domain == "positive":
        out = rng.uniform(0.5, 2.0, size=shape)
    elif domain == "nonzero":
        out = rng.uniform(0.5, 1.5, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    else:
        out = rng.uniform(*FLOAT_RANGE, size=shape)
    return to_dtype(np.asarray(out), t.dtype)


_SEEDS = st.integers(0, 2**32 - 1)
_STYLES = st.sampled_from(["uniform", "grid"])


def case_inputs(op: str, types: Sequence[TensorType], attrs: dict) -> st.SearchStrategy[list[np.ndarray]]:
    """Input arrays for one op applied to `types` (valid for the op's domain)."""
    domains = operand_domains(op, types, get_op(op).normalize_attrs(types, dict(attrs)))
    return st.builds(lambda seed, style: arrays_for(types, domains, np.random.default_rng(seed), style),
                     _SEEDS, _STYLES)


def input_domains(graph: Graph) -> list[str]:
    """The domain each graph input must respect, from how nodes use it directly."""
    result = []
    for value in graph.inputs:
        needs = []
        for user in value.users:
            domains = operand_domains(user.op, user.input_types, user.attrs)
            needs += [d for operand, d in zip(user.inputs, domains) if operand is value]
        result.append(_combine(needs))
    return result


def graph_inputs(graph: Graph) -> st.SearchStrategy[list[np.ndarray]]:
    """Input arrays (in graph-input order) valid for `graph`: floats in [-1, 1] (or a domain's range),
    ints in [-8, 8), gather indices in [-n, n), bool masks with a kept key per row."""
    types = [v.type for v in graph.inputs]
    domains = input_domains(graph)
    return st.builds(lambda seed, style: arrays_for(types, domains, np.random.default_rng(seed), style),
                     _SEEDS, _STYLES)


# ----- single-op cases --------------------------------------------------------------------------
@st.composite
def single_op_cases(draw, op_name: str, dtypes: Collection[DType] = ALL_DTYPES, max_numel: int = 216,
                    max_rank: int = MAX_RANK, max_side: int = MAX_SIDE):
    """`(input types, attrs)` for one application of `op_name`, valid by construction.

    attrs are written as a user would (negative axes, ints for pairs, defaults left out); pass them
    through `get_op(op).normalize_attrs` for the canonical form. Tensors hold at most max_numel
    elements, so the loop interpreter stays fast.
    """
    if op_name not in GENERATORS:
        raise ValueError(f"no generator for op {op_name!r}")
    ctx = _Ctx(draw, _dtypes_for(op_name, _ordered(dtypes)), max_rank=max_rank, max_side=max_side,
               max_numel=max_numel)
    ctx.op = op_name
    return GENERATORS[op_name](ctx)


def _dtypes_for(op: str, dtypes: list[DType]) -> list[DType]:
    if not any(KIND_TEST[OP_KIND[op]](d) for d in dtypes):
        raise ValueError(f"op {op} needs a {OP_KIND[op]} dtype, none in {dtypes}")
    return dtypes


def _possible(op: str, dtypes: list[DType]) -> bool:
    """Whether graphs over `dtypes` can contain `op` (its operands and result dtypes all allowed)."""
    has = {kind: any(KIND_TEST[kind](d) for d in dtypes) for kind in KIND_TEST}
    if not has[OP_KIND[op]]:
        return False
    if op in ("eq", "ne", "lt", "le", "gt", "ge", "where"):
        return has["bool"]
    if op == "gather":
        return has["int"]
    return True


# ----- value intervals ----------------------------------------------------------------------------
def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _hull(*ivs: Interval) -> Interval:
    return min(i[0] for i in ivs), max(i[1] for i in ivs)


def _mul(a: Interval, b: Interval) -> Interval:
    products = [x * y if not (math.isinf(x) or math.isinf(y)) or (x and y) else 0.0 for x in a for y in b]
    return min(products), max(products)


def _scale(n: float, a: Interval) -> Interval:
    return n * a[0], n * a[1]


def _monotone(fn, a: Interval) -> Interval:
    return fn(a[0]), fn(a[1])


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + _exp(-x))


_UNARY_IV: dict[str, Callable[[Interval], Interval]] = {
    "neg": lambda a: (-a[1], -a[0]),
    "abs": lambda a: (0.0 if a[0] <= 0 <= a[1] else min(abs(a[0]), abs(a[1])), max(abs(a[0]), abs(a[1]))),
    "exp": lambda a: _monotone(_exp, a),
    "log": lambda a: _monotone(math.log, a) if a[0] > 0 else (-math.inf, math.inf),
    "sqrt": lambda a: _monotone(math.sqrt, a) if a[0] >= 0 else (-math.inf, math.inf),
    "rsqrt": lambda a: (1 / math.sqrt(a[1]), 1 / math.sqrt(a[0])) if a[0] > 0 else (-math.inf, math.inf),
    "tanh": lambda a: _monotone(math.tanh, a),
    "erf": lambda a: _monotone(math.erf, a),
    "sigmoid": lambda a: _monotone(_sigmoid, a),
    "sin": lambda a: (-1.0, 1.0),
    "cos": lambda a: (-1.0, 1.0),
    "exp2": lambda a: _monotone(lambda v: _exp(v * math.log(2.0)), a),
    "log2": lambda a: _monotone(math.log2, a) if a[0] > 0 else (-math.inf, math.inf),
    "log1p": lambda a: _monotone(math.log1p, a) if a[0] > -1 else (-math.inf, math.inf),
    "expm1": lambda a: _monotone(lambda v: _exp(v) - 1.0, a),
    "relu": lambda a: (max(a[0], 0.0), max(a[1], 0.0)),
    "relu6": lambda a: (min(max(a[0], 0.0), 6.0), min(max(a[1], 0.0), 6.0)),
    "silu": lambda a: (-0.28, max(a[1], 0.0)),
    "gelu": lambda a: (-0.18, max(a[1], 0.0)),
}


def propagate_interval(op: str, ivs: Sequence[Interval], in_types: Sequence[TensorType], attrs: dict,
                       result: TensorType) -> Interval:
    """A range holding every element of `op`'s result when operand i lies in ivs[i] (attrs normalized)."""
    if result.dtype is BOOL:
        return 0.0, 1.0
    if op in _UNARY_IV:
        return _UNARY_IV[op](ivs[0])
    if op == "cast":
        if in_types[0].dtype.is_float and result.dtype.is_int:
            return float(math.trunc(ivs[0][0])), float(math.trunc(ivs[0][1]))
        return ivs[0]
    if op in ("add", "sub", "mul", "maximum", "minimum"):
        a, b = ivs
        return {"add": lambda: (a[0] + b[0], a[1] + b[1]), "sub": lambda: (a[0] - b[1], a[1] - b[0]),
                "mul": lambda: _mul(a, b), "maximum": lambda: (max(a[0], b[0]), max(a[1], b[1])),
                "minimum": lambda: (min(a[0], b[0]), min(a[1], b[1]))}[op]()
    if op == "div":
        a, b = ivs
        if b[0] > 0 or b[1] < 0:
            return _mul(a, (1 / b[1], 1 / b[0]))
        return -math.inf, math.inf
    if op == "pow":
        (blo, bhi), (elo, ehi) = ivs
        if result.dtype.is_float:
            if blo <= 0:
                return -math.inf, math.inf
            corners = [_exp(e * math.log(x)) for x in (blo, bhi) for e in (elo, ehi)]
            return min(corners), max(corners)
        if elo < 0:
            return -math.inf, math.inf
        bound = max(1.0, abs(blo), abs(bhi)) ** ehi if ehi < 64 else math.inf
        return -bound, bound
    if op == "where":
        return _hull(ivs[1], ivs[2])
    if op == "constant":
        return float(attrs["value"]), float(attrs["value"])
    if op == "iota":
        return 0.0, float(result.shape[attrs["axis"]] - 1)
    if op == "sum":
        count = math.prod(in_types[0].shape[a] for a in attrs["axes"])
        return _scale(count, ivs[0])
    if op in ("max", "min", "mean", "max_pool2d", "transpose", "reshape", "broadcast_to", "slice", "gather"):
        return ivs[0]
    if op == "concat":
        return _hull(*ivs)
    if op in ("matmul", "batch_matmul"):
        return _scale(in_types[0].shape[-1], _mul(ivs[0], ivs[1]))
    if op == "conv2d":
        padded = any(attrs["padding"]) or any(attrs.get("padding_end") or ())
        x = _hull(ivs[0], (0.0, 0.0)) if padded else ivs[0]
        return _scale(math.prod(in_types[1].shape[1:]), _mul(x, ivs[1]))
    if op == "avg_pool2d":
        return _hull(ivs[0], (0.0, 0.0)) if any(attrs["padding"]) else ivs[0]
    if op == "softmax":
        return 0.0, 1.0
    if op == "log_softmax":
        lo, hi = ivs[0]
        return lo - hi - math.log(in_types[0].shape[attrs["axis"]]), 0.0
    if op in ("layer_norm", "rms_norm"):
        count = math.prod(in_types[0].shape[a] for a in attrs["axes"])
        y = (-math.sqrt(count), math.sqrt(count))
        if len(ivs) > 1:
            y = _mul(y, ivs[1])
        if len(ivs) > 2:
            y = (y[0] + ivs[2][0], y[1] + ivs[2][1])
        return y
    if op == "batch_norm":
        x, mean, var, *affine = ivs
        if var[0] + attrs["eps"] <= 0:
            return -math.inf, math.inf
        inv = (1 / math.sqrt(var[1] + attrs["eps"]), 1 / math.sqrt(var[0] + attrs["eps"]))
        y = _mul((x[0] - mean[1], x[1] - mean[0]), inv)
        if affine:
            y = _mul(y, affine[0])
        if len(affine) > 1:
            y = (y[0] + affine[1][0], y[1] + affine[1][1])
        return y
    if op == "attention":
        return ivs[2]
    return -math.inf, math.inf


def _input_interval(t: TensorType, domain: str = "any") -> Interval:
    if t.dtype is BOOL:
        return 0.0, 1.0
    if t.dtype.is_int:
        if domain.startswith("index:"):
            n = int(domain[len("index:"):].rstrip("+"))
            return -float(n), float(n - 1)
        if domain == "exponent":
            return 0.0, 3.0
        return float(INT_RANGE[0]), float(INT_RANGE[1])
    if domain == "positive":
        return 0.5, 2.0
    if domain == "nonzero":
        return -1.5, 1.5
    return FLOAT_RANGE


def value_bounds(graph: Graph) -> dict[Value, Interval]:
    """An interval for every value of `graph`, for inputs from `graph_inputs` (or the standard ranges)
    and params from `reference.random_params` (or their carried data)."""
    bounds: dict[Value, Interval] = {}
    for value, domain in zip(graph.inputs, input_domains(graph)):
        bounds[value] = _input_interval(value.type, domain)
    for value in graph.params:
        if value.data is not None and value.data.size:
            data = np.asarray(value.data, dtype=np.float64)
            bounds[value] = float(data.min()), float(data.max())
        else:
            bounds[value] = _input_interval(value.type)
    for node in graph.nodes:
        for value in node.results:
            bounds[value] = propagate_interval(node.op, [bounds[v] for v in node.inputs], node.input_types,
                                               node.attrs, value.type)
    return bounds


# ----- random graphs -------------------------------------------------------------------------------
class _GraphState:
    def __init__(self, draw, ops: set[str], dtypes: list[DType], max_rank: int, max_side: int, max_numel: int):
        self.draw = draw
        self.ops = ops
        self.dtypes = dtypes
        self.b = GraphBuilder(draw(st.sampled_from(["main", "g", "model"])))
        self.pool: list[Value] = []
        self.bounds: dict[Value, Interval] = {}
        self.max_rank, self.max_side, self.max_numel = max_rank, max_side, max_numel
        self.counter = 0
        self.rng = np.random.default_rng(draw(st.integers(0, 2**16)))
        self.recent: list[Value] = []  # values the graph grows from: inputs drawn up front, op results
        self.anchor: Value | None = None

    def coin(self, out_of_ten: int) -> bool:
        return self.draw(st.integers(0, 9)) < out_of_ten

    def can(self, *ops: str) -> bool:
        return all(op in self.ops for op in ops)

    def fresh(self, t: TensorType, domain: str = "any") -> Value:
        """A new graph input, or (floats, sometimes) a parameter, maybe carrying its data."""
        self.counter += 1
        if t.dtype.is_float and domain == "any" and self.coin(3):
            data = None
            if self.coin(3):
                data = to_dtype(self.rng.uniform(*FLOAT_RANGE, size=t.shape), t.dtype)
            value = self.b.param(f"w{self.counter}", t, data)
            interval = (float(data.min()), float(data.max())) if data is not None and data.size else FLOAT_RANGE
        else:
            value = self.b.input(f"x{self.counter}", t)
            interval = _input_interval(t, domain)
        self.add(value, interval)
        return value

    def add(self, value: Value, interval: Interval) -> Value:
        self.pool.append(value)
        self.bounds[value] = interval
        return value

    def apply(self, op: str, operands: Sequence[Value], attrs: dict, name: str | None = None) -> Value:
        opdef = get_op(op)
        types = [v.type for v in operands]
        normal = opdef.normalize_attrs(types, dict(attrs))
        (result,) = opdef.infer(types, normal)
        interval = propagate_interval(op, [self.bounds[v] for v in operands], types, normal, result)
        value = self.b.op(op, *operands, name=name, **attrs)
        return self.add(value, interval)

    def constant(self, value, dtype: DType) -> Value:
        return self.apply("constant", [], {"value": value, "dtype": dtype})

    def resolve(self, t: TensorType, domain: str) -> Value:
        """A value of type t for an operand: the anchor, a pool value, a scalar constant or a fresh
        input/param. Operands that need inputs of a special domain get fresh inputs (or constants)."""
        if _special(domain):
            if domain == "exponent" and t.rank == 0 and self.can("constant") and self.coin(5):
                return self.constant(self.draw(st.integers(0, 3)), t.dtype)
            return self.fresh(t, domain)
        if self.anchor is not None and t == self.anchor.type:
            value, self.anchor = self.anchor, None
            return value
        candidates = [v for v in self.pool if v.type == t]
        if candidates and self.coin(8):
            return self.draw(st.sampled_from(candidates))
        if t.rank == 0 and self.can("constant") and self.coin(4):
            c = _Ctx(self.draw, self.dtypes)
            return self.constant(_value_of(c, t.dtype), t.dtype)
        return self.fresh(t)

    def needs_guard(self, value: Value, domain: str) -> bool:
        lo, hi = self.bounds[value]
        floor = 1.0 if value.dtype.is_int else 0.25
        if domain == "positive":
            return lo < floor
        if domain == "nonzero":
            return not (lo >= floor or hi <= -floor)
        return False

    def guarded_interval(self, value: Value, domain: str) -> Interval:
        """The interval `guard_domain(value, domain)` will have, without building anything."""
        if not self.needs_guard(value, domain):
            return self.bounds[value]
        if self.can("abs", "add", "constant"):
            lo, hi = self.bounds[value]
            shift = 1.0 if value.dtype.is_int else 0.5
            return shift, max(abs(lo), abs(hi)) + shift
        return _input_interval(value.type, domain)

    def guard_domain(self, value: Value, domain: str) -> Value:
        """Make `value` satisfy "positive"/"nonzero" by add(abs(x), c), or take a fresh input of that domain."""
        if not self.needs_guard(value, domain):
            return value
        if self.can("abs", "add", "constant"):
            shift = 1 if value.dtype.is_int else 0.5
            return self.apply("add", [self.apply("abs", [value], {}), self.constant(shift, value.dtype)], {})
        return self.fresh(value.type, domain)

    def tame(self, value: Value, domain: str) -> Value:
        """Bring a value back into [-1, 1] (tanh), or replace it by a fresh input."""
        lo, hi = self.bounds[value]
        if value.dtype is BOOL or max(abs(lo), abs(hi)) <= 1.0 or _special(domain):
            return value
        if value.dtype.is_float and self.can("tanh"):
            return self.apply("tanh", [value], {})
        if value.kind is ValueKind.INPUT and value.dtype.is_int and max(abs(lo), abs(hi)) <= 8:
            return value
        return self.fresh(value.type)

    def step(self, chosen: Sequence[str]) -> None:
        """Apply one op, usually to a recent value (so graphs grow chains and diamonds, not islands)."""
        self.anchor = None
        candidates = chosen
        if self.recent and self.coin(8):
            back = self.draw(st.integers(0, min(3, len(self.recent) - 1)))
            anchor = self.recent[-1 - back]
            fitting = [op for op in chosen if accepts_first(op, anchor.type)]
            if fitting:
                self.anchor, candidates = anchor, fitting
        op = self.draw(st.sampled_from(candidates))
        ctx = _Ctx(self.draw, self.dtypes, [v.type for v in self.pool], self.max_rank, self.max_side, self.max_numel)
        ctx.op = op
        ctx.anchor = self.anchor.type if self.anchor is not None else None
        types, attrs = GENERATORS[op](ctx)
        opdef = get_op(op)
        domains = operand_domains(op, types, opdef.normalize_attrs(types, dict(attrs)))
        operands = [self.resolve(t, d) for t, d in zip(types, domains)]
        normal = opdef.normalize_attrs(types, dict(attrs))
        (result,) = opdef.infer(types, normal)
        planned = [self.guarded_interval(v, d) for v, d in zip(operands, domains)]
        interval = propagate_interval(op, planned, types, normal, result)
        if not max(abs(interval[0]), abs(interval[1])) <= VALUE_LIMIT:
            operands = [self.tame(v, d) for v, d in zip(operands, domains)]
        operands = [self.guard_domain(v, d) for v, d in zip(operands, domains)]
        name = self.draw(st.sampled_from([None, None, None, "h", "y", "act"]))
        self.recent.append(self.apply(op, operands, attrs, name))
        self.anchor = None


@st.composite
def graphs(draw, max_nodes: int = 8, ops: Collection[str] | None = None, dtypes: Collection[DType] = DEFAULT_DTYPES,
           max_rank: int = MAX_RANK, max_side: int = MAX_SIDE, max_numel: int | None = None) -> Graph:
    """Random well-typed graphs that pass the verifier, over the whole op library (or `ops`).

    About max_nodes nodes: up to max_nodes ops are drawn, and the guards and scalar constants they
    need come on top, but drawing stops once the graph holds max_nodes nodes. Values reuse earlier
    ones (fan-out, diamonds) or come from fresh inputs and parameters (some carrying data); the outputs
    are every unused result plus a few others (an input or an intermediate), so there is no dead code.
    Every value's dtype is in `dtypes`; ops that cannot be typed with them are left out.
    """
    dtype_list = _ordered(dtypes)
    if not dtype_list:
        raise ValueError("graphs() needs at least one dtype")
    known = set(all_ops())
    wanted = set(known if ops is None else ops)
    unknown = wanted - set(GENERATORS)
    if unknown:
        raise ValueError(f"no generator for op(s) {sorted(unknown)}")
    chosen = sorted(op for op in wanted if _possible(op, dtype_list))
    if not chosen:
        raise ValueError(f"none of the ops {sorted(wanted)} can be typed with {dtype_list}")
    numel = max_numel if max_numel is not None else max_side ** max_rank
    state = _GraphState(draw, wanted, dtype_list, max_rank, max_side, numel)
    for _ in range(draw(st.integers(0, 2))):
        state.recent.append(state.fresh(TensorType(_draw_dims(draw, draw(st.integers(0, max_rank)), max_side, numel),
                                                   _draw_dtype(draw, dtype_list))))
    for _ in range(draw(st.integers(1, max(1, max_nodes)))):
        if len(state.b.graph) >= max_nodes:
            break
        state.step(chosen)
    graph = state.b.graph
    sinks = [v for node in graph.nodes for v in node.results if not v.users]
    extras = draw(st.lists(st.sampled_from(state.pool), max_size=2, unique=True)) if state.pool else []
    outputs = sinks + [v for v in extras if v not in sinks]
    order = draw(st.permutations(range(len(outputs))))
    graph.set_outputs([outputs[i] for i in order])
    verify(graph)
    return graph


# ----- multi-head attention with its head split and merge ---------------------------------------
@st.composite
def head_split_attention(draw, packed: bool | None = None) -> Graph:
    """Attention over heads as models write it: q, k, v (or one packed qkv tensor, sliced) of shape
    [batch, length, heads * depth] split into heads by reshape + transpose, and the output merged back
    (or left [batch, heads, length, depth]). The copies the attention template takes in with it. Unpacked, k
    and v may have fewer heads, each repeated for a group of q's (grouped-query attention, as transformers'
    repeat_kv writes it: reshape(broadcast_to(reshape(k)))), and a mask may come in ([batch, 1, L, S] bool or
    [heads, L, S] float)."""
    batch, heads = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    length, depth = draw(st.integers(1, 12)), draw(st.sampled_from([2, 4, 8]))
    packed = draw(st.booleans()) if packed is None else packed
    keys = length if packed or draw(st.booleans()) else draw(st.integers(1, 12))
    repeats = 1 if packed else draw(st.sampled_from([1, 2, 3]))
    width = heads * depth
    b = GraphBuilder("mha")
    if packed:
        qkv = b.input("qkv", [batch, length, 3 * width])
        q, k, v = (b.slice(qkv, start=[0, 0, i * width], stop=[batch, length, (i + 1) * width]) for i in range(3))
    else:
        q = b.input("q", [batch, length, width * repeats])
        k, v = b.input("k", [batch, keys, width]), b.input("v", [batch, keys, width])

    def split(x: Value) -> Value:
        parts = x.type.shape[2] // depth
        return b.transpose(b.reshape(x, shape=[batch, x.type.shape[1], parts, depth]), perm=[0, 2, 1, 3])

    def repeat(x: Value) -> Value:
        if repeats == 1:
            return x
        wide = b.broadcast_to(b.reshape(x, shape=[batch, heads, 1, keys, depth]),
                              shape=[batch, heads, repeats, keys, depth])
        return b.reshape(wide, shape=[batch, heads * repeats, keys, depth])

    causal = keys == length and draw(st.booleans())
    kind = "none" if causal or packed else draw(st.sampled_from(["none", "bool", "float"]))
    mask = [] if kind == "none" else [b.input("keep", [batch, 1, length, keys], dtype="bool") if kind == "bool"
                                      else b.input("bias", [heads * repeats, length, keys])]
    o = b.attention(split(q), repeat(split(k)), repeat(split(v)), *mask, causal=causal)
    if draw(st.booleans()):
        o = b.reshape(b.transpose(o, perm=[0, 2, 1, 3]), shape=[batch, length, width * repeats])
    return b.output(o)
