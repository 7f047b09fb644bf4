"""Elementwise ops with numpy broadcasting: unary, binary, comparisons, `where`, `cast`, and `constant`."""
from __future__ import annotations

import math

import numpy as np

from ..structured import PARALLEL, AffineExpr, AffineMap, Arg, Cast, Const, Index, IterationSpace, call
from ..types import DType, TensorType, broadcast_shapes, normalize_axis
from .registry import ELEMENTWISE, SOURCE, AttrSpec, OpDef, register, same_dtype


def _special():
    """scipy.special, imported on first use: importing it costs 0.2 s, and most programs never call erf."""
    from scipy import special

    return special


def broadcast_map(operand: tuple[int, ...], result: tuple[int, ...]) -> AffineMap:
    """Map loops over `result` to indices of an operand broadcast against it (numpy rules)."""
    offset = len(result) - len(operand)
    exprs = []
    for axis, size in enumerate(operand):
        dim = offset + axis
        exprs.append(AffineExpr.constant(0) if size == 1 and result[dim] != 1 else AffineExpr.dim(dim))
    return AffineMap(tuple(exprs))


def elementwise_space(in_types, result: TensorType, body) -> IterationSpace:
    shape = result.shape
    return IterationSpace(
        extents=shape,
        kinds=(PARALLEL,) * len(shape),
        inputs=tuple(broadcast_map(t.shape, shape) for t in in_types),
        outputs=(AffineMap.identity(len(shape)),),
        body=(body,),
        init=(None,),
    )


def _broadcast(in_types) -> tuple[int, ...]:
    try:
        return broadcast_shapes(*(t.shape for t in in_types))
    except ValueError as e:
        shown = ", ".join(t.compact() for t in in_types)
        raise ValueError(f"{e}: {shown}") from None


def _unary(name: str, body, reference, doc: str, float_only: bool = True, attrs=(), bool_ok: bool = True) -> None:
    def infer(in_types, attrs):
        (x,) = in_types
        if float_only and not x.dtype.is_float:
            raise ValueError(f"needs a floating-point operand, got {x.compact()}")
        if not bool_ok and x.dtype is DType.bool:
            raise ValueError(f"needs a numeric operand, got {x.compact()}")
        return x

    register(OpDef(
        name=name, category=ELEMENTWISE, arity=(1, 1), attrs=tuple(attrs), doc=doc,
        infer_fn=infer,
        reference_fn=lambda a, attrs, r: reference(a[0], attrs),
        space_fn=lambda ins, attrs, r: elementwise_space(ins, r, body(attrs) if callable(body) else body),
    ))


x = Arg(0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)

_unary("neg", call("neg", x), lambda a, _: -a, "-x", float_only=False, bool_ok=False)  # numpy has no bool negative
_unary("abs", call("abs", x), lambda a, _: np.abs(a), "|x|", float_only=False)
_unary("exp", call("exp", x), lambda a, _: np.exp(a), "e**x")
_unary("log", call("log", x), lambda a, _: np.log(a), "natural logarithm")
_unary("sqrt", call("sqrt", x), lambda a, _: np.sqrt(a), "square root")
_unary("rsqrt", call("rsqrt", x), lambda a, _: 1 / np.sqrt(a), "1 / sqrt(x)")
_unary("tanh", call("tanh", x), lambda a, _: np.tanh(a), "hyperbolic tangent")
_unary("erf", call("erf", x), lambda a, _: _special().erf(a), "error function")
_unary("sigmoid", call("sigmoid", x), lambda a, _: 0.5 * (1 + np.tanh(0.5 * a)), "1 / (1 + e**-x)")
_unary("sin", call("sin", x), lambda a, _: np.sin(a), "sine (radians)")
_unary("cos", call("cos", x), lambda a, _: np.cos(a), "cosine (radians)")
_unary("exp2", call("exp2", x), lambda a, _: np.exp2(a), "2**x")
_unary("log2", call("log2", x), lambda a, _: np.log2(a), "base-2 logarithm")
_unary("log1p", call("log1p", x), lambda a, _: np.log1p(a), "log(1 + x), accurate for small x")
_unary("expm1", call("expm1", x), lambda a, _: np.expm1(a), "e**x - 1, accurate for small x")
_unary("relu", call("max", x, 0.0), lambda a, _: np.where(a > 0, a, 0), "max(x, 0)", float_only=False)
_unary("relu6", call("min", call("max", x, 0.0), 6.0), lambda a, _: np.clip(a, 0, 6), "min(max(x, 0), 6)")
_unary("silu", call("mul", x, call("sigmoid", x)), lambda a, _: a / (1 + np.exp(-a)), "x * sigmoid(x)")


def _gelu_body(attrs):
    if attrs["approximate"] == "tanh":
        inner = call("mul", SQRT_2_OVER_PI, call("add", x, call("mul", 0.044715, call("mul", x, call("mul", x, x)))))
        return call("mul", call("mul", 0.5, x), call("add", 1.0, call("tanh", inner)))
    return call("mul", call("mul", 0.5, x), call("add", 1.0, call("erf", call("mul", x, 1 / math.sqrt(2.0)))))


def _gelu_reference(a, attrs):
    a = a.astype(np.float64)
    if attrs["approximate"] == "tanh":
        return 0.5 * a * (1 + np.tanh(SQRT_2_OVER_PI * (a + 0.044715 * a**3)))
    return a * 0.5 * _special().erfc(-a / math.sqrt(2.0))


