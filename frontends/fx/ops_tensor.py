"""Converters for tensor math and layout: torch functions, Tensor methods, `operator`, and their ATen ops.

Each converter takes the torch signature (`x` for `input`/`self`) and returns IR values. Shapes
that torch derives (view with -1, expand, chunk sizes) are read from `cx.expected`, the node's
result on the example inputs, so the IR is exactly what torch computed.
"""
from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from tilegraph.ir import DType, Value, ValueKind

from .context import ConvertContext, Missing, Unsupported, ir_dtype, torch_dtype
from .registry import converts, optional

aten = torch.ops.aten


def A(name: str):
    """An ATen overload packet, or None where this torch version lacks it."""
    return optional(aten, name)


def varargs(args: Sequence[Any]) -> tuple:
    """`x.permute(0, 2, 1)` and `x.permute((0, 2, 1))` alike."""
    if len(args) == 1 and isinstance(args[0], (list, tuple, torch.Size)):
        return tuple(args[0])
    return tuple(args)


def dims_arg(dim: Any, rank: int) -> tuple[int, ...] | None:
    """A torch `dim` argument (None, int or sequence) as a tuple of axes, None for all."""
    if dim is None:
        return None
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if not dims:
        return None
    return tuple(d % rank for d in dims) if rank else ()


def result_dtype(*operands: Any) -> DType:
    """torch's type promotion for the operands (IR Values and Python numbers)."""
    def stand_in(x):
        if isinstance(x, Value):
            return torch.zeros(() if x.type.rank == 0 else (1,), dtype=torch_dtype(x.dtype))
        return x

    items = [stand_in(x) for x in operands if not isinstance(x, Missing)]
    if not any(isinstance(x, torch.Tensor) for x in items):
        raise Unsupported("no tensor operand")
    dtype = None
    current = items[0]
    for other in items[1:]:
        dtype = torch.result_type(current, other)
        current = torch.zeros((1,), dtype=dtype)
    return ir_dtype(dtype if dtype is not None else current.dtype)


# ----- elementwise arithmetic ---------------------------------------------------------------------
def _binary(cx: ConvertContext, op: str, a: Any, b: Any, dtype: DType | None = None) -> Value:
    dtype = dtype or cx.out_dtype
    return cx.b.op(op, cx.value(a, dtype), cx.value(b, dtype))


def _scaled(cx: ConvertContext, y: Any, alpha: Any) -> Any:
    if alpha is None or alpha == 1:
        return y
    if isinstance(y, Value):
        return cx.b.mul(cx.value(y, cx.out_dtype), cx.value(alpha, cx.out_dtype))
    return y * alpha


@converts(torch.add, operator.add, operator.iadd, "add", "add_", "__add__", "__radd__", "__iadd__", A("add"))
def add(cx, x, other, *, alpha=1, out=None):
    return _binary(cx, "add", x, _scaled(cx, other, alpha))


@converts(torch.sub, torch.subtract, operator.sub, operator.isub, "sub", "sub_", "subtract", "__sub__",
          "__isub__", A("sub"))
def sub(cx, x, other, *, alpha=1, out=None):
    return _binary(cx, "sub", x, _scaled(cx, other, alpha))


@converts(torch.rsub, "__rsub__", A("rsub"))
def rsub(cx, x, other, *, alpha=1):
    return _binary(cx, "sub", other, _scaled(cx, x, alpha))


@converts(torch.mul, torch.multiply, operator.mul, operator.imul, "mul", "mul_", "multiply", "__mul__",
          "__rmul__", "__imul__", A("mul"))
def mul(cx, x, other, *, out=None):
    return _binary(cx, "mul", x, other)


@converts(torch.div, torch.divide, torch.true_divide, operator.truediv, operator.itruediv, "div", "div_",
          "divide", "true_divide", "__truediv__", "__itruediv__", A("div"))
def div(cx, x, other, *, rounding_mode=None, out=None):
    if rounding_mode == "trunc":
        return _divide(cx, x, other, "trunc")
    if rounding_mode == "floor":
        return _divide(cx, x, other, "floor")
    if rounding_mode is not None:
        raise Unsupported(f"division with rounding_mode={rounding_mode!r}")
    return _binary(cx, "div", x, other)


# ----- rounding, floor division, remainders ----------------------------------------------------------
# The IR has no rounding function: a float rounds through an i64 cast where |x| < 2**22 (every f32,
# f16 and bf16 beyond that is an integer already); integer division truncates (the IR's `div` of
# integers stored as an integer), and floor division corrects the truncated quotient. A float
# remainder is x - q * y, exact while the quotient q stays below 2**22 (torch's fmod is exact beyond).
EXACT = 2.0 ** 22


def trunc_value(cx, x: Value) -> Value:
    if not x.dtype.is_float:
        return x
    small = cx.b.lt(cx.b.abs(x), cx.value(EXACT, x.dtype))
    safe = cx.b.where(small, x, cx.value(0.0, x.dtype))  # no out-of-range (or NaN) float -> int casts
    return cx.b.where(small, cx.cast(cx.cast(safe, DType.i64), x.dtype), x)


