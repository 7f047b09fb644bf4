"""Scalar bodies (`Arg`, `Const`, `Call`, ...) as Triton expressions over rank-R block tensors.

Every expression comes back with its Triton element type, so promotion follows the reference's
numpy rules closely enough: half floats compute in fp32, integers keep their width, a division of
integers is a true division in fp64, comparisons give int1.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tilegraph.ir import TilegraphError
from tilegraph.ir.structured import Acc, Arg, Call, Cast, Const, Index
from tilegraph.ir.types import DType

# tilegraph dtype -> Triton element type name
TL_TYPE = {DType.f32: "float32", DType.f16: "float16", DType.bf16: "bfloat16", DType.i32: "int32", DType.i64: "int64",
           DType.bool: "int1"}
FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int1", "int32", "int64")
_RANK = {"int1": 0, "int32": 1, "int64": 2, "float16": 3, "bfloat16": 3, "float32": 4, "float64": 5}


def tl_type(dtype: DType) -> str:
    return TL_TYPE[dtype]


def compute_type(t: str) -> str:
    """The type arithmetic on a `t` value runs in: half floats widen to fp32."""
    return "float32" if t in ("float16", "bfloat16") else t


def promote(a: str, b: str) -> str:
    """numpy-like promotion of two (compute) types."""
    a, b = compute_type(a), compute_type(b)
    return a if _RANK[a] >= _RANK[b] else b


@dataclass(frozen=True)
class Expr:
    code: str
    type: str


def cast(e: Expr, t: str) -> Expr:
    if e.type == t:
        return e
    if t == "bfloat16" and e.type in INTS:  # through fp32: the interpreter casts int -> bf16 bitwise
        e = Expr(f"({e.code}).to(tl.float32)", "float32")
    return Expr(f"({e.code}).to(tl.{t})", t)


def literal(value: float, t: str) -> str:
    """A Python literal of `value` for a `t` constant (infinities as float('inf'), ints clamped)."""
    if t in INTS:
        if t == "int1":  # an infinite init/pad in a bool tensor is its extreme (True for +inf)
            return "1" if (value > 0 if math.isinf(value) else value) else "0"
        if math.isinf(value) or math.isnan(value):
            bits = 31 if t == "int32" else 63
            return str(-(2 ** bits)) if value < 0 else str(2 ** bits - 1)
        return str(int(value))
    if math.isnan(value):
        return "float('nan')"
    if math.isinf(value):
        return "float('inf')" if value > 0 else "float('-inf')"
    return repr(float(value))


_BINARY = {"add": "+", "sub": "-", "mul": "*"}
_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_UNARY_FLOAT = {"exp": "tl.exp", "log": "tl.log", "sqrt": "tl.sqrt", "rsqrt": "tl.rsqrt", "erf": "tl.erf",
                "sigmoid": "tl.sigmoid", "tanh": "_tg_tanh", "sin": "tl.sin", "cos": "tl.cos", "exp2": "tl.exp2",
                "log2": "tl.log2", "log1p": "_tg_log1p", "expm1": "_tg_expm1"}


class ScalarTranslator:
    """Translates one body. `arg(i)` gives operand i; `index(d)` the index grid of node loop d;
    `const(code, t)` wraps a literal as a rank-R tensor; `dtype` is the result type."""

    def __init__(self, arg: Callable[[int], Expr], index: Callable[[int], Expr], const: Callable[[str, str], Expr],
                 result: str, acc: Expr | None = None) -> None:
        self.arg, self.index, self.const, self.result, self.acc = arg, index, const, result, acc

    def __call__(self, expr) -> Expr:
        if isinstance(expr, Arg):
            e = self.arg(expr.index)
            return cast(e, compute_type(e.type))
        if isinstance(expr, Index):
            return self.index(expr.dim)
        if isinstance(expr, Acc):
            if self.acc is None:
                raise TilegraphError("a body reads its accumulator outside a reduction")
            return self.acc
        if isinstance(expr, Const):
            t = compute_type(self.result)
            if t == "int1":
                t = "float32" if float(expr.value) != int(expr.value) or math.isinf(expr.value) else "int32"
            return self.const(literal(expr.value, t), t)
        if isinstance(expr, Cast):
            return cast(self(expr.arg), tl_type(expr.dtype))
        if isinstance(expr, Call):
            return self.call(expr.fn, [self(a) for a in expr.args])
        raise TilegraphError(f"unknown scalar expression {expr!r}")

    def call(self, fn: str, args: Sequence[Expr]) -> Expr:
        if fn in _BINARY:
            a, b = args
            t = promote(a.type, b.type)
            if t == "int1":
                t = "int32"
            return Expr(f"({cast(a, t).code} {_BINARY[fn]} {cast(b, t).code})", t)
        if fn == "div":
            a, b = args
            t = promote(a.type, b.type)
            if t in INTS:
                t = "float64"
            return Expr(f"({cast(a, t).code} / {cast(b, t).code})", t)
        if fn == "pow":
            a, b = args
            t = promote(a.type, b.type)
            if t in INTS:
                return Expr(f"_tg_ipow({cast(a, t).code}, {cast(b, t).code})", t)
            return Expr(f"_tg_pow({cast(a, t).code}, {cast(b, t).code})", t)
        if fn in ("max", "min"):
            a, b = args
            t = promote(a.type, b.type)
            return Expr(f"tl.{fn}imum({cast(a, t).code}, {cast(b, t).code})", t)
        if fn in _COMPARE:
            a, b = args
            t = promote(a.type, b.type)
            return Expr(f"({cast(a, t).code} {_COMPARE[fn]} {cast(b, t).code})", "int1")
        if fn == "neg":
            (a,) = args
            t = "int32" if a.type == "int1" else a.type
            return Expr(f"(-{cast(a, t).code})", t)
        if fn == "abs":
            (a,) = args
            return Expr(f"tl.abs({a.code})", a.type) if a.type != "int1" else a
        if fn in _UNARY_FLOAT:
            (a,) = args
            t = a.type if a.type in FLOATS else "float32" if a.type != "int64" else "float64"
            t = compute_type(t)
            if t == "float64" and fn in ("erf", "sigmoid", "tanh"):
                t = "float32"
            return Expr(f"{_UNARY_FLOAT[fn]}({cast(a, t).code})", t)
        if fn == "select":
            c, a, b = args
            t = promote(a.type, b.type)
            return Expr(f"tl.where({cast(c, 'int1').code}, {cast(a, t).code}, {cast(b, t).code})", t)
        raise TilegraphError(f"scalar function {fn!r} has no Triton spelling")


# Helpers the generated module defines once (jit functions callable from every kernel).
HELPERS = '''
@triton.jit
def _tg_tf32(x):
    # f32 operands of a TF32 tl.dot rounded to TF32's 10 mantissa bits (to nearest, ties away), as cuBLAS and
    # cuDNN convert them: fed f32 bits, the tensor cores truncate (a random ResNet-50 then drifted 4x as far
    # from f64, `benchmarks/tf32_rounding.py`), and the interpreter would multiply in full f32
    bits = x.to(tl.int32, bitcast=True)
    r = ((bits + 0x1000) & -8192).to(tl.float32, bitcast=True)
    return tl.where(x == x, r, x)


@triton.jit
def _tg_tanh(x):
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def _tg_log1p(x):
    # log(u) * x / (u - 1) with u = 1 + x (Goldberg): exact where 1 + x rounds, x itself where it is 1
    u = 1.0 + x
    d = u - 1.0
    r = tl.log(u) * (x / tl.where(d == 0.0, 1.0, d))
    return tl.where(d == 0.0, x, tl.where(u == float('inf'), u, r))


@triton.jit
def _tg_expm1(x):
    # (u - 1) * x / log(u) with u = e**x (Kahan): x itself where u rounds to 1, -1 where u - 1 is -1
    u = tl.exp(x)
    d = u - 1.0
    lu = tl.log(u)
    r = d * (x / tl.where(lu == 0.0, 1.0, lu))
    return tl.where(u == 1.0, x, tl.where((d == -1.0) | (u == float('inf')), d, r))


@triton.jit
def _tg_pow(x, y):
    r = tl.exp2(y * tl.log2(tl.abs(x)))
    whole = tl.floor(y) == y
    odd = whole & (tl.floor(y * 0.5) * 2.0 != y)
    r = tl.where(x < 0, tl.where(whole, tl.where(odd, -r, r), float('nan')), r)
    return tl.where(y == 0, 1.0, r)


@triton.jit
def _tg_ipow(x, y):
    r = x * 0 + 1
    b = x
    e = y
    for _ in range(0, 64):
        r = tl.where((e & 1) != 0, r * b, r)
        b = b * b
        e = e >> 1
    return tl.where(y < 0, 0, r)


@triton.jit
def _tg_mul(a, b):
    return a * b
'''

__all__ = ["Expr", "ScalarTranslator", "HELPERS", "TL_TYPE", "tl_type", "compute_type", "promote", "cast", "literal",
           "FLOATS", "INTS"]
