"""Safe spellings for generated source: mangled identifiers, C types, literals.

Nothing that came from user input (DSL identifiers, torch module names) is ever pasted into the
generated source as is: generated identifiers are built from indices, and names that appear in
comments are mangled to `[A-Za-z0-9_]` first, so quotes, newlines, `*/` or `#include` cannot
change the meaning of the code.
"""
from __future__ import annotations

import math

from tilegraph.ir import TilegraphError
from tilegraph.ir.types import DType

_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")

C_TYPES: dict[DType, str] = {
    DType.f32: "float",
    DType.f16: "tg_half",  # IEEE half: _Float16 in C++, sycl::half in SYCL (see the dialects)
    DType.bf16: "float",  # stored as float32 rounded to bf16, as numpy holds it
    DType.i32: "int32_t",
    DType.i64: "int64_t",
    DType.bool: "bool",
}


def storage_bytes(dtype: DType) -> int:
    """Bytes per element as the generated code stores it (bf16 is held in a float)."""
    return 4 if dtype is DType.bf16 else dtype.itemsize  # f16: 2 bytes, IEEE half


def nbytes(value_type) -> int:
    """Bytes of a tensor as the generated code and the runtime store it."""
    return value_type.numel * storage_bytes(value_type.dtype)


def mangle(name: str) -> str:
    """`name` over the alphabet [A-Za-z0-9_]: other characters (and `_`) become `_XX` hex escapes.

    Injective, so distinct names stay distinct; the result is safe in identifiers and comments.
    """
    out = []
    for ch in name:
        if ch in _SAFE:
            out.append(ch)
        else:
            out.append("".join(f"_{b:02x}" for b in ch.encode("utf-8")))
    return "".join(out) or "_"


def c_type(dtype: DType, op: str | None = None) -> str:
    """The C++ element type of a dtype; a TilegraphError for dtypes the backend cannot compute in."""
    try:
        return C_TYPES[dtype]
    except KeyError:
        where = f" (op {op})" if op else ""
        raise TilegraphError(f"cpp backend: dtype {dtype.value}{where} is not supported yet; "
                             f"supported: {', '.join(d.value for d in C_TYPES)}") from None


def compute_type(dtype: DType, op: str | None = None) -> str:
    """The C++ type values of `dtype` are computed in: float for the 16-bit floats (rounded when
    stored, as numpy rounds each result), the storage type otherwise."""
    return "float" if dtype in (DType.f16, DType.bf16) else c_type(dtype, op)


def float_literal(value: float, dtype: DType | None = None) -> str:
    """An exact C++ literal for a Python float, converted to `dtype`'s C type when given."""
    if math.isnan(value):
        text = "NAN"
    elif math.isinf(value):
        text = "INFINITY" if value > 0 else "(-INFINITY)"
    else:
        text = repr(float(value))  # shortest round-trip decimal: parses back to the same double
        if "e" not in text and "." not in text:
            text += ".0"
        if text.startswith("-"):
            text = f"({text})"
    if dtype is None:
        return text
    ctype = c_type(dtype)
    ctype = compute_type(dtype)
    return text if ctype == "double" else f"(({ctype}){text})"


def init_literal(value: float, dtype: DType) -> str:
    """A reduction init or pad value in `dtype` (infinities become the integer extremes)."""
    if dtype is DType.f16 and math.isinf(value):
        return float_literal(value, DType.f32)
    if dtype.is_int and math.isinf(value):
        limit = "max" if value > 0 else "lowest"
        return f"std::numeric_limits<{c_type(dtype)}>::{limit}()"
    if dtype is DType.bool:
        return "true" if (value > 0 if math.isinf(value) else bool(value)) else "false"
    if dtype.is_int:
        return f"(({c_type(dtype)}){int(value)})"
    return float_literal(value, dtype)
