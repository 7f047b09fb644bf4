"""SCALE-Sim's CALC memory interface applied to one kernel's moves: which bytes take time and which do not.

In CALC bandwidth mode SCALE-Sim gives every operand SRAM the DRAM bandwidth it needs never to
stall the array, and only two transfers show in its cycle count: (1) before compute, each read
operand (ifmap, filter) fills the active half of its SRAM, or less when the operand is smaller,
on its own port; (2) after compute, the ofmap SRAM drains what is left in it: writes collect in
its active half and every full half drains while the array runs (halves of exactly half the
SRAM: its write buffer has no sets). Here, per kernel: the first
min(bytes, half an operand SRAM) of each loaded tensor become timed loads of step 0, the rest of
its loads stay where they were, untimed; of the kernel's stores (results, partial sums, spills),
the last `remainder` bytes, 1 to half an operand SRAM, become timed stores after the last step,
the others stay where they were, untimed. Every byte still counts as DRAM traffic.

The operand SRAM's active half, in whole bursts (SCALE-Sim's sets), is also what the array's
operands stream through: an operand bigger than it is re-read in SCALE-Sim's fold order
(`array.operand_reads`), which `operand_moves` adds to the kernel's loads.
"""
from __future__ import annotations

import dataclasses
from typing import Protocol

from tilegraph.ir.accel import Accelerator
from tilegraph.ir.graph import Node
from tilegraph.ir.ops.registry import WINDOW
from tilegraph.ir.program import Kernel

from .array import operand_reads
from .moves import Move
from .workload import node_gemm, runs_on_array


class _Step(Protocol):
    loads: list[Move]
    stores: list[Move]


def active_bytes(accel: Accelerator) -> int:
    """The active half of one operand SRAM, in whole bursts: the most one fill moves, the most an
    operand can keep on chip between passes."""
    half = accel.operand_sram_bytes // 2
    return max(accel.dma_burst_bytes, half - half % accel.dma_burst_bytes)


def conv_fold_halo(node: Node, rows: int) -> int:
    """Input elements (all groups) a conv's first os row fold (`rows` output pixels, raster order)
    shares with the second: the window halo re-read when a buffer swap falls between them."""
    if node.opdef.category != WINDOW or not runs_on_array(node):
        return 0
    n, c, h, w = node.inputs[0].type.shape
    kh, kw = node.inputs[1].type.shape[2:]
    oh, ow = node.results[0].type.shape[2:]
    (sh, sw), (ph, pw), (dh, dw) = node.attrs["stride"], node.attrs["padding"], node.attrs["dilation"]

    def footprint(first: int) -> set[tuple[int, int, int]]:
        pixels = range(first, min(first + rows, n * oh * ow))
        return {(p // (oh * ow), ih, iw) for p in pixels for i in range(kh) for j in range(kw)
                for ih, iw in [((p // ow) % oh * sh - ph + i * dh, p % ow * sw - pw + j * dw)]
                if 0 <= ih < h and 0 <= iw < w}
    return len(footprint(0) & footprint(rows)) * c


def operand_moves(kernel: Kernel, moves: list[Move], accel: Accelerator, streamed: frozenset[str]) -> list[Move]:
    """The kernel's loads with every array operand read as often as SCALE-Sim's fold order needs.

    An operand the plan keeps (resident or loaded here) is read once more per extra pass; a
    streamed operand's tile traffic is replaced by its passes beyond the compulsory bytes.
    Re-reads count as streamed traffic (not compulsory, not the plan's).
    """
    inputs = {v.name: v for v in kernel.inputs}
    passes: dict[str, int] = {}
    for node in kernel.nodes:
        if not runs_on_array(node):
            continue
        a, b = node.inputs[0], node.inputs[1]
        word = a.type.nbytes // max(1, a.type.numel)
        halo = conv_fold_halo(node, accel.pe_rows) * word if accel.dataflow == "os" else 0
        reads = operand_reads(node_gemm(node), accel.pe_rows, accel.pe_cols, accel.dataflow, a.type.nbytes,
                              b.type.nbytes, active_bytes(accel), word, halo)
        for value, size in zip((a, b), reads):
            if value.name in inputs:
                passes[value.name] = passes.get(value.name, 0) + size
    if not passes:
        return moves
    kept = [m for m in moves if not (m.tensor in passes and m.tensor in streamed and not m.compulsory)]
    for tensor, size in passes.items():
        first = sum(m.bytes for m in kept if m.tensor == tensor and m.compulsory) if tensor in streamed \
            else inputs[tensor].type.nbytes
        if size > first:
            kept.append(Move(tensor, size - first, streamed=True))
    return kept


def drain_remainder(written: int, half: int) -> int:
    """Bytes still in the ofmap SRAM after compute: `written` minus the full halves drained before."""
    return written - half * ((written - 1) // half) if written > 0 else 0


def _merged(moves: list[Move]) -> list[Move]:
    """Moves of the same tensor and category as one (one transfer, as SCALE-Sim's single fill or drain)."""
    out: dict[tuple, Move] = {}
    for m in moves:
        key = (m.tensor, m.compulsory, m.streamed, m.psum)
        out[key] = dataclasses.replace(out[key], bytes=out[key].bytes + m.bytes) if key in out else m
    return list(out.values())


def calc_moves(steps: list[_Step], accel: Accelerator) -> None:
    """Re-time one kernel's steps (in place) as SCALE-Sim's CALC interface does (module docstring)."""
    fill_left: dict[str, int] = {}
    fills: list[Move] = []
    for first_pass in (True, False):  # compulsory bytes fill first, then re-reads
        for step in steps:
            rest = []
            for move in step.loads:
                if move.compulsory != first_pass:
                    rest.append(move)
                    continue
                take = min(fill_left.setdefault(move.tensor, active_bytes(accel)), move.bytes)
                fill_left[move.tensor] -= take
                if take:
                    fills.append(dataclasses.replace(move, bytes=take, timed=True))
                if move.bytes > take:
                    rest.append(dataclasses.replace(move, bytes=move.bytes - take, timed=False))
            step.loads = rest
    steps[0].loads = _merged(fills) + steps[0].loads
    written = sum(m.bytes for step in steps for m in step.stores)
    left = drain_remainder(written, max(1, accel.operand_sram_bytes // 2))
    drained: list[Move] = []
    for step in reversed(steps):
        rest = []
        for move in reversed(step.stores):
            take = min(left, move.bytes)
            left -= take
            if take:
                drained.append(dataclasses.replace(move, bytes=take, timed=True))
            if move.bytes > take:
                rest.append(dataclasses.replace(move, bytes=move.bytes - take, timed=False))
        step.stores = rest[::-1]
    steps[-1].stores += _merged(drained[::-1])