def floor_value(cx, x: Value) -> Value:
    t = trunc_value(cx, x)
    return t if not x.dtype.is_float else cx.b.sub(t, cx.cast(cx.b.gt(t, x), x.dtype))


def ceil_value(cx, x: Value) -> Value:
    t = trunc_value(cx, x)
    return t if not x.dtype.is_float else cx.b.add(t, cx.cast(cx.b.lt(t, x), x.dtype))


def _divide(cx, x, other, mode: str) -> Value:
    """x / other rounded toward zero ("trunc") or down ("floor")."""
    dtype = cx.out_dtype
    a, b = cx.value(x, dtype), cx.value(other, dtype)
    if dtype.is_float:
        q = cx.b.div(a, b)
        return trunc_value(cx, q) if mode == "trunc" else floor_value(cx, q)
    q = cx.b.div(a, b)  # integer division truncates
    if mode == "trunc":
        return q
    return cx.b.sub(q, cx.cast(_sign_differs(cx, cx.b.sub(a, cx.b.mul(q, b)), b), dtype))


def _sign_differs(cx, r: Value, b: Value) -> Value:
    """A nonzero remainder whose sign is not the divisor's (where floor and trunc differ)."""
    zero = cx.value(0, r.dtype)
    return logical_and(cx, cx.b.ne(r, zero), cx.b.ne(cx.b.lt(r, zero), cx.b.lt(b, zero)))


def _remainder(cx, x, other, python: bool) -> Value:
    """x - other * q: q floored (torch.remainder, `%`: the divisor's sign) or truncated (torch.fmod)."""
    dtype = cx.out_dtype
    a, b = cx.value(x, dtype), cx.value(other, dtype)
    if dtype.is_float:
        q = cx.b.div(a, b)
        q = floor_value(cx, q) if python else trunc_value(cx, q)
        return cx.b.sub(a, cx.b.mul(q, b))
    r = cx.b.sub(a, cx.b.mul(cx.b.div(a, b), b))
    return cx.b.where(_sign_differs(cx, r, b), cx.b.add(r, b), r) if python else r


@converts(torch.floor_divide, operator.floordiv, operator.ifloordiv, "floor_divide", "__floordiv__",
          "__ifloordiv__", A("floor_divide"))
def floor_divide(cx, x, other):
    return _divide(cx, x, other, "floor")


@converts("__rfloordiv__")
def rfloor_divide(cx, x, other):
    return _divide(cx, other, x, "floor")


@converts(torch.remainder, operator.mod, operator.imod, "remainder", "__mod__", "__imod__", A("remainder"))
def remainder(cx, x, other):
    return _remainder(cx, x, other, python=True)


@converts("__rmod__")
def rremainder(cx, x, other):
    return _remainder(cx, other, x, python=True)


@converts(torch.fmod, "fmod", A("fmod"))
def fmod(cx, x, other):
    return _remainder(cx, x, other, python=False)


@converts(torch.trunc, torch.fix, "trunc", "fix", A("trunc"), A("fix"))
def trunc(cx, x):
    return trunc_value(cx, cx.value(x, cx.out_dtype))


@converts(torch.floor, "floor", A("floor"))
def floor(cx, x):
    return floor_value(cx, cx.value(x, cx.out_dtype))


@converts(torch.ceil, "ceil", A("ceil"))
def ceil(cx, x):
    return ceil_value(cx, cx.value(x, cx.out_dtype))


@converts("__rtruediv__")
def rdiv(cx, x, other):
    return _binary(cx, "div", other, x)


@converts(torch.reciprocal, "reciprocal", A("reciprocal"))
def reciprocal(cx, x):
    return _binary(cx, "div", 1.0, x)


@converts(torch.pow, operator.pow, "pow", "__pow__", A("pow"))
def pow_(cx, x, exponent):
    if isinstance(exponent, (int, float)) and exponent == 2 and isinstance(x, Value):
        x = cx.value(x, cx.out_dtype)
        return cx.b.mul(x, x)
    return _binary(cx, "pow", x, exponent)


@converts("__rpow__")
def rpow(cx, x, other):
    return _binary(cx, "pow", other, x)


@converts(torch.square, "square", A("square"))
def square(cx, x):
    x = cx.value(x, cx.out_dtype)
    return cx.b.mul(x, x)


@converts(torch.maximum, torch.fmax, "maximum", A("maximum"))
def maximum(cx, x, other):
    return _binary(cx, "maximum", x, other)


@converts(torch.minimum, torch.fmin, "minimum", A("minimum"))
def minimum(cx, x, other):
    return _binary(cx, "minimum", x, other)


def _unary(op: str, *targets) -> None:
    def convert(cx, x, *args, **kwargs):
        if kwargs.get("out") is not None:
            raise Unsupported("out= arguments")
        return cx.b.op(op, cx.value(x, cx.out_dtype))

    convert.__name__ = op
    converts(*targets)(convert)


