"""Windowed large-neighbourhood search with CP-SAT, for graphs too large to solve whole.

Each step takes a window of the current schedule: the tasks that start in [T0, T1) (about
`window` of them). Those tasks may change device and time; the tasks that end before T0 stay
exactly where they are (constants); every other task keeps its device but may move in time.
CP-SAT minimises the makespan of that restricted model, warm-started from the current schedule,
so a step never makes things worse. Windows slide from the start of the schedule to its end and
around again, their size adapting (larger after an improvement, smaller after a timeout), until
the budget (deterministic time in deterministic mode) is spent.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from .cpsat import solve_cpsat
from .problem import PlacementProblem, Schedule


def windowed_lns(pb: PlacementProblem, sched: Schedule, time_limit: float, *, window: int = 40,
                 step_limit: float = 4.0, lower_bound: int = 0, seed: int = 0, deterministic: bool = True,
                 workers: int | None = None, dtime_per_second: float = 0.1,
                 progress: Callable[[str, int, int, float], None] | None = None) -> Schedule:
    """Improve `sched` by CP-SAT on sliding windows for `time_limit` seconds."""
    t0 = time.monotonic()
    best = sched
    order = sorted(range(pb.n), key=lambda i: (sched.start[i], i))
    pos = 0
    steps = 0
    while True:
        left = time_limit - (time.monotonic() - t0)
        if left < 0.5 or best.makespan <= lower_bound:
            break
        order = sorted(range(pb.n), key=lambda i: (best.start[i], i))
        if pos >= pb.n:
            pos = 0
        free = set(order[pos:pos + window])
        t_start = min(best.start[i] for i in free)
        fixed = {i: best.start[i] for i in range(pb.n) if i not in free and best.finish[i] <= t_start}
        allowed = [pb.capable[i] if i in free else (best.device[i],) for i in range(pb.n)]
        frozen_readers = {k for i in fixed for k in pb.inputs[i]}
        params = dict(best.param_device)
        param_allowed = {k: (tuple(range(pb.m)) if k not in frozen_readers and
                             any(c in free for c in pb.tensors[k].consumers) else (params[k],))
                         for k in pb.params}
        res = solve_cpsat(pb, min(step_limit, left), hint=best, lower_bound=lower_bound, allowed=allowed,
                          fixed_start=fixed, param_allowed=param_allowed, workers=workers, seed=seed + steps,
                          deterministic=deterministic, dtime_per_second=dtime_per_second, method="lns")
        steps += 1
        if res.schedule is not None and res.schedule.makespan < best.makespan:
            best = res.schedule.renamed("lns")
            window = min(int(window * 1.25) + 1, 120)
            if progress:
                progress("lns", best.makespan, lower_bound, time.monotonic() - t0)
        else:
            pos += max(1, window // 2)
            if res.schedule is None:
                window = max(10, window * 2 // 3)
    return best
