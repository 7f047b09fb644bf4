"""How generated code reaches a tensor inside a kernel: global buffers and per-tile local buffers.

A kernel's inputs and outputs are global row-major buffers indexed by the full affine map. Values
that stay inside a kernel live in the thread's scratch, sized for one tile: fusion guarantees a
tile only reads what the same tile wrote, through the same index expressions, so a local buffer
spans, per axis, what the producer's map covers over one tile, offset by the tile's origin.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tilegraph.ir.graph import Value
from tilegraph.ir.structured import AffineExpr, AffineMap

from tilegraph.ir.types import DType

from .names import c_type, init_literal, storage_bytes

def store(value: Value, expr: str) -> str:
    """`expr` converted to the value's storage (bf16 rounds to nearest even)."""
    dtype = value.type.dtype
    if dtype is DType.bf16:
        return f"tg_bf16((float)({expr}))"
    return f"static_cast<{c_type(dtype)}>({expr})"


Var = Callable[[int], str]  # kernel loop -> the C expression of its index at the current point


def affine_text(coeffs: dict[int, int], const: int, var: Var, base: dict[int, str] | None = None) -> str:
    """`sum c_k * (var_k - base_k) + const` as C, terms in loop order."""
    parts = []
    for k in sorted(coeffs):
        c = coeffs[k]
        if not c:
            continue
        index = var(k) if base is None or base.get(k, "0") == "0" else f"({var(k)} - {base[k]})"
        parts.append(index if c == 1 else f"{c} * {index}")
    if const or not parts:
        parts.append(str(const))
    return " + ".join(parts)


def row_major_strides(shape: tuple[int, ...]) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return strides[::-1]


def linear(amap: AffineMap, strides: list[int]) -> tuple[dict[int, int], int]:
    """Coefficients per kernel loop and the constant of `sum_a strides[a] * expr_a`."""
    coeffs: dict[int, int] = {}
    const = 0
    for expr, stride in zip(amap.exprs, strides):
        const += expr.const * stride
        for d, c in expr.terms:
            coeffs[d] = coeffs.get(d, 0) + c * stride
    return coeffs, const


@dataclass
class GlobalBuffer:
    """A kernel parameter: the whole tensor, row-major."""

    value: Value
    ptr: str

    def element(self, amap: AffineMap, var: Var, extents: tuple[int, ...]) -> str:
        """The element a (kernel-loop) map selects; reads outside give the map's pad."""
        access = self.lvalue(amap, var)
        checks = self.checks(amap, var, extents)
        if checks is None:
            return access
        dtype = self.value.type.dtype
        return f"(({checks}) ? {access} : {init_literal(amap.pad, dtype)})"

    def bounds(self, amap: AffineMap, extents: tuple[int, ...]) -> list[tuple[AffineExpr, int, bool, bool]]:
        """The axes a padded map can leave: (index expression, axis size, may go below 0, may reach
        the size); empty when the map never reads outside."""
        if amap.pad is None:
            return []
        out = []
        for expr, size in zip(amap.exprs, self.value.type.shape):
            lo, hi = expr.range(extents)
            if lo < 0 or hi >= size:
                out.append((expr, size, lo < 0, hi >= size))
        return out

    def checks(self, amap: AffineMap, var: Var, extents: tuple[int, ...]) -> str | None:
        """The C condition that a padded map reads inside the tensor (None: always inside)."""
        checks = []
        for expr, size, below, above in self.bounds(amap, extents):
            text = affine_text(dict(expr.terms), expr.const, var)
            if below:
                checks.append(f"({text}) >= 0")
            if above:
                checks.append(f"({text}) < {size}")
        return " && ".join(checks) if checks else None

    def lvalue(self, amap: AffineMap, var: Var) -> str:
        coeffs, const = linear(amap, row_major_strides(self.value.type.shape))
        return f"{self.ptr}[{affine_text(coeffs, const, var)}]"