_unary("neg", torch.neg, torch.negative, operator.neg, "neg", "negative", "__neg__", A("neg"))
_unary("abs", torch.abs, operator.abs, "abs", "__abs__", A("abs"))
_unary("exp", torch.exp, "exp", A("exp"))
_unary("log", torch.log, "log", A("log"))
_unary("sqrt", torch.sqrt, "sqrt", A("sqrt"))
_unary("rsqrt", torch.rsqrt, "rsqrt", A("rsqrt"))
_unary("tanh", torch.tanh, torch.nn.functional.tanh, "tanh", A("tanh"))
_unary("sigmoid", torch.sigmoid, torch.nn.functional.sigmoid, "sigmoid", A("sigmoid"))
_unary("erf", torch.erf, torch.special.erf, "erf", A("erf"))
_unary("sin", torch.sin, "sin", A("sin"))
_unary("cos", torch.cos, "cos", A("cos"))
_unary("exp2", torch.exp2, torch.special.exp2, "exp2", A("exp2"))
_unary("log2", torch.log2, "log2", A("log2"))
_unary("log1p", torch.log1p, torch.special.log1p, "log1p", A("log1p"))
_unary("expm1", torch.expm1, torch.special.expm1, "expm1", A("expm1"))


@converts(torch.tan, "tan", A("tan"))
def tan(cx, x):
    x = cx.value(x, cx.out_dtype)
    return cx.b.div(cx.b.sin(x), cx.b.cos(x))


@converts(torch.log10, "log10", A("log10"))
def log10(cx, x):
    x = cx.value(x, cx.out_dtype)
    return cx.b.mul(cx.b.log(x), cx.value(1 / math.log(10), x.dtype))


def _exp_pair(cx, x, sign: float) -> Value:
    """(e**x + sign * e**-x) / 2: cosh (sign 1) and sinh (sign -1, by expm1 so small x stay exact)."""
    x = cx.value(x, cx.out_dtype)
    half = cx.value(0.5, x.dtype)
    if sign > 0:
        return cx.b.mul(cx.b.add(cx.b.exp(x), cx.b.exp(cx.b.neg(x))), half)
    return cx.b.mul(cx.b.sub(cx.b.expm1(x), cx.b.expm1(cx.b.neg(x))), half)


@converts(torch.sinh, "sinh", A("sinh"))
def sinh(cx, x):
    return _exp_pair(cx, x, -1.0)


@converts(torch.cosh, "cosh", A("cosh"))
def cosh(cx, x):
    return _exp_pair(cx, x, 1.0)


@converts(torch.sign, torch.sgn, "sign", "sgn", A("sign"), A("sgn"))
def sign(cx, x):
    x = cx.value(x, cx.out_dtype)
    if x.dtype is DType.bool:
        return x
    zero = cx.value(0, x.dtype)
    positive, negative = cx.cast(cx.b.gt(x, zero), x.dtype), cx.cast(cx.b.lt(x, zero), x.dtype)
    return cx.b.sub(positive, negative)


@converts(torch.clamp, torch.clip, "clamp", "clip", A("clamp"), A("clip"))
def clamp(cx, x, min=None, max=None):
    y = cx.value(x, cx.out_dtype)
    if min is not None:
        y = cx.b.maximum(y, cx.value(min, cx.out_dtype))
    if max is not None:
        y = cx.b.minimum(y, cx.value(max, cx.out_dtype))
    return y


@converts(torch.clamp_min, "clamp_min", A("clamp_min"))
def clamp_min(cx, x, min):
    return clamp(cx, x, min=min)


@converts(torch.clamp_max, "clamp_max", A("clamp_max"))
def clamp_max(cx, x, max):
    return clamp(cx, x, max=max)


# ----- comparisons and logic -----------------------------------------------------------------------
def _compare(op: str, *targets) -> None:
    def convert(cx, x, other, *, out=None):
        return _binary(cx, op, x, other, dtype=result_dtype(x, other))

    convert.__name__ = op
    converts(*targets)(convert)


_compare("eq", torch.eq, operator.eq, "eq", "__eq__", A("eq"))
_compare("ne", torch.ne, torch.not_equal, operator.ne, "ne", "__ne__", A("ne"))
_compare("lt", torch.lt, torch.less, operator.lt, "lt", "__lt__", A("lt"))
_compare("le", torch.le, torch.less_equal, operator.le, "le", "__le__", A("le"))
_compare("gt", torch.gt, torch.greater, operator.gt, "gt", "__gt__", A("gt"))
_compare("ge", torch.ge, torch.greater_equal, operator.ge, "ge", "__ge__", A("ge"))


def _boolean(cx, x) -> Value:
    value = cx.value(x, None if isinstance(x, Value) else DType.bool)
    if value.dtype is not DType.bool:
        raise Unsupported(f"logical/bitwise op on a {value.dtype} tensor (only bool is supported)")
    return value


