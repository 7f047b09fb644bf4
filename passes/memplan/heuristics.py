"""TFLite-style baselines: an eviction policy on bytes, then address placement with repair.

Two ways to a plan for a given order, both always valid when the capacity is at least the largest
working set:
- `offline`: a capacity-only simulation (Belady or knapsack-greedy eviction) fixes the residency
  intervals, then greedy-by-size best-fit places them (TFLite's arena planner); fails when
  fragmentation leaves no room.
- `online`: the same policies step by step with best-fit addresses, evicting more when the
  free bytes are fragmented (the repair step), never failing.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from .problem import MemoryProblem
from .solution import Solution, Timeline, from_blocks, store_cost, traffic

POLICIES = ("belady", "greedy")


@dataclass(frozen=True)
class HeuristicPlan:
    name: str  # e.g. "program/belady/offline"
    solution: Solution
    traffic: int


def _next_use(uses: tuple[int, ...], t: int) -> int:
    j = bisect.bisect_left(uses, t)
    return uses[j] if j < len(uses) else 1 << 60


def _last_use_before(uses: tuple[int, ...], t: int) -> int:
    j = bisect.bisect_left(uses, t)
    return uses[j - 1]


def _choose_victims(problem: MemoryProblem, tl: Timeline, candidates: list[int], need: int, t: int,
                    policy: str, dirty: set[int]) -> list[int]:
    """Tensors to evict, freeing at least `need` bytes (as many as possible if they cannot)."""
    sizes = problem.sizes
    if policy == "belady":
        ranked = sorted(candidates, key=lambda i: (-_next_use(tl.uses[i], t), -sizes[i], i))
    else:  # knapsack-greedy on bytes: cheapest bytes first (clean before dirty), big first
        def per_byte(i: int) -> int:
            return 1 + (1 if (i in dirty and store_cost(problem, i)) else 0)
        ranked = sorted(candidates, key=lambda i: (per_byte(i), -sizes[i], -_next_use(tl.uses[i], t), i))
    chosen, freed = [], 0
    for i in ranked:
        if freed >= need:
            break
        chosen.append(i)
        freed += sizes[i]
    if policy != "belady" and freed >= need:  # drop victims the others already cover, costliest first
        for i in sorted(chosen, key=lambda i: -sizes[i]):
            if freed - sizes[i] >= need:
                chosen.remove(i)
                freed -= sizes[i]
    return chosen


def capacity_keep(problem: MemoryProblem, order: tuple[int, ...], capacity: int, policy: str) -> tuple:
    """Keep flags from a bytes-only simulation of `policy` (no addresses)."""
    tl = Timeline(problem, order)
    keep = [list([True] * max(0, len(u) - 1)) for u in tl.uses]
    resident: dict[int, None] = {}
    used = 0
    dirty = {i for i in range(problem.num_tensors) if not problem.is_clean(i)}
    for t, k in enumerate(order):
        for i in [i for i in resident if tl.uses[i][-1] < t]:
            del resident[i]
            used -= problem.sizes[i]
        for i in problem.io[k]:
            if i not in resident:
                resident[i] = None
                used += problem.sizes[i]
        if used > capacity:
            pinned = set(problem.io[k])
            victims = _choose_victims(problem, tl, [i for i in resident if i not in pinned], used - capacity, t,
                                      policy, dirty)
            for i in victims:
                del resident[i]
                used -= problem.sizes[i]
                keep[i][bisect.bisect_left(tl.uses[i], t) - 1] = False
                dirty.discard(i)
    return tuple(tuple(k) for k in keep)


def place_offline(problem: MemoryProblem, tl: Timeline, keep, capacity: int) -> Solution | None:
    """Greedy-by-size best-fit placement of the residencies `keep` implies; None if one does not fit."""
    spans = []
    for i, uses in enumerate(tl.uses):
        start = 0
        for j in range(len(uses)):
            if j == len(uses) - 1 or not keep[i][j]:
                spans.append((i, uses[start], uses[j]))
                start = j + 1
    spans.sort(key=lambda s: (-problem.sizes[s[0]], -(s[2] - s[1]), s[1], s[0]))
    at_step: list[list[tuple[int, int]]] = [[] for _ in range(tl.steps)]
    placed = []
    for i, start, end in spans:
        size = problem.sizes[i]
        busy = sorted({iv for t in range(start, end + 1) for iv in at_step[t]})
        best, best_gap, cursor = None, None, 0
        for lo, hi in busy + [(capacity, capacity)]:
            if lo - cursor >= size and (best_gap is None or lo - cursor < best_gap):
                best, best_gap = cursor, lo - cursor
            cursor = max(cursor, hi)
        if best is None:
            return None
        for t in range(start, end + 1):
            at_step[t].append((best, best + size))
        placed.append((i, start, end, best))
    return from_blocks(tl, placed)


def place_online(problem: MemoryProblem, order: tuple[int, ...], capacity: int, policy: str) -> Solution:
    """Step-by-step eviction and best-fit placement, evicting around a hole when bytes are fragmented."""
    tl = Timeline(problem, order)
    sizes = problem.sizes
    resident: dict[int, tuple[int, int]] = {}  # tensor -> (offset, start step)
    spans: list[tuple[int, int, int, int]] = []
    dirty = {i for i in range(problem.num_tensors) if not problem.is_clean(i)}

    def evict(i: int, t: int) -> None:
        off, start = resident.pop(i)
        spans.append((i, start, _last_use_before(tl.uses[i], t), off))
        dirty.discard(i)

    def holes() -> list[tuple[int, int]]:
        out, cursor = [], 0
        for off, end in sorted((o, o + sizes[j]) for j, (o, _) in resident.items()):
            if off > cursor:
                out.append((cursor, off))
            cursor = max(cursor, end)
        if capacity > cursor:
            out.append((cursor, capacity))
        return out

    def best_fit(size: int) -> int | None:
        fits = [(hi - lo, lo) for lo, hi in holes() if hi - lo >= size]
        return min(fits)[1] if fits else None

    for t, k in enumerate(order):
        for i in [i for i in resident if tl.uses[i][-1] < t]:
            off, start = resident.pop(i)
            spans.append((i, start, tl.uses[i][-1], off))
        pinned = set(problem.io[k])
        missing = sorted((i for i in problem.io[k] if i not in resident), key=lambda i: (-sizes[i], i))
        for i in missing:
            size = sizes[i]
            spot = best_fit(size)
            if spot is None:
                free = capacity - sum(sizes[j] for j in resident)
                if free < size:
                    for v in _choose_victims(problem, tl, [j for j in resident if j not in pinned], size - free, t,
                                             policy, dirty):
                        evict(v, t)
                spot = best_fit(size)
            if spot is None:  # repair: evict around the cheapest window
                spot = _cheapest_window(problem, tl, resident, pinned, size, capacity, t)
                if spot is not None:
                    for v in [j for j, (o, _) in resident.items() if o < spot + size and spot < o + sizes[j]]:
                        evict(v, t)
            if spot is None:
                break
            resident[i] = (spot, t)
        else:
            continue
        # fragmentation among this kernel's own operands: move them all (evict, reload packed)
        for v in list(resident):
            if resident[v][1] == t:
                del resident[v]
            else:
                evict(v, t)
        for i in sorted(problem.io[k], key=lambda i: (-sizes[i], i)):
            spot = best_fit(sizes[i])
            if spot is None:
                raise AssertionError("capacity below the working set should have been rejected")
            resident[i] = (spot, t)
    for i, (off, start) in resident.items():
        spans.append((i, start, tl.uses[i][-1], off))
    return from_blocks(tl, spans)


def _cheapest_window(problem: MemoryProblem, tl: Timeline, resident: dict[int, tuple[int, int]], pinned: set[int],
                     size: int, capacity: int, t: int) -> int | None:
    sizes = problem.sizes
    items = sorted((o, o + sizes[j], j) for j, (o, _) in resident.items())
    starts = sorted({0} | {hi for _, hi, _ in items})
    best = None
    for a in starts:
        if a + size > capacity:
            continue
        victims = [j for lo, hi, j in items if lo < a + size and a < hi]
        if any(j in pinned for j in victims):
            continue
        cost = sum(sizes[j] + (store_cost(problem, j)) for j in victims)
        key = (cost, -min((_next_use(tl.uses[j], t) for j in victims), default=1 << 60), a)
        if best is None or key < best[0]:
            best = (key, a)
    return None if best is None else best[1]


def heuristic_plans(problem: MemoryProblem, capacity: int, orders: dict[str, tuple[int, ...]],
                    policies=POLICIES) -> list[HeuristicPlan]:
    """Every (order, policy, offline/online) plan, cheapest first."""
    plans = []
    for oname, order in orders.items():
        tl = Timeline(problem, order)
        for policy in policies:
            keep = capacity_keep(problem, order, capacity, policy)
            sol = place_offline(problem, tl, keep, capacity)
            if sol is not None:
                plans.append(HeuristicPlan(f"{oname}/{policy}/offline", sol, traffic(problem, sol.keep)))
            sol = place_online(problem, order, capacity, policy)
            plans.append(HeuristicPlan(f"{oname}/{policy}/online", sol, traffic(problem, sol.keep)))
    plans.sort(key=lambda p: (p.traffic, len(p.name)))
    return plans
