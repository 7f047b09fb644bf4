"""Local search over device assignments, each candidate decoded by the list scheduler.

A solution is (device per task, device per parameter); decoding list-schedules it with the
current start times as priorities, so an unchanged assignment decodes to about the same
schedule (a task moves to another device only where memory forbids its own). Moves target the critical chain (the tasks, transfers and waits that set the
makespan): move one task of the chain to another device, move a run of consecutive chain tasks
sharing a device, or move a parameter to its reader's device. The first improving move is
taken; when none improves, a seeded random kick perturbs the best solution (iterated local
search). Every decoded schedule is valid by construction of the engine. Work is counted in
tasks placed, a deterministic measure, so a run with the same budget gives the same answer.
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence

from .listsched import Stuck, best_device, list_schedule
from .problem import PlacementProblem, Schedule


def decode(pb: PlacementProblem, assign: Sequence[int], params: dict[int, int],
           priority: Sequence[float], method: str = "local") -> tuple[Schedule | None, int]:
    """The schedule of an assignment (a task goes elsewhere only where memory forbids its device),
    and the work done: the number of tasks placed, also when memory leaves the decoder stuck."""
    def choose(engine, i):
        q = assign[i]
        res = engine.evaluate(i, q)
        if res is not None:
            return res[1], q, res
        return best_device(engine, i, pb.capable[i])

    try:
        return list_schedule(pb, priority, method, choose=choose, param_pref=params), pb.n
    except Stuck as stuck:
        return None, stuck.placed + 1


def critical_chain(pb: PlacementProblem, sched: Schedule) -> list[int]:
    """Tasks on a chain of tight dependences (data, transfer, device order) ending at the makespan."""
    m = pb.m
    by_device: dict[int, dict[int, int]] = {}
    for i in range(pb.n):
        by_device.setdefault(sched.device[i], {})[sched.finish[i]] = i
    arrival = {}
    for k, src, dst, st in sched.transfers:
        arrival[(k, dst)] = (st, st + pb.xfer[k][src * m + dst])
    chain: list[int] = []
    seen = set()
    if not pb.n:
        return chain
    j = max(range(pb.n), key=lambda i: (sched.finish[i], -i))
    while j is not None and j not in seen:
        seen.add(j)
        chain.append(j)
        s, q = sched.start[j], sched.device[j]
        nxt = None
        for k in pb.inputs[j]:
            t = pb.tensors[k]
            if t.producer >= 0 and sched.device[t.producer] == q and sched.finish[t.producer] == s:
                nxt = t.producer
                break
            if (k, q) in arrival and arrival[(k, q)][1] == s:
                if t.producer >= 0:
                    nxt = t.producer
                break
        if nxt is None:
            nxt = by_device.get(q, {}).get(s)
        j = nxt
    return chain[::-1]


def _priority(sched: Schedule) -> list[float]:
    return [-float(s) for s in sched.start]


def improve(pb: PlacementProblem, sched: Schedule, time_limit: float, seed: int = 0,
            progress: Callable[[str, int, int, float], None] | None = None,
            max_evals: int | None = None, lower_bound: int = 0) -> Schedule:
    """Iterated local search from `sched` for `time_limit` seconds and at most `max_evals` decodes
    worth of work (default 400 + 60 per task; work is counted in tasks placed, so decodes cut short
    by memory cost less), stopping early at `lower_bound`."""
    t0 = time.monotonic()
    rng = random.Random(seed)
    best = sched
    work = 0
    cap = 400 + 60 * pb.n if max_evals is None else min(max_evals, 400 + 60 * pb.n)
    cap *= max(pb.n, 1)

    def out_of_time() -> bool:
        return (time.monotonic() - t0 > time_limit or work >= cap or best.makespan <= lower_bound)

    def try_solution(assign, params, base: Schedule) -> Schedule | None:
        nonlocal work
        got, done = decode(pb, assign, params, _priority(base))
        work += done
        return got

    current = best
    while not out_of_time():
        improved = _descend(pb, current, try_solution, out_of_time)
        if improved is not None and improved.makespan < current.makespan:
            current = improved
            if current.makespan < best.makespan:
                best = current
                if progress:
                    progress("local", best.makespan, 0, time.monotonic() - t0)
            continue
        # no improving move: kick the best solution
        assign = list(best.device)
        chain = critical_chain(pb, best)
        for i in rng.sample(chain, min(len(chain), rng.randint(1, 3))):
            others = [p for p in pb.capable[i] if p != assign[i]]
            if others:
                assign[i] = rng.choice(others)
        kicked = try_solution(assign, dict(best.param_device), best)
        current = kicked if kicked is not None else best
    return best.renamed("local") if best is not sched else sched


def _descend(pb: PlacementProblem, cur: Schedule, try_solution, out_of_time) -> Schedule | None:
    """The first improving move around the critical chain of `cur`, or None."""
    chain = critical_chain(pb, cur)
    params = dict(cur.param_device)
    assign = list(cur.device)
    for pos, i in enumerate(chain):
        for q in pb.capable[i]:
            if q == assign[i]:
                continue
            if out_of_time():
                return None
            trial = assign.copy()
            trial[i] = q
            got = try_solution(trial, params, cur)
            if got is not None and got.makespan < cur.makespan:
                return got
            # the run of chain tasks on i's device around i, moved together
            run = [i]
            for step in (-1, 1):
                p = pos + step
                while 0 <= p < len(chain) and assign[chain[p]] == assign[i] and q in pb.capable[chain[p]]:
                    run.append(chain[p])
                    p += step
            if len(run) > 1:
                trial = assign.copy()
                for r in run:
                    trial[r] = q
                got = try_solution(trial, params, cur)
                if got is not None and got.makespan < cur.makespan:
                    return got
        for k in pb.inputs[i]:
            if k not in params:
                continue
            for p in dict.fromkeys((assign[i], pb.home) + tuple(range(pb.m))):
                if p == params[k]:
                    continue
                if out_of_time():
                    return None
                moved = dict(params)
                moved[k] = p
                got = try_solution(assign, moved, cur)
                if got is not None and got.makespan < cur.makespan:
                    return got
    return None