@converts(torch.logical_and, torch.bitwise_and, operator.and_, operator.iand, "logical_and", "bitwise_and",
          "__and__", "__iand__", A("logical_and"), A("bitwise_and"), A("__and__"))
def logical_and(cx, x, other):
    return cx.b.where(_boolean(cx, x), _boolean(cx, other), cx.value(False, DType.bool))


@converts(torch.logical_or, torch.bitwise_or, operator.or_, operator.ior, "logical_or", "bitwise_or",
          "__or__", "__ior__", A("logical_or"), A("bitwise_or"), A("__or__"))
def logical_or(cx, x, other):
    return cx.b.where(_boolean(cx, x), cx.value(True, DType.bool), _boolean(cx, other))


@converts(torch.logical_not, torch.bitwise_not, operator.invert, "logical_not", "bitwise_not", "__invert__",
          A("logical_not"), A("bitwise_not"))
def logical_not(cx, x):
    return cx.b.eq(_boolean(cx, x), cx.value(False, DType.bool))


@converts(torch.where, "where", A("where"))
def where(cx, condition, x=None, other=None):
    if cx.node.op == "call_method":  # x.where(condition, other)
        condition, x, other = x, condition, other
    if x is None:
        raise Unsupported("torch.where(condition) (nonzero: a data-dependent shape)")
    dtype = cx.out_dtype
    return cx.b.where(_boolean(cx, condition), cx.value(x, dtype), cx.value(other, dtype))


@converts(torch.masked_fill, "masked_fill", "masked_fill_", A("masked_fill"))
def masked_fill(cx, x, mask, value):
    dtype = cx.out_dtype
    return cx.b.where(_boolean(cx, mask), cx.value(value, dtype), cx.value(x, dtype))


def _triangle(cx, x, diagonal, lower: bool) -> Value:
    x = cx.value(x)
    if x.type.rank < 2:
        raise Unsupported("tril/triu of a tensor with fewer than 2 dims")
    grid = x.shape[-2:]
    rows = cx.b.iota(shape=grid, axis=0, dtype=DType.i64)
    cols = cx.b.iota(shape=grid, axis=1, dtype=DType.i64)
    offset = cx.b.sub(cols, rows)
    keep = cx.b.le(offset, cx.value(diagonal, DType.i64)) if lower else cx.b.ge(offset, cx.value(diagonal, DType.i64))
    return cx.b.where(keep, x, cx.value(0, x.dtype))


@converts(torch.tril, "tril", A("tril"))
def tril(cx, x, diagonal=0):
    return _triangle(cx, x, diagonal, lower=True)


@converts(torch.triu, "triu", A("triu"))
def triu(cx, x, diagonal=0):
    return _triangle(cx, x, diagonal, lower=False)


# ----- dtype conversions ----------------------------------------------------------------------------
@converts("to", "type", "type_as", "float", "half", "bfloat16", "int", "long", "bool", A("to"), A("_to_copy"),
          A("type_as"))
def to(cx, x, *args, **kwargs):
    if kwargs.get("memory_format") not in (None, torch.contiguous_format, torch.preserve_format):
        raise Unsupported(f"memory_format={kwargs['memory_format']}")
    return cx.cast(cx.value(x), cx.out_dtype)


# ----- reductions -----------------------------------------------------------------------------------
def _reduce(cx, op: str, x, dim=None, keepdim=False) -> Value:
    x = cx.value(x, cx.out_dtype)
    if x.type.rank == 0:
        return x
    return cx.b.op(op, x, axes=dims_arg(dim, x.type.rank), keepdims=bool(keepdim))


@converts(torch.sum, "sum", A("sum"))
def sum_(cx, x, dim=None, keepdim=False, *, dtype=None):
    return _reduce(cx, "sum", x, dim, keepdim)


@converts(torch.mean, "mean", A("mean"))
def mean(cx, x, dim=None, keepdim=False, *, dtype=None):
    return _reduce(cx, "mean", x, dim, keepdim)


@converts(torch.amax, "amax", A("amax"))
def amax(cx, x, dim=(), keepdim=False):
    return _reduce(cx, "max", x, dim, keepdim)


@converts(torch.amin, "amin", A("amin"))
def amin(cx, x, dim=(), keepdim=False):
    return _reduce(cx, "min", x, dim, keepdim)


def _truth(cx, reduce: str, x, dim=None, keepdim=False) -> Value:
    """any/all: the max/min of the elements' truth values (as i32; the IR reduces numbers)."""
    x = cx.value(x)
    truth = x if x.dtype is DType.bool else cx.b.ne(x, cx.value(0, x.dtype))
    if x.type.rank == 0:
        return truth
    reduced = cx.b.op(reduce, cx.cast(truth, DType.i32), axes=dims_arg(dim, x.type.rank), keepdims=bool(keepdim))
    return cx.b.gt(reduced, cx.value(0, DType.i32))


