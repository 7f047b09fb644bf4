"""Memory residency of a schedule: which tensor occupies which device when (the solvers' view).

The checker has its own, separately written replay; this module serves solvers and reports.
"""
from __future__ import annotations

from .problem import PlacementProblem, Schedule


def residencies(problem: PlacementProblem, sched: Schedule) -> list[tuple[int, int, int, int]]:
    """(tensor, device, start, end) for every resident copy with a positive size."""
    m = problem.m
    span = max(sched.makespan, 1)
    end_on: dict[tuple[int, int], int] = {}
    for k, t in enumerate(problem.tensors):
        for c in t.consumers:
            key = (k, sched.device[c])
            end_on[key] = max(end_on.get(key, 0), sched.finish[c])
    out_end: dict[int, int] = {}
    for k, src, dst, start in sched.transfers:
        out_end[k] = max(out_end.get(k, 0), start + problem.xfer[k][src * m + dst])
    result = []
    origins = sched.origins(problem)
    for k, t in enumerate(problem.tensors):
        if t.size == 0:
            continue
        if t.producer < 0:
            if t.consumers:
                result.append((k, origins[k], 0, span))
        else:
            i, p = t.producer, sched.device[t.producer]
            end = max(sched.finish[i], end_on.get((k, p), 0), out_end.get(k, 0))
            result.append((k, p, sched.start[i], span if t.output else end))
    for k, src, dst, start in sched.transfers:
        if problem.tensors[k].size:
            end = end_on.get((k, dst), start + problem.xfer[k][src * m + dst])
            result.append((k, dst, start, end))
    return result


def memory_profile(problem: PlacementProblem, sched: Schedule) -> list[list[tuple[int, int]]]:
    """Per device, the step function of occupied bytes as (time, bytes from then on)."""
    events: list[list[tuple[int, int]]] = [[] for _ in problem.devices]
    for k, p, s, e in residencies(problem, sched):
        if e > s:
            size = problem.tensors[k].size
            events[p].append((s, size))
            events[p].append((e, -size))
    profiles = []
    for evs in events:
        evs.sort()
        steps: list[tuple[int, int]] = []
        level = 0
        for time, delta in evs:
            level += delta
            if steps and steps[-1][0] == time:
                steps[-1] = (time, level)
            else:
                steps.append((time, level))
        profiles.append(steps)
    return profiles


def peak_memory(problem: PlacementProblem, sched: Schedule) -> list[int]:
    """Peak occupied bytes per device."""
    return [max((level for _, level in steps), default=0) for steps in memory_profile(problem, sched)]
