"""The solvers' own form of a plan, and its translation into an `ir.MemoryPlan`.

For a fixed order, tensor `i` must be resident at its use steps `uses[i]` (its producer's step and
its consumers' steps). Between two consecutive uses it is either kept (resident, same offset) or
evicted right after the first and reloaded right before the second; holding it for part of a gap
is never better. So a plan is: per tensor, one offset per use and one keep flag per gap.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from tilegraph.ir.memory_plan import Residency, TransferEvent

from .problem import MemoryProblem, TensorKind, positions


@dataclass(frozen=True)
class Timeline:
    """Use steps of every tensor for one kernel order."""

    problem: MemoryProblem
    order: tuple[int, ...]

    @cached_property
    def pos(self) -> list[int]:
        return positions(self.order)

    @cached_property
    def uses(self) -> tuple[tuple[int, ...], ...]:
        pos = self.pos
        return tuple(tuple(sorted({pos[k] for k in users})) for users in self.problem.users)

    @property
    def steps(self) -> int:
        return len(self.order)


@dataclass(frozen=True)
class Solution:
    """Order, keep flags (per tensor, per gap between uses) and offsets (per tensor, per use)."""

    order: tuple[int, ...]
    keep: tuple[tuple[bool, ...], ...]
    offset: tuple[tuple[int, ...], ...]


def gap_cost(problem: MemoryProblem, i: int) -> int:
    """Bytes paid for each gap of tensor `i` that is not kept (the reload)."""
    return problem.sizes[i]


def store_cost(problem: MemoryProblem, i: int) -> int:
    """Bytes paid once when tensor `i` leaves the scratchpad for the first time (the spill)."""
    return 0 if problem.is_clean(i) else problem.sizes[i]


def traffic(problem: MemoryProblem, keep) -> int:
    """Non-compulsory bytes of a keep assignment."""
    total = 0
    for i, flags in enumerate(keep):
        evictions = sum(1 for f in flags if not f)
        if evictions:
            total += evictions * gap_cost(problem, i) + store_cost(problem, i)
    return total


def compulsory(problem: MemoryProblem) -> int:
    """First loads of inputs and weights, and stores of graph outputs."""
    return sum(s for i, s in enumerate(problem.sizes)
               if problem.users[i] and (problem.kinds[i] is not TensorKind.INTERMEDIATE or problem.is_output[i]))


def blocks(timeline: Timeline, sol: Solution) -> list[tuple[int, int, int, int]]:
    """(tensor, start, end, offset) for every residency, by tensor then start."""
    out = []
    for i, uses in enumerate(timeline.uses):
        if not uses:
            continue
        start = 0
        for j in range(len(uses)):
            last = j == len(uses) - 1
            if last or not sol.keep[i][j]:
                out.append((i, uses[start], uses[j], sol.offset[i][start]))
                start = j + 1
    return out


def from_blocks(timeline: Timeline, spans: list[tuple[int, int, int, int]]) -> Solution:
    """Keep flags and offsets from residencies (tensor, start, end, offset) covering every use."""
    by_tensor: dict[int, list[tuple[int, int, int]]] = {}
    for i, start, end, off in spans:
        by_tensor.setdefault(i, []).append((start, end, off))
    keep, offset = [], []
    for i, uses in enumerate(timeline.uses):
        spans_i = sorted(by_tensor.get(i, []))
        where = []
        for u in uses:
            idx = next((b for b, (s, e, _) in enumerate(spans_i) if s <= u <= e), None)
            if idx is None:
                raise ValueError(f"tensor {timeline.problem.tensor_names[i]} not resident at its use step {u}")
            where.append(idx)
        keep.append(tuple(where[j] == where[j + 1] for j in range(len(uses) - 1)))
        offset.append(tuple(spans_i[b][2] for b in where))
    return Solution(timeline.order, tuple(keep), tuple(offset))


def to_plan_parts(timeline: Timeline, sol: Solution) -> tuple[tuple[Residency, ...], tuple[TransferEvent, ...]]:
    """Residencies and transfer events, named, for an `ir.MemoryPlan`."""
    problem = timeline.problem
    names, sizes = problem.tensor_names, problem.sizes
    residencies, events = [], []
    first_block: dict[int, bool] = {}
    for i, start, end, off in blocks(timeline, sol):
        name, size = names[i], sizes[i]
        residencies.append(Residency(name, start, end, off, size))
        first = i not in first_block
        first_block[i] = True
        if problem.kinds[i] is TensorKind.INTERMEDIATE:
            if first:
                if problem.is_output[i]:
                    events.append(TransferEvent(start, "store", name, size, True))
                elif len(timeline.uses[i]) > 1 and not all(sol.keep[i]):
                    events.append(TransferEvent(end, "store", name, size, False))
            else:
                events.append(TransferEvent(start, "load", name, size, False))
        else:
            events.append(TransferEvent(start, "load", name, size, first))
    return tuple(residencies), tuple(events)