@converts(torch.any, "any", A("any"))
def any_(cx, x, dim=None, keepdim=False, *, out=None):
    return _truth(cx, "max", x, dim, keepdim)


@converts(torch.all, "all", A("all"))
def all_(cx, x, dim=None, keepdim=False, *, out=None):
    return _truth(cx, "min", x, dim, keepdim)


@converts(torch.var, "var", A("var"))
def var(cx, x, dim=None, *args, correction=None, keepdim=False, unbiased=None):
    if args:  # var(x, dim, unbiased, keepdim) or var(x, unbiased)
        if isinstance(dim, bool):
            dim, unbiased = None, dim
        else:
            unbiased, *rest = args
            keepdim = rest[0] if rest else keepdim
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    if correction is None:
        correction = 0 if unbiased is False else 1
    x = cx.value(x, cx.out_dtype)
    axes = dims_arg(dim, x.type.rank) or tuple(range(x.type.rank))
    count = int(np.prod([x.shape[a] for a in axes]))
    centered = cx.b.sub(x, cx.b.mean(x, axes=axes, keepdims=True))
    total = cx.b.sum(cx.b.mul(centered, centered), axes=axes, keepdims=bool(keepdim))
    return cx.b.div(total, cx.value(float(max(count - correction, 0)), x.dtype))


