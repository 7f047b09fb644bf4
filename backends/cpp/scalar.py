"""Scalar bodies (`ir.structured` expressions) as C++ expressions.

Every function of `SCALAR_FUNCTIONS` has one spelling here, through small helpers of the
generated prelude (`tg_max`, `tg_div`, ...) that reproduce numpy's rules: NaN propagates through
max/min, integer division is true division, integer powers stay exact.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from tilegraph.ir import TilegraphError
from tilegraph.ir.structured import Acc, Arg, Call, Cast, Const, Index, ScalarExpr
from tilegraph.ir.types import DType

from .names import compute_type, float_literal

_INFIX = {"add": "+", "sub": "-", "mul": "*", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">",
          "ge": ">="}
_HELPERS = {"div": "tg_div", "pow": "tg_pow", "max": "tg_max", "min": "tg_min", "abs": "tg_abs",
            "exp": "tg_exp", "log": "tg_log", "sqrt": "tg_sqrt", "rsqrt": "tg_rsqrt", "tanh": "tg_tanh",
            "erf": "tg_erf", "sigmoid": "tg_sigmoid", "sin": "std::sin", "cos": "std::cos", "exp2": "std::exp2",
            "log2": "std::log2", "log1p": "std::log1p", "expm1": "std::expm1"}  # <cmath>: host and SYCL device


def scalar_expr(expr: ScalarExpr, args: Sequence[str], dtype: DType, index: Callable[[int], str],
                acc: str | None = None, op: str = "?") -> str:
    """C++ for `expr`: `args[i]` are the operands' element expressions, `index(d)` the loop index
    of the node's own loop d, `acc` the running value of a reduction; constants take `dtype`."""

    def walk(e: ScalarExpr) -> str:
        if isinstance(e, Arg):
            return args[e.index]
        if isinstance(e, Acc):
            if acc is None:
                raise TilegraphError(f"cpp backend: op {op}: accumulator read outside a reduction")
            return acc
        if isinstance(e, Index):
            return f"((int64_t){index(e.dim)})"
        if isinstance(e, Const):
            return _const(e.value, dtype)
        if isinstance(e, Cast):
            return f"(({compute_type(e.dtype, op)})({_round(e.dtype, walk(e.arg))}))"
        if isinstance(e, Call):
            parts = [walk(a) for a in e.args]
            if e.fn in _INFIX:
                return f"({parts[0]} {_INFIX[e.fn]} {parts[1]})"
            if e.fn == "neg":
                return f"(-{parts[0]})"
            if e.fn == "select":
                return f"({parts[0]} ? {parts[1]} : {parts[2]})"
            if e.fn in _HELPERS:
                return f"{_HELPERS[e.fn]}({', '.join(parts)})"
        raise TilegraphError(f"cpp backend: op {op}: scalar function {getattr(e, 'fn', e)!r} has no C++ spelling")

    return walk(expr)


def _round(dtype: DType, text: str) -> str:
    """A cast to a 16-bit float rounds (numpy stores the cast value in that type)."""
    if dtype is DType.f16:
        return f"(float)(tg_half)({text})"
    if dtype is DType.bf16:
        return f"tg_bf16((float)({text}))"
    return text


def _const(value, dtype: DType) -> str:
    """A constant as numpy sees it: in the computation dtype for floats, as given otherwise."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if dtype.is_float:
        return float_literal(float(value), dtype)
    if isinstance(value, int):
        return f"((int64_t){value}LL)" if dtype is DType.i64 else f"((int32_t){value})"
    return float_literal(float(value))  # a float constant in an integer body computes in double
