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
operands stream through: each array operand is fetched as often as SCALE-Sim's buffer fetches it
in its dataflow's order (`demand.operand_reads`), which `operand_moves` puts in place of the
kernel's loads of it; `result_moves` writes each result once, as SCALE-Sim's ofmap buffer does.
"""
from __future__ import annotations

from typing import Protocol

from tilegraph.ir.accel import Accelerator
from tilegraph.ir.program import Kernel

from .demand import operand_reads
from .moves import Move
from .workload import runs_on_array


class _Step(Protocol):
    loads: list[Move]
    stores: list[Move]


def active_bytes(accel: Accelerator) -> int:
    """The active half of one operand SRAM, in whole bursts: the most one fill moves, the most an
    operand can keep on chip between passes."""
    half = accel.operand_sram_bytes // 2
    return max(accel.dma_burst_bytes, half - half % accel.dma_burst_bytes)


def operand_moves(kernel: Kernel, moves: list[Move], accel: Accelerator, streamed: frozenset[str]) -> list[Move]:
    """The kernel's loads with every array operand read as SCALE-Sim's buffers fetch it (`demand`).

    A streamed operand's tile traffic is replaced by what the buffer fetches: its compulsory bytes
    up to that, the rest as re-reads. An operand loaded here whole is fetched as the buffer says:
    fewer bytes when windows skip words (a strided 1x1 conv), re-reads beyond it otherwise; one the
    plan keeps resident is re-read beyond one pass. Re-reads count as streamed traffic.
    """
    inputs = {v.name: v for v in kernel.inputs}
    fetched: dict[str, int] = {}
    for node in kernel.nodes:
        if not runs_on_array(node):
            continue
        word = node.inputs[0].type.nbytes // max(1, node.inputs[0].type.numel)
        words = operand_reads(node, accel.pe_rows, accel.pe_cols, accel.dataflow, active_bytes(accel) // word)
        for value, count in zip(node.inputs[:2], words):
            if value.name in inputs:
                size = count * (value.type.nbytes // max(1, value.type.numel))
                fetched[value.name] = fetched.get(value.name, 0) + size
    if not fetched:
        return moves
    out = [m for m in moves if not (m.tensor in fetched and (m.compulsory or m.tensor in streamed))]
    for tensor, size in fetched.items():
        loaded = [m for m in moves if m.tensor == tensor and m.compulsory]
        first = sum(m.bytes for m in loaded) if loaded or tensor in streamed else inputs[tensor].type.nbytes
        if loaded:
            out += _scaled(loaded, min(size, first))
        if size > first:
            out.append(Move(tensor, size - first, streamed=True))
    return out


def _scaled(moves: list[Move], total: int) -> list[Move]:
    """`moves` (of one tensor) shrunk in proportion so that their bytes add up to `total`."""
    have = sum(m.bytes for m in moves)
    if have == total or have == 0:
        return list(moves)
    out, done = [], 0
    for i, m in enumerate(moves):
        size = total - done if i == len(moves) - 1 else m.bytes * total // have
        out.append(m.sized(size))
        done += size
    return out


def result_moves(kernel: Kernel, moves: list[Move]) -> list[Move]:
    """The kernel's stores with each of its results written once, as SCALE-Sim's ofmap buffer
    does: the tile traffic of a streamed result (partial tiles of a split reduction stored and
    stored again) becomes one write of the result; other stores (spills) stay."""
    outputs = {v.name: v for v in kernel.outputs}
    mine = [m for m in moves if m.tensor in outputs and not m.psum]
    if not mine:
        return moves
    out = [m for m in moves if m not in mine]
    for name, value in outputs.items():
        wrote = [m for m in mine if m.tensor == name]
        if not wrote:
            continue
        compulsory = sum(m.bytes for m in wrote if m.compulsory)
        once = min(value.type.nbytes, sum(m.bytes for m in wrote))
        if compulsory:
            out.append(Move(name, min(compulsory, once), compulsory=True))
        if once > compulsory:
            out.append(Move(name, once - compulsory, streamed=any(m.streamed for m in wrote)))
    return out


def drain_remainder(written: int, half: int) -> int:
    """Bytes still in the ofmap SRAM after compute: `written` minus the full halves drained before."""
    return written - half * ((written - 1) // half) if written > 0 else 0


def _merged(moves: list[Move]) -> list[Move]:
    """Moves of the same tensor and category as one (one transfer, as SCALE-Sim's single fill or drain)."""
    out: dict[tuple, Move] = {}
    for m in moves:
        key = (m.tensor, m.compulsory, m.streamed, m.psum)
        out[key] = out[key].sized(out[key].bytes + m.bytes) if key in out else m
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
                    fills.append(move.sized(take, timed=True))
                if move.bytes > take:
                    rest.append(move.sized(move.bytes - take, timed=False))
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
                drained.append(move.sized(take, timed=True))
            if move.bytes > take:
                rest.append(move.sized(move.bytes - take, timed=False))
        step.stores = rest[::-1]
    steps[-1].stores += _merged(drained[::-1])