@converts(torch.linalg.vector_norm, A("linalg_vector_norm"))
def vector_norm(cx, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    x = cx.value(x, cx.out_dtype)
    axes = dims_arg(dim, x.type.rank)
    if ord == 2:
        return cx.b.sqrt(cx.b.sum(cx.b.mul(x, x), axes=axes, keepdims=bool(keepdim)))
    if ord == 1:
        return cx.b.sum(cx.b.abs(x), axes=axes, keepdims=bool(keepdim))
    if ord == float("inf"):
        return cx.b.max(cx.b.abs(x), axes=axes, keepdims=bool(keepdim))
    raise Unsupported(f"vector norm of order {ord} (supported: 1, 2, inf)")


@converts(torch.norm, "norm")
def norm(cx, x, p="fro", dim=None, keepdim=False, dtype=None):
    if p not in ("fro", 2, 2.0, 1, float("inf")):
        raise Unsupported(f"torch.norm with p={p!r}")
    return vector_norm(cx, x, 2 if p == "fro" else p, dim, keepdim)


# ----- matrix products ------------------------------------------------------------------------------
def matmul_values(cx, a: Value, b: Value, out_shape: Sequence[int]) -> Value:
    """torch.matmul semantics (1-D operands promoted, then the dim removed)."""
    if a.type.rank == 1:
        a = cx.reshape(a, (1,) + a.shape)
    if b.type.rank == 1:
        b = cx.reshape(b, b.shape + (1,))
    return cx.reshape(cx.b.matmul(a, b), out_shape)


@converts(torch.matmul, operator.matmul, "matmul", "__matmul__", torch.mm, "mm", A("matmul"), A("mm"))
def matmul(cx, x, other):
    dtype = cx.out_dtype
    return matmul_values(cx, cx.value(x, dtype), cx.value(other, dtype), cx.out_shape)


@converts("__rmatmul__")
def rmatmul(cx, x, other):
    return matmul(cx, other, x)


@converts(torch.bmm, "bmm", A("bmm"))
def bmm(cx, x, mat2):
    return cx.b.batch_matmul(cx.value(x), cx.value(mat2))


def _add_product(cx, bias, product, beta, alpha) -> Value:
    if alpha != 1:
        product = cx.b.mul(product, cx.value(alpha, product.dtype))
    if beta == 0:
        return product
    bias = cx.value(bias, product.dtype)
    if beta != 1:
        bias = cx.b.mul(bias, cx.value(beta, product.dtype))
    return cx.b.add(product, bias)


@converts(torch.addmm, "addmm", A("addmm"))
def addmm(cx, x, mat1, mat2, *, beta=1, alpha=1):
    return _add_product(cx, x, cx.b.matmul(cx.value(mat1), cx.value(mat2)), beta, alpha)


@converts(torch.baddbmm, "baddbmm", A("baddbmm"))
def baddbmm(cx, x, batch1, batch2, *, beta=1, alpha=1):
    return _add_product(cx, x, cx.b.batch_matmul(cx.value(batch1), cx.value(batch2)), beta, alpha)


# ----- layout: same elements, new shape -------------------------------------------------------------
def _reject_dtype_views(args) -> None:
    if any(isinstance(a, torch.dtype) for a in args):
        raise Unsupported("view as another dtype (bit reinterpretation)")


@converts(torch.reshape, "reshape", "view", "view_as", "reshape_as", torch.flatten, "flatten", torch.ravel, "ravel",
          torch.unflatten, "unflatten", torch.squeeze, "squeeze", torch.unsqueeze, "unsqueeze", "unsqueeze_",
          torch.atleast_2d, A("view"), A("reshape"), A("_unsafe_view"), A("flatten"), A("unflatten"), A("squeeze"),
          A("unsqueeze"), A("view_copy"), A("squeeze_copy"), A("unsqueeze_copy"))
def reshape(cx, x, *args, **kwargs):
    _reject_dtype_views(args)
    return cx.reshape(cx.value(x), cx.out_shape)


@converts("contiguous", "clone", "detach", "cpu", "requires_grad_", torch.clone, torch.detach, A("contiguous"), A("clone"), A("detach"), A("alias"), A("lift_fresh_copy"),
          A("lift_fresh"))
def identity(cx, x, *args, **kwargs):
    return cx.value(x)


@converts("expand", "expand_as", torch.broadcast_to, "broadcast_to", A("expand"), A("expand_as"), A("expand_copy"))
def expand(cx, x, *args, **kwargs):
    return cx.broadcast(cx.value(x), cx.out_shape)


@converts(torch.flip, "flip", A("flip"))
def flip(cx, x, *dims):
    """Reverse the given axes: a gather with reversed positions per axis."""
    x = cx.value(x)
    for axis in dims_arg(varargs(dims), x.type.rank) or ():
        size = x.shape[axis]
        if size > 1:
            reverse = cx.param(f"{cx.node.name}_reverse{axis}", torch.arange(size - 1, -1, -1))
            x = cx.b.gather(x, reverse, axis=axis)
    return x


@converts(torch.fliplr, "fliplr", A("fliplr"))
def fliplr(cx, x):
    return flip(cx, x, 1)


@converts(torch.flipud, "flipud", A("flipud"))
def flipud(cx, x):
    return flip(cx, x, 0)


@converts(torch.permute, "permute", A("permute"))
def permute(cx, x, *dims):
    return cx.transpose(cx.value(x), varargs(dims))


@converts(torch.transpose, torch.swapaxes, torch.swapdims, "transpose", "swapaxes", "swapdims", A("transpose"))
def transpose(cx, x, dim0, dim1):
    x = cx.value(x)
    perm = list(range(x.type.rank))
    perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
    return cx.transpose(x, perm)


@converts(torch.movedim, torch.moveaxis, "movedim", "moveaxis", A("movedim"), A("moveaxis"))
def movedim(cx, x, source, destination):
    """Dims `source` moved to `destination` (ints or sequences), the others keeping their order."""
    x = cx.value(x)
    rank = x.type.rank
    source = [d % rank for d in ((source,) if isinstance(source, int) else source)]
    destination = [d % rank for d in ((destination,) if isinstance(destination, int) else destination)]
    rest = iter(d for d in range(rank) if d not in source)
    placed = dict(zip(destination, source))
    return cx.transpose(x, [placed[k] if k in placed else next(rest) for k in range(rank)])


@converts(torch.t, "t", A("t"))
def t(cx, x):
    x = cx.value(x)
    return cx.transpose(x, tuple(reversed(range(x.type.rank))))


@converts(torch.cat, torch.concat, torch.concatenate, A("cat"), A("concat"))
def cat(cx, tensors, dim=0, *, out=None):
    dtype = cx.out_dtype
    values = [cx.value(v, dtype) for v in tensors]
    values = [v for v in values if v.type.numel > 0] or values[:1]  # torch skips empty pieces
    if len(values) == 1:
        return values[0]
    return cx.b.concat(*values, axis=dim)


@converts(torch.stack, A("stack"))
def stack(cx, tensors, dim=0, *, out=None):
    dtype = cx.out_dtype
    rank = len(cx.out_shape)
    dim = dim % rank
    pieces = [cx.value(v, dtype) for v in tensors]
    pieces = [cx.reshape(v, v.shape[:dim] + (1,) + v.shape[dim:]) for v in pieces]
    return pieces[0] if len(pieces) == 1 else cx.b.concat(*pieces, axis=dim)


@converts("repeat", A("repeat"))
def repeat(cx, x, *repeats):
    """x.repeat(r0, ..., rn): tile, as reshape -> broadcast -> reshape."""
    x = cx.value(x)
    repeats = varargs(repeats)
    shape = (1,) * (len(repeats) - x.type.rank) + x.shape
    interleaved = tuple(d for size in shape for d in (1, size))
    tiled = tuple(d for r, size in zip(repeats, shape) for d in (r, size))
    return cx.reshape(cx.broadcast(cx.reshape(x, interleaved), tiled), cx.out_shape)


@converts(torch.repeat_interleave, "repeat_interleave", A("repeat_interleave"))
def repeat_interleave(cx, x, repeats=None, dim=None, *, output_size=None):
    if repeats is None:  # repeat_interleave(counts): the positions, each repeated its count times
        counts = cx.value(x)
        x, repeats, dim = cx.b.iota(shape=counts.shape, axis=0, dtype=DType.i64), counts, 0
    x = cx.value(x)
    if isinstance(repeats, Value):
        return _repeat_counts(cx, x, repeats, dim)
    if dim is None:
        x, dim = cx.reshape(x, (x.type.numel,)), 0
    dim %= x.type.rank
    spread = x.shape[:dim + 1] + (1,) + x.shape[dim + 1:]
    target = x.shape[:dim + 1] + (repeats,) + x.shape[dim + 1:]
    return cx.reshape(cx.broadcast(cx.reshape(x, spread), target), cx.out_shape)


def _repeat_counts(cx, x: Value, repeats: Value, dim) -> Value:
    """Per-element counts known at conversion time (a constant): a gather of each slice, count times."""
    counts = repeats.data if repeats.kind is ValueKind.PARAM and not repeats.dtype.is_float else None
    if counts is None:
        raise Unsupported("repeat_interleave with repeat counts computed at run time (the result shape depends "
                          "on the data)")
    if dim is None:
        x, dim = cx.reshape(x, (x.type.numel,)), 0
    axis = dim % x.type.rank
    counts = np.broadcast_to(np.asarray(counts).reshape(-1), (x.shape[axis],))
    index = torch.from_numpy(np.repeat(np.arange(x.shape[axis]), counts).astype(np.int64))
    return cx.reshape(cx.b.gather(x, cx.param(f"{cx.node.name}_index", index), axis=axis), cx.out_shape)


@converts(torch.nn.functional.pad, optional(torch._C._nn, "pad"), A("pad"), A("constant_pad_nd"))
def pad(cx, x, pad, mode="constant", value=None):
    """Constant padding: concatenate constant blocks (negative padding slices instead)."""
    if mode != "constant":
        raise Unsupported(f"padding mode {mode!r} (only 'constant')")
    y = cx.value(x)
    fill = 0 if value is None else value
    for i in range(len(pad) // 2):
        axis = y.type.rank - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        if before < 0 or after < 0:
            y = slice_axis(cx, y, axis, max(-before, 0), y.shape[axis] - max(-after, 0))
        pieces = []
        for amount in (before, after):
            shape = y.shape[:axis] + (max(amount, 0),) + y.shape[axis + 1:]
            pieces.append(cx.b.constant(fill, y.dtype, shape) if amount > 0 else None)
        parts = [p for p in (pieces[0], y, pieces[1]) if p is not None]
        y = parts[0] if len(parts) == 1 else cx.b.concat(*parts, axis=axis)
    return y


# ----- splitting and indexing -----------------------------------------------------------------------
def slice_axis(cx, x: Value, axis: int, start: int, stop: int, step: int = 1) -> Value:
    rank = x.type.rank
    axis %= rank
    begin, end, stride = slice(start, stop, step).indices(x.shape[axis])
    if (begin, end, stride) == (0, x.shape[axis], 1):
        return x
    if len(range(begin, end, stride)) == 0:  # empty: only concatenation can use it
        return cx.b.constant(0, x.dtype, x.shape[:axis] + (0,) + x.shape[axis + 1:])
    starts = [0] * rank
    stops = list(x.shape)
    steps = [1] * rank
    starts[axis], stops[axis], steps[axis] = begin, end, stride
    return cx.b.slice(x, start=starts, stop=stops, step=steps)


def split_like_expected(cx, x, dim: int, squeeze: bool = False) -> tuple[Value, ...]:
    """Slice `x` along `dim` into the pieces torch produced (their sizes come from cx.expected)."""
    x = cx.value(x)
    dim %= x.type.rank
    pieces, offset = [], 0
    for expected in cx.expected:
        size = 1 if squeeze else expected.shape[dim]
        piece = slice_axis(cx, x, dim, offset, offset + size)
        pieces.append(cx.reshape(piece, tuple(expected.shape)))
        offset += size
    return tuple(pieces)


@converts(torch.split, "split", A("split"), A("split_with_sizes"), A("unsafe_split"))
def split(cx, x, split_size_or_sections, dim=0):
    return split_like_expected(cx, x, dim)


@converts(torch.chunk, "chunk", A("chunk"))
def chunk(cx, x, chunks, dim=0):
    return split_like_expected(cx, x, dim)


@converts(torch.tensor_split, "tensor_split")
def tensor_split(cx, x, indices_or_sections, dim=0):
    return split_like_expected(cx, x, dim)


@converts(torch.unbind, "unbind", A("unbind"))
def unbind(cx, x, dim=0):
    return split_like_expected(cx, x, dim, squeeze=True)


@converts(torch.narrow, "narrow", A("narrow"))
def narrow(cx, x, dim, start, length):
    return slice_axis(cx, cx.value(x), dim, start, start + length)


@converts(torch.select, "select", A("select"))
def select(cx, x, dim, index):
    x = cx.value(x)
    index = index % x.shape[dim % x.type.rank]
    return cx.reshape(slice_axis(cx, x, dim, index, index + 1), cx.out_shape)


@converts(A("slice"))
def aten_slice(cx, x, dim=0, start=None, end=None, step=1):
    return slice_axis(cx, cx.value(x), dim, start, end, step)


# ----- shape queries and other Python-level values ---------------------------------------------------
# A node that reads only a tensor's metadata (not its data) gives a Python value that is fixed for the
# example inputs' shapes, so the converter keeps that value. Anything else that turns tensor data into a
# Python value (`.item()`, `.tolist()`, `int(x)`) cannot be expressed in a graph.
METADATA_METHODS = {"size", "dim", "ndimension", "numel", "nelement", "is_contiguous", "is_floating_point",
                    "element_size", "get_device", "stride", "is_complex", "type"}
METADATA_ATTRIBUTES = {"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "layout", "is_sparse",
                       "is_quantized", "is_meta", "is_nested", "is_cpu", "names"}
METADATA_FUNCTIONS = {builtins.len, builtins.isinstance, torch.numel, torch.is_tensor, torch.is_floating_point,
                      torch._assert, A("sym_size"), A("sym_numel"), A("sym_stride"), A("_assert_tensor_metadata"),
                      A("_assert_scalar"), A("_assert_async")} - {None}


@converts(A("numpy_T"))
def numpy_t(cx, x):
    return getattr_(cx, x, "T")


@converts(builtins.getattr)
def getattr_(cx, x, name, *default):
    if not isinstance(x, Value):
        return getattr(x, name, *default)
    if name in ("T", "mT", "mH", "H"):
        rank = x.type.rank
        perm = tuple(reversed(range(rank))) if name in ("T", "H") else tuple(range(rank - 2)) + (rank - 1, rank - 2)
        return cx.transpose(x, perm)
    if name in ("data",):
        return x
    raise Unsupported(f"tensor attribute .{name}")


# ----- sources: tensors built from shapes -------------------------------------------------------------
# These depend on no tensor data. The converter runs them as IR ops (iota, constant) instead of folding
# them into parameters carrying data; what is computed from them alone is still folded.
def _fill(cx, value) -> Value:
    dtype = cx.out_dtype
    if isinstance(value, float) and not dtype.is_float and not value.is_integer():
        raise Unsupported(f"fill value {value} for a {dtype} tensor")
    return cx.b.constant(value, dtype, cx.out_shape)


@converts(torch.full, A("full"))
def full(cx, size, fill_value, **kwargs):
    return _fill(cx, fill_value)


@converts(torch.zeros, torch.empty, A("zeros"), A("empty"))
def zeros(cx, *size, **kwargs):
    return _fill(cx, 0)


@converts(torch.ones, A("ones"))
def ones(cx, *size, **kwargs):
    return _fill(cx, 1)


@converts(torch.zeros_like, torch.empty_like, "new_zeros", "new_empty", A("zeros_like"), A("empty_like"),
          A("new_zeros"), A("new_empty"))
def zeros_like(cx, x, *args, **kwargs):
    return _fill(cx, 0)


@converts(torch.ones_like, "new_ones", A("ones_like"), A("new_ones"))
def ones_like(cx, x, *args, **kwargs):
    return _fill(cx, 1)


@converts(torch.full_like, A("full_like"))
def full_like(cx, x, fill_value, **kwargs):
    return _fill(cx, fill_value)


@converts("new_full", A("new_full"))
def new_full(cx, x, size, fill_value, **kwargs):
    return _fill(cx, fill_value)


@converts(torch.scalar_tensor, A("scalar_tensor"))
def scalar_tensor(cx, value, **kwargs):
    return _fill(cx, value)


@converts(torch.arange, A("arange"))
def arange(cx, start, end=None, step=1, **kwargs):
    """start + step * iota, in integers (exact for float results when start and step are integers)."""
    if end is None:
        start, end = 0, start
    if not all(isinstance(v, int) or (isinstance(v, float) and v.is_integer()) for v in (start, step)):
        raise Unsupported(f"arange with a fractional start or step ({start}, {step})")
    (count,) = cx.out_shape
    y = cx.b.iota(shape=(count,), axis=0, dtype=DType.i64)
    if step != 1:
        y = cx.b.mul(y, cx.value(int(step), DType.i64))
    if start != 0:
        y = cx.b.add(y, cx.value(int(start), DType.i64))
    return cx.cast(y, cx.out_dtype)


SOURCES = {full, zeros, ones, zeros_like, ones_like, full_like, new_full, scalar_tensor, arange}


# ----- tensors that depend only on another tensor's shape --------------------------------------------
# `zeros_like(x)` reads only x's shape and dtype: the converter treats such calls as constants.
SHAPE_ONLY_FUNCTIONS = {torch.zeros_like, torch.ones_like, torch.full_like, torch.empty_like, A("zeros_like"),
                        A("ones_like"), A("full_like"), A("empty_like"), A("new_zeros"), A("new_ones"),
                        A("new_full"), A("new_empty"), A("scalar_tensor")} - {None}
SHAPE_ONLY_METHODS = {"new_zeros", "new_ones", "new_full", "new_empty", "new_tensor"}