@dataclass
class LocalBuffer:
    """A value kept inside the kernel: one tile's footprint of the producer's map, in scratch.

    `sizes[k]` is the largest range of kernel loop k in one tile, `base[k]` the C expression of the
    tile's first index of loop k ("0" for whole loops).
    """

    value: Value
    ptr: str
    spans: tuple[int, ...]
    offsets: tuple[int, ...]  # per axis: added so that negative coefficients stay in range
    base: dict[int, str]
    offset: int = 0  # byte offset in the scratch block

    @staticmethod
    def for_map(value: Value, ptr: str, amap: AffineMap, sizes: dict[int, int], base: dict[int, str]) -> LocalBuffer:
        spans, offsets = [], []
        for expr in amap.exprs:
            lo = sum(c * (sizes[d] - 1) for d, c in expr.terms if c < 0)
            hi = sum(c * (sizes[d] - 1) for d, c in expr.terms if c > 0)
            spans.append(hi - lo + 1)
            offsets.append(-lo)
        return LocalBuffer(value, ptr, tuple(spans), tuple(offsets), dict(base))

    @property
    def elements(self) -> int:
        n = 1
        for s in self.spans:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.elements * storage_bytes(self.value.type.dtype)

    def _index(self, amap: AffineMap, var: Var) -> str:
        strides = row_major_strides(self.spans)
        coeffs, const = {}, 0
        for expr, stride, off in zip(amap.exprs, strides, self.offsets):
            const += off * stride
            for d, c in expr.terms:
                coeffs[d] = coeffs.get(d, 0) + c * stride
        return affine_text(coeffs, const, var, self.base)

    def element(self, amap: AffineMap, var: Var, extents: tuple[int, ...]) -> str:
        return f"{self.ptr}[{self._index(amap, var)}]"

    def bounds(self, amap: AffineMap, extents: tuple[int, ...]) -> list:
        return []

    def checks(self, amap: AffineMap, var: Var, extents: tuple[int, ...]) -> str | None:
        return None

    def lvalue(self, amap: AffineMap, var: Var) -> str:
        return f"{self.ptr}[{self._index(amap, var)}]"

    def declaration(self) -> str:
        ctype = c_type(self.value.type.dtype)
        return f"{ctype}* __restrict__ {self.ptr} = reinterpret_cast<{ctype}*>(scratch + {self.offset});"


@dataclass
class ConstantBuffer:
    """The result of a `constant` node computed at load time: every read is its literal, so the
    compiler sees the value (pow(x, 3) becomes x * x * x, scales fold into the arithmetic)."""

    value: Value
    literal: str

    def element(self, amap: AffineMap, var: Var, extents: tuple[int, ...]) -> str:
        return self.literal

    def bounds(self, amap: AffineMap, extents: tuple[int, ...]) -> list:
        return []

    def checks(self, amap: AffineMap, var: Var, extents: tuple[int, ...]) -> str | None:
        return None

    @staticmethod
    def of(value: Value) -> ConstantBuffer | None:
        """The buffer for `value` when a `constant` node of a dtype C computes exactly makes it."""
        node = value.producer
        dtype = value.type.dtype
        if node is None or node.op != "constant" or dtype in (DType.bf16, DType.f16):
            return None
        return ConstantBuffer(value, init_literal(node.attrs["value"], dtype))


Buffer = GlobalBuffer | LocalBuffer | ConstantBuffer


def loops_read(buf: Buffer, amap: AffineMap) -> set[int]:
    """The kernel loops a read through `amap` moves with (none for a literal constant)."""
    if isinstance(buf, ConstantBuffer):
        return set()
    return {d for e in amap.exprs for d, _ in e.terms}


def element_steps(buf: Buffer, amap: AffineMap) -> dict[int, int]:
    """Elements of `buf`'s storage a read through `amap` advances per step of each loop."""
    pack = getattr(buf, "pack", None)  # a repacked input (conv.PackedBuffer)
    if pack is not None:
        return pack.steps(amap)
    shape = buf.spans if isinstance(buf, LocalBuffer) else buf.value.type.shape
    return linear(amap, row_major_strides(shape))[0]
