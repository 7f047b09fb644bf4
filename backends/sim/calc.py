"""SCALE-Sim's CALC memory interface applied to one kernel's moves: which bytes take time and which do not.

In CALC bandwidth mode SCALE-Sim gives every operand SRAM the DRAM bandwidth it needs never to
stall the array, and only two transfers show in its cycle count: (1) before compute, each read
operand (ifmap, filter) fills the active half of its SRAM, or less when the operand is smaller,
on its own port; (2) after compute, the ofmap SRAM drains what is left in it: writes collect in
its active half and every full half drains while the array runs. Here, per kernel: the first
min(bytes, half an operand SRAM) of each loaded tensor become timed loads of step 0, the rest of
its loads stay where they were, untimed; of the kernel's stores (results, partial sums, spills),
the last `remainder` bytes, 1 to half an operand SRAM, become timed stores after the last step,
the others stay where they were, untimed. Every byte still counts as DRAM traffic.
"""
from __future__ import annotations

import dataclasses
from typing import Protocol

from tilegraph.ir.accel import Accelerator

from .moves import Move


class _Step(Protocol):
    loads: list[Move]
    stores: list[Move]


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
    half = max(1, accel.operand_sram_bytes // 2)
    fill_left: dict[str, int] = {}
    fills: list[Move] = []
    for step in steps:
        rest = []
        for move in step.loads:
            take = min(fill_left.setdefault(move.tensor, half), move.bytes)
            fill_left[move.tensor] -= take
            if take:
                fills.append(dataclasses.replace(move, bytes=take, timed=True))
            if move.bytes > take:
                rest.append(dataclasses.replace(move, bytes=move.bytes - take, timed=False))
        step.loads = rest
    steps[0].loads = _merged(fills) + steps[0].loads
    left = drain_remainder(sum(m.bytes for step in steps for m in step.stores), half)
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