_unary("gelu", _gelu_body, _gelu_reference, "Gaussian error linear unit (erf form, or tanh approximation)",
       attrs=(AttrSpec("approximate", "str", "none", ("none", "tanh")),))


def _cast_infer(in_types, attrs):
    return in_types[0].with_dtype(attrs["dtype"])


register(OpDef(
    name="cast", category=ELEMENTWISE, arity=(1, 1), attrs=(AttrSpec("dtype", "dtype"),),
    doc="convert to another dtype (floats to ints truncate toward zero)",
    infer_fn=_cast_infer,
    reference_fn=lambda a, attrs, r: a[0].astype(np.float64).astype(attrs["dtype"].numpy)
    if a[0].dtype.kind == "f" and attrs["dtype"].is_int else a[0],
    space_fn=lambda ins, attrs, r: elementwise_space(ins, r, Cast(x, attrs["dtype"])),
))


def _binary(name: str, fn: str, reference, doc: str, compare: bool = False, bool_ok: bool = True) -> None:
    def infer(in_types, attrs):
        dtype = same_dtype(in_types)
        if not bool_ok and dtype is DType.bool:
            raise ValueError(f"needs numeric operands, got {', '.join(t.compact() for t in in_types)}")
        return TensorType(_broadcast(in_types), DType.bool if compare else dtype)

    register(OpDef(
        name=name, category=ELEMENTWISE, arity=(2, 2), doc=doc, infer_fn=infer,
        reference_fn=lambda a, attrs, r: reference(a[0], a[1]),
        space_fn=lambda ins, attrs, r: elementwise_space(ins, r, call(fn, Arg(0), Arg(1))),
    ))


_binary("add", "add", np.add, "x + y")
_binary("sub", "sub", np.subtract, "x - y", bool_ok=False)  # numpy has no bool subtract
_binary("mul", "mul", np.multiply, "x * y")
_binary("div", "div", lambda a, b: np.true_divide(a, b), "x / y")
_binary("pow", "pow", lambda a, b: np.power(a.astype(np.float64), b) if a.dtype.kind == "f" else np.power(a, b),
        "x ** y")
_binary("maximum", "max", np.maximum, "elementwise max")
_binary("minimum", "min", np.minimum, "elementwise min")
for _name, _ref in (("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                    ("gt", np.greater), ("ge", np.greater_equal)):
    _binary(_name, _name, _ref, f"comparison {_name}, a bool tensor", compare=True)


def _where_infer(in_types, attrs):
    cond, a, b = in_types
    if cond.dtype is not DType.bool:
        raise ValueError(f"condition must be bool, got {cond.compact()}")
    dtype = same_dtype((a, b), "branches")
    return TensorType(_broadcast(in_types), dtype)


register(OpDef(
    name="where", category=ELEMENTWISE, arity=(3, 3), doc="cond ? x : y, broadcast",
    infer_fn=_where_infer,
    reference_fn=lambda a, attrs, r: np.where(a[0], a[1], a[2]),
    space_fn=lambda ins, attrs, r: elementwise_space(ins, r, call("select", Arg(0), Arg(1), Arg(2))),
))


def _constant_normalize(in_types, attrs):
    value, dtype = attrs["value"], attrs["dtype"]
    if dtype.is_float:
        attrs["value"] = float(value)
    elif dtype is DType.bool:
        if value not in (0, 1, True, False):
            raise ValueError(f"value {value!r} is not a bool")
        attrs["value"] = bool(value)
    else:  # integers compared exactly: float(2**63 - 1) rounds up, and read as inexact (torch's int64 max fill)
        if not isinstance(value, (int, np.integer)) and not float(value).is_integer():
            raise ValueError(f"value {value!r} is not an integer for {dtype}")
        attrs["value"] = int(value)
    return attrs


register(OpDef(
    name="constant", category=SOURCE, arity=(0, 0), doc="a tensor filled with one value",
    attrs=(AttrSpec("value", "scalar"), AttrSpec("shape", "shape", ()), AttrSpec("dtype", "dtype", DType.f32)),
    normalize_fn=_constant_normalize,
    infer_fn=lambda ins, attrs: TensorType(attrs["shape"], attrs["dtype"]),
    reference_fn=lambda a, attrs, r: np.full(r.shape, attrs["value"], dtype=r.dtype.numpy),
    space_fn=lambda ins, attrs, r: elementwise_space((), r, Const(attrs["value"])),
))


def _iota_normalize(in_types, attrs):
    attrs["axis"] = normalize_axis(attrs["axis"], len(attrs["shape"]))
    return attrs


def _iota_reference(arrays, attrs, result):
    positions = np.arange(result.shape[attrs["axis"]]).astype(result.dtype.numpy)  # bool: 0 is False
    view = [1] * result.rank
    view[attrs["axis"]] = -1
    return np.broadcast_to(positions.reshape(view), result.shape)


register(OpDef(
    name="iota", category=SOURCE, arity=(0, 0), doc="each element's index along axis (for masks)",
    attrs=(AttrSpec("shape", "shape"), AttrSpec("axis", "int", 0), AttrSpec("dtype", "dtype", DType.i64)),
    normalize_fn=_iota_normalize,
    infer_fn=lambda ins, attrs: TensorType(attrs["shape"], attrs["dtype"]),
    reference_fn=_iota_reference,
    space_fn=lambda ins, attrs, r: elementwise_space((), r, Cast(Index(attrs["axis"]), attrs["dtype"])),
))
