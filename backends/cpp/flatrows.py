"""Register blocks flattened over two output loops (rows by columns) of stride-1 windows.

A 3x3 "same" convolution's 56-wide output rows leave 8 of a block's 64 lanes idle. When the
output and every operand read along the columns are contiguous across row ends too (stride 1,
input rows as wide as output rows), the block runs over the flat index f = row * width + column in
whole vectors. Reads outside the input (padding, the flat range's end) are per-lane masks from a
table computed here, indexed by the block and the reduction loops of the padded axes; a vector
whose mask is full is a plain load (`tg_load_masks`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .buffers import element_steps, loops_read

MAX_TABLE = 1 << 14  # mask entries per operand; larger tables fall back to row blocks


@dataclass(frozen=True)
class MaskTable:
    """Per-lane masks of one operand: `loops` (reduction loops, row-major) index it with the block."""

    name: str
    loops: tuple[int, ...]
    extents: tuple[int, ...]
    masks: tuple[int, ...]

    def index(self, nr: int, lanes: int) -> str:
        """The C index of the current block's first mask (loop variables `bf`, `i{k}`)."""
        combo, stride = [], 1
        for k, e in reversed(list(zip(self.loops, self.extents))):
            combo.append(f"i{k}" if stride == 1 else f"{stride} * i{k}")
            stride *= e
        combo_text = " + ".join(reversed(combo)) if combo else "0"
        return f"((bf / {nr}) * {stride} + {combo_text}) * {lanes}"

    def declaration(self) -> str:
        rows = [", ".join(str(m) for m in self.masks[s:s + 24]) for s in range(0, len(self.masks), 24)]
        body = ",\n    ".join(rows)
        return f"static const uint16_t {self.name}[{len(self.masks)}] = {{\n    {body}}};"


@dataclass(frozen=True)
class FlatPlan:
    """Loop `w` (rows) folded with `v` (columns, `width` long) into `total` flat points, `nr` a block."""

    w: int
    width: int
    total: int
    nr: int
    tables: dict[int, MaskTable] = field(default_factory=dict)  # operand position -> its masks


class FlatRows:
    """Planning of flattened blocks (mixed into the register-block emitter)."""

    def _flat_plan(self, i: int, ranges: dict[int, tuple[str, str]], keep: list[int], u: int | None,
                   v: int | None, mr: int, inner: list[int]) -> FlatPlan | None:
        """The flattened block for node i, or None when rows and columns do not fold (strided,
        rows of other widths, tiled rows, no idle lanes to win, or a mask table too large)."""
        width = self.dialect.vector_width
        if not width or u is None or v is None or len(keep) < 3 or keep[-2] == u:
            return None
        w = keep[-2]
        ew, ev = self.extents[w], self.extents[v]
        full = lambda k: ranges[k] == ("0", str(self.extents[k]))  # noqa: E731
        if ev % width == 0 or not (full(w) and full(v)):
            return None
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        last = self.fused[i][-1] if i in self.fused else i  # a fused epilogue stores its last result
        stored = self.domain.nodes[last].results[0]
        out = element_steps(self.buffers[stored], self.domain.compose_map(last, self.domain.spaces[last].outputs[0]))
        if out.get(w, 0) != ev * out.get(v, 0) or out.get(v, 0) == 0:
            return None
        total = ew * ev
        nr = self._vector_nr(total, mr)
        lanes = nr // width
        tables = {}
        for n, (operand, amap) in enumerate(zip(node.inputs, space.inputs)):
            cmap = self.domain.compose_map(i, amap)
            buf = self.buffers[operand]
            used = loops_read(buf, cmap)
            if v not in used:
                if w in used:
                    return None
                continue
            coeffs = element_steps(buf, cmap)
            if coeffs.get(v) != 1 or coeffs.get(w, 0) != ev:
                return None
            bounds = buf.bounds(cmap, self.extents)
            loops = sorted({d for e, *_ in bounds for d, _ in e.terms} - {w, v})
            if any(k not in inner or not full(k) for k in loops):
                return None
            extents = tuple(self.extents[k] for k in loops)
            blocks = -(-total // nr)
            if blocks * math.prod(extents) * lanes > MAX_TABLE:
                return None
            tables[n] = MaskTable(f"tgm{n}", tuple(loops), extents,
                                  _masks(bounds, w, v, ev, total, nr, width, tuple(loops), extents))
        return FlatPlan(w, ev, total, nr, tables)

    def _vector_nr(self, span: int, mr: int) -> int:
        """Whole vectors per register block over a range of `span` (a row, or a flat range): wider
        when MR is capped below its size, so that MR x NR/W accumulators still hide the FMA
        latency, and split evenly over the range, so the masked last block wastes few lanes."""
        width = self.dialect.vector_width
        cap = max(width, self.micro.nr * max(1, self.micro.mr // mr) // width * width)
        blocks = -(-span // cap)
        per_block = -(-span // blocks)
        return -(-per_block // width) * width


def _masks(bounds, w: int, v: int, width_v: int, total: int, nr: int, vector: int,
           loops: tuple[int, ...], extents: tuple[int, ...]) -> tuple[int, ...]:
    """Bit l of entry ((block * combos + combo) * lanes + q): flat point block*nr + q*vector + l
    exists and reads inside every padded axis at that combination of `loops` values."""
    blocks = -(-total // nr)
    f = np.arange(blocks * nr, dtype=np.int64).reshape(blocks, 1, nr)
    at = {w: f // width_v, v: f % width_v}
    grids = np.meshgrid(*[np.arange(e) for e in extents], indexing="ij") if extents else []
    for k, grid in zip(loops, grids):
        at[k] = grid.reshape(1, -1, 1)
    inside = np.broadcast_to(f < total, (blocks, max(1, math.prod(extents)), nr))
    for expr, size, _, _ in bounds:
        index = expr.const + sum(c * at[d] for d, c in expr.terms)
        inside = inside & (index >= 0) & (index < size)
    bits = inside.reshape(blocks, -1, nr // vector, vector).astype(np.int64) << np.arange(vector)
    return tuple(int(m) for m in bits.sum(axis=-1).reshape(-1))
