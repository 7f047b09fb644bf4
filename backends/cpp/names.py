"""Safe spellings for generated source: identifiers, mangled names, C types, literals.

Nothing that came from user input (DSL identifiers, torch module names) is ever pasted into the
generated source as is. Tensors and kernels are named after their IR names through `identifier`
(letters, digits and single underscores only) and a `NameTable`, which keeps them unique and away
from C++ keywords, macros and the generated code's own identifiers; names that appear in comments
are mangled to `[A-Za-z0-9_]` first. So quotes, newlines, `*/` or `#include` cannot change the
meaning of the code.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable

from tilegraph.ir import TilegraphError
from tilegraph.ir.program import Program
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


def identifier(name: str, numeric_prefix: str = "v") -> str:
    """A readable identifier for an IR name: runs of characters outside [A-Za-z0-9] become one `_`,
    no leading, trailing or double underscores; a leading digit gets `numeric_prefix` (`%22` is
    `v22`); nothing left gives `numeric_prefix`. Not injective ("a.b" and "a_b" meet): a
    `NameTable` keeps the names of one program distinct."""
    text = re.sub(r"[^A-Za-z0-9]+", "_", name.encode("ascii", "replace").decode("ascii")).strip("_")
    if not text:
        return numeric_prefix
    return numeric_prefix + text if text[0].isdigit() else text


class NameTable:
    """Unique identifiers for one scope of generated code (shared by the C++ and Triton backends).

    `take(stem)` gives `stem` itself when it is free and not `reserved`; a reserved stem gets a
    trailing `_` (`int_`), or a `v_` prefix where its spelling is reserved (`tg_run` is `v_tg_run`);
    a stem already taken gets the first free `stem_2`, `stem_3`, ... Reserved words are the
    language's keywords and the names the generated code declares or calls itself, so a tensor
    named like a loop index (`b1`) or a helper can never shadow it."""

    def __init__(self, reserved: Callable[[str], bool], taken: Iterable[str] = ()) -> None:
        self.reserved = reserved
        self.taken: set[str] = set(taken)

    def free(self, name: str) -> bool:
        return name not in self.taken and not self.reserved(name)

    def take(self, stem: str) -> str:
        stem = re.sub(r"_+", "_", stem).strip("_") or "v"  # `b1_` + `_tile` is `b1_tile`
        if self.free(stem):
            self.taken.add(stem)
            return stem
        if self.reserved(stem) and self.free(f"{stem}_"):  # a keyword or the code's own name: `int_`, `b1_`
            self.taken.add(f"{stem}_")
            return f"{stem}_"
        if self.reserved(f"{stem}_2"):  # reserved as a prefix or by its spelling (`tg_...`, `NULL`)
            return self.take(f"v_{stem}")
        n = 2
        while not self.free(f"{stem}_{n}"):
            n += 1
        self.taken.add(f"{stem}_{n}")
        return f"{stem}_{n}"

    def child(self) -> NameTable:
        """A nested scope: what is taken here stays taken there."""
        return NameTable(self.reserved, self.taken)


CPP_KEYWORDS = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
    char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
    co_return co_yield decltype default delete do double dynamic_cast else enum explicit export extern
    false float for friend goto if inline int long mutable namespace new noexcept not not_eq nullptr
    operator or or_eq private protected public register reinterpret_cast requires return short signed
    sizeof static static_assert static_cast struct switch template this thread_local throw true try
    typedef typeid typename union unsigned using virtual void volatile wchar_t while xor xor_eq
    final override import module restrict
""".split())

# Names the generated C++ declares or refers to unqualified (emit.py, microkernel.py, flatrows.py,
# attention.py, layout.py, dialect.py, source.py), the types and lower-case macros of the headers
# it includes. Keep in step with the emitters: a tensor named like one of these is renamed.
CPP_RUNTIME = frozenset("""
    scratch scratch_all mu nv bf uu vv vacc row q g lane_lo lane_hi m_ l_ o_ p_ n_ j_ r e o p n ix mx
    shift scale part total lid tid item h lm err err_ failed ins outs arena far threads dev_arena dst src masks lanes
    std sycl int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t ptrdiff_t
    intptr_t uintptr_t max_align_t nullptr_t offsetof errno assert isnan isinf isfinite isnormal signbit
    fpclassify isgreater isgreaterequal isless islessequal islessgreater isunordered stdin stdout stderr
    linux unix i386 main
""".split())
# index families of the emitters: lo0 hi0 rlo0 rhi0 t0 i0 b0 a0 acc0 w0 (attention), tgm0
# (mask tables), e0 and a0_1 (elementwise chains); the helpers' and entry's tg_ and TG_ names,
# kernel functions, reserved spellings
_CPP_FAMILIES = re.compile(r"(?:lo|hi|rlo|rhi|t|i|b|a|acc|w|l|e)\d+|a\d+_\d+|tg_\w*|TG_\w*|tgm\d*|kernel_\w*|_\w*|"
                           r"\w*__\w*")


def kernel_functions(program: Program) -> dict[str, str]:
    """Kernel name -> its function, `kernel_<name>` (distinct for distinct kernels; C++ and Triton)."""
    functions: dict[str, str] = {}
    taken: set[str] = set()
    for kernel in program.kernels:
        stem = f"kernel_{identifier(kernel.name, 'k')}"
        name, n = stem, 2
        while name in taken:
            name, n = f"{stem}_{n}", n + 1
        taken.add(name)
        functions[kernel.name] = name
    return functions


def cpp_reserved(name: str) -> bool:
    """Whether a tensor may not be called `name` in generated C++: a keyword, one of the generated
    code's own names, or spelled like a macro (no lower-case letter)."""
    return (name in CPP_KEYWORDS or name in CPP_RUNTIME or bool(_CPP_FAMILIES.fullmatch(name))
            or (len(name) > 1 and not any(c.islower() for c in name)))


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
