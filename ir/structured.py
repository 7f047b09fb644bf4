"""The structured-op description (the linalg.generic idea): a loop nest, affine operand maps, a scalar body.

A structured op is fully described by an `IterationSpace`: loop extents, each loop parallel or
reduction, one `AffineMap` per operand and result (loop indices -> tensor indices), and one scalar
expression per result. Fusion, tiling, footprint analysis, code generation and the loop interpreter
below are written once over this description instead of once per op.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np

from .types import DType, to_dtype

PARALLEL = "parallel"
REDUCTION = "reduction"


# ----- affine index expressions -------------------------------------------------------------
@dataclass(frozen=True)
class AffineExpr:
    """sum(coeff * d[dim]) + const over the loop indices d."""

    terms: tuple[tuple[int, int], ...] = ()  # (loop dim, coefficient), dims ascending, no zeros
    const: int = 0

    @staticmethod
    def dim(d: int, coeff: int = 1) -> AffineExpr:
        return AffineExpr(((d, coeff),) if coeff else ())

    @staticmethod
    def constant(c: int) -> AffineExpr:
        return AffineExpr((), c)

    def __add__(self, other: AffineExpr | int) -> AffineExpr:
        if isinstance(other, int):
            return AffineExpr(self.terms, self.const + other)
        merged: dict[int, int] = dict(self.terms)
        for d, c in other.terms:
            merged[d] = merged.get(d, 0) + c
        return AffineExpr(tuple(sorted((d, c) for d, c in merged.items() if c)), self.const + other.const)

    def __mul__(self, k: int) -> AffineExpr:
        return AffineExpr(tuple((d, c * k) for d, c in self.terms if c * k), self.const * k)

    def evaluate(self, index: Sequence[int] | np.ndarray):
        total = self.const
        for d, c in self.terms:
            total = total + c * index[d]
        return total

    def range(self, extents: Sequence[int]) -> tuple[int, int]:
        """Smallest and largest value over the loop domain (inclusive)."""
        lo = hi = self.const
        for d, c in self.terms:
            span = c * (extents[d] - 1)
            lo, hi = lo + min(0, span), hi + max(0, span)
        return lo, hi

    def __str__(self) -> str:
        parts = []
        for d, c in self.terms:
            parts.append(f"d{d}" if c == 1 else f"{c}*d{d}")
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")


@dataclass(frozen=True)
class AffineMap:
    """Loop indices -> tensor indices. Reads outside the tensor give `pad` (None: must stay in bounds)."""

    exprs: tuple[AffineExpr, ...]
    pad: float | None = None

    @staticmethod
    def identity(rank: int, dims: Sequence[int] | None = None) -> AffineMap:
        dims = range(rank) if dims is None else dims
        return AffineMap(tuple(AffineExpr.dim(d) for d in dims))

    def apply(self, index: Sequence[int]) -> tuple[int, ...]:
        return tuple(e.evaluate(index) for e in self.exprs)

    def __str__(self) -> str:
        body = f"[{', '.join(map(str, self.exprs))}]"
        return body if self.pad is None else f"{body} pad {self.pad}"


# ----- scalar bodies -------------------------------------------------------------------------
@dataclass(frozen=True)
class Arg:
    """The element of input operand `index` at the current loop point."""

    index: int


@dataclass(frozen=True)
class Acc:
    """The running value of the result being reduced into."""


@dataclass(frozen=True)
class Index:
    """The current value of loop index `dim` (linalg.index): lets iota and masks stay structured."""

    dim: int


@dataclass(frozen=True)
class Const:
    value: float


@dataclass(frozen=True)
class Call:
    fn: str
    args: tuple[ScalarExpr, ...]


@dataclass(frozen=True)
class Cast:
    arg: ScalarExpr
    dtype: DType


ScalarExpr = Union[Arg, Acc, Index, Const, Call, Cast]


def _erf(x):
    from scipy import special  # here, not at import: scipy.special costs 0.2 s to import

    return special.erf(x).astype(np.result_type(x), copy=False) if isinstance(x, np.ndarray) else special.erf(x)


# The scalar functions a body may call: name -> (arity, numpy implementation). Backends translate
# exactly this set; adding a function here means teaching every backend its spelling.
SCALAR_FUNCTIONS: dict[str, tuple[int, object]] = {
    "add": (2, np.add),
    "sub": (2, np.subtract),
    "mul": (2, np.multiply),
    "div": (2, np.divide),
    "pow": (2, np.power),
    "max": (2, np.maximum),
    "min": (2, np.minimum),
    "neg": (1, np.negative),
    "abs": (1, np.abs),
    "exp": (1, np.exp),
    "log": (1, np.log),
    "sqrt": (1, np.sqrt),
    "rsqrt": (1, lambda x: np.reciprocal(np.sqrt(x))),
    "tanh": (1, np.tanh),
    "erf": (1, _erf),
    "sigmoid": (1, lambda x: np.reciprocal(np.add(np.exp(np.negative(x)), np.ones_like(x)))),
    "sin": (1, np.sin),
    "cos": (1, np.cos),
    "exp2": (1, np.exp2),
    "log2": (1, np.log2),
    "log1p": (1, np.log1p),
    "expm1": (1, np.expm1),
    "eq": (2, np.equal),
    "ne": (2, np.not_equal),
    "lt": (2, np.less),
    "le": (2, np.less_equal),
    "gt": (2, np.greater),
    "ge": (2, np.greater_equal),
    "select": (3, np.where),
}

ARITHMETIC = frozenset(SCALAR_FUNCTIONS) - {"select"}


def call(fn: str, *args: ScalarExpr | float) -> Call:
    """Build a Call, wrapping plain numbers as Const and checking the arity."""
    arity, _ = SCALAR_FUNCTIONS[fn]
    if len(args) != arity:
        raise ValueError(f"scalar function {fn} takes {arity} arguments, got {len(args)}")
    return Call(fn, tuple(a if isinstance(a, (Arg, Acc, Index, Const, Call, Cast)) else Const(float(a)) for a in args))


def evaluate_scalar(expr: ScalarExpr, args: Sequence, acc=None, dtype: DType = DType.f32, point=()):
    """Evaluate a body on numpy scalars or arrays (arrays broadcast), computing in `dtype`.

    `point` holds the loop indices (scalars, or index arrays when evaluating a whole domain).
    """
    if isinstance(expr, Arg):
        return args[expr.index]
    if isinstance(expr, Index):
        return point[expr.dim]
    if isinstance(expr, Acc):
        return acc
    if isinstance(expr, Const):
        return dtype.numpy.type(expr.value) if dtype.is_float else expr.value
    if isinstance(expr, Cast):
        return to_dtype(np.asarray(evaluate_scalar(expr.arg, args, acc, dtype, point)), expr.dtype)
    _, fn = SCALAR_FUNCTIONS[expr.fn]
    values = [evaluate_scalar(a, args, acc, dtype, point) for a in expr.args]
    with np.errstate(all="ignore"):
        return fn(*values)


def count_flops(expr: ScalarExpr) -> int:
    """Arithmetic operations in one evaluation of a body (loads, casts and selects are free)."""
    if isinstance(expr, Call):
        return (expr.fn in ARITHMETIC) + sum(count_flops(a) for a in expr.args)
    if isinstance(expr, Cast):
        return count_flops(expr.arg)
    return 0


def format_scalar(expr: ScalarExpr) -> str:
    if isinstance(expr, Arg):
        return f"in{expr.index}"
    if isinstance(expr, Acc):
        return "acc"
    if isinstance(expr, Index):
        return f"d{expr.dim}"
    if isinstance(expr, Const):
        return repr(expr.value)
    if isinstance(expr, Cast):
        return f"cast<{expr.dtype}>({format_scalar(expr.arg)})"
    return f"{expr.fn}({', '.join(format_scalar(a) for a in expr.args)})"


# ----- the iteration space -------------------------------------------------------------------
@dataclass(frozen=True)
class IterationSpace:
    """A loop nest with affine operand/result maps and one scalar body per result.

    For a result with an `init` value the body is a reduction update reading `Acc()`; the result
    starts at `init` and every point of the reduction loops updates it once.
    """

    extents: tuple[int, ...]
    kinds: tuple[str, ...]
    inputs: tuple[AffineMap, ...]
    outputs: tuple[AffineMap, ...]
    body: tuple[ScalarExpr, ...]
    init: tuple[float | None, ...]

    def __post_init__(self) -> None:
        if len(self.extents) != len(self.kinds):
            raise ValueError("one kind per loop")
        if not len(self.outputs) == len(self.body) == len(self.init):
            raise ValueError("one map, body and init per result")
        for kind in self.kinds:
            if kind not in (PARALLEL, REDUCTION):
                raise ValueError(f"unknown loop kind {kind}")

    @property
    def rank(self) -> int:
        return len(self.extents)

    @property
    def points(self) -> int:
        return math.prod(self.extents)

    @property
    def parallel_dims(self) -> tuple[int, ...]:
        return tuple(d for d, k in enumerate(self.kinds) if k == PARALLEL)

    @property
    def reduction_dims(self) -> tuple[int, ...]:
        return tuple(d for d, k in enumerate(self.kinds) if k == REDUCTION)

    def flops(self) -> int:
        return self.points * sum(count_flops(b) for b in self.body)

    def __str__(self) -> str:
        loops = ", ".join(f"d{d}<{e}{'' if k == PARALLEL else ' red'}>" for d, (e, k)
                          in enumerate(zip(self.extents, self.kinds)))
        lines = [f"loops {loops}"]
        lines += [f"  in{i} {m}" for i, m in enumerate(self.inputs)]
        for i, (m, b, init) in enumerate(zip(self.outputs, self.body, self.init)):
            start = "" if init is None else f" init {init!r}"
            lines.append(f"  out{i} {m} = {format_scalar(b)}{start}")
        return "\n".join(lines)


def run_loops(space: IterationSpace, inputs: Sequence[np.ndarray], out_shapes: Sequence[tuple[int, ...]],
              out_dtypes: Sequence[DType]) -> list[np.ndarray]:
    """Execute an iteration space point by point: the slow, obviously-correct interpreter.

    This is the oracle that checks the op library's maps against its numpy references; every
    code generator trusts these maps, so the interpreter is kept as literal as possible.
    """
    outs = []
    for shape, dtype, init in zip(out_shapes, out_dtypes, space.init):
        out = np.zeros(shape, dtype=dtype.numpy)
        if init is not None:
            out[...] = _init_value(init, dtype)
        outs.append(out)
    for point in itertools.product(*(range(e) for e in space.extents)):
        args = []
        for array, amap in zip(inputs, space.inputs):
            index = amap.apply(point)
            inside = all(0 <= i < s for i, s in zip(index, array.shape))
            if inside:
                args.append(array[index])
            elif amap.pad is None:
                raise IndexError(f"map {amap} reads {index} outside shape {array.shape} at loop point {point}")
            else:
                args.append(array.dtype.type(_pad_value(amap.pad, array.dtype)))
        for out, amap, body, init, dtype in zip(outs, space.outputs, space.body, space.init, out_dtypes):
            index = amap.apply(point)
            acc = out[index] if init is not None else None
            out[index] = evaluate_scalar(body, args, acc, dtype, point)
    return [to_dtype(o, d) for o, d in zip(outs, out_dtypes)]


def _pad_value(pad: float, dtype: np.dtype):
    """An infinite pad in an integer or bool tensor reads as that type's extreme (as `init` does)."""
    if math.isinf(pad) and np.dtype(dtype).kind in "iub":
        return _init_value(pad, DType.from_numpy(dtype))
    return pad


def _init_value(init: float, dtype: DType):
    if dtype.is_int and math.isinf(init):
        info = np.iinfo(dtype.numpy)
        return info.min if init < 0 else info.max
    if dtype is DType.bool and math.isinf(init):
        return init > 0
    return init
