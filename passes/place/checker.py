"""An independent checker: replays a schedule and verifies every rule of the placement problem.

Written apart from the solvers (it shares only the problem's data), so a solver bug cannot hide
behind a shared helper. `violations` lists every broken rule; `check_schedule` raises on any.
`check_placement` does the same for an IR `Placement` against a Program and System.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from .problem import PlacementProblem, Schedule


class ScheduleError(AssertionError):
    """A schedule that breaks a rule of the problem (a solver bug, never a user error)."""


def violations(problem: PlacementProblem, sched: Schedule, limit: int = 50) -> list[str]:
    """Every broken rule, as messages naming tasks, tensors, devices and times (at most `limit`)."""
    out: list[str] = []
    n = problem.n

    def bad(msg: str) -> None:
        if len(out) < limit:
            out.append(msg)

    if not (len(sched.device) == len(sched.start) == len(sched.finish) == n):
        return [f"schedule has {len(sched.device)} devices/{len(sched.start)} starts for {n} tasks"]
    _check_tasks(problem, sched, bad)
    if out:
        return out
    params = _param_devices(problem, sched, bad)
    if out:
        return out

    def origin(k: int) -> int:
        t = problem.tensors[k]
        if t.producer >= 0:
            return sched.device[t.producer]
        return params[k] if t.movable else problem.home

    expected_span = max(sched.finish, default=0)
    if sched.makespan != expected_span:
        bad(f"makespan says {sched.makespan} but the last task ends at {expected_span}")
    sent = _check_transfers(problem, sched, origin, bad)
    _check_dependences(problem, sched, origin, sent, bad)
    _check_memory(problem, sched, origin, sent, max(expected_span, 1), bad)
    return out


@dataclass(frozen=True)
class _Sent:
    """The transfers as replayed: per (tensor, destination) when it leaves and arrives, per tensor when
    its last copy arrives and its destinations in schedule order."""

    arrive: dict[tuple[int, int], int]
    sent_at: dict[tuple[int, int], int]
    last_out: dict[int, int]
    dests: dict[int, list[int]]


def _check_tasks(problem: PlacementProblem, sched: Schedule, bad: Callable[[str], None]) -> None:
    """Tasks: on a device able to run them, for their duration there, never two at once on a device."""
    n, m = problem.n, problem.m
    name = problem.tasks
    per_device: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for i in range(n):
        p, s, f = sched.device[i], sched.start[i], sched.finish[i]
        if not 0 <= p < m or problem.duration[i][p] is None:
            bad(f"task {name[i]} is on device {p}, which cannot run it")
            continue
        if s < 0:
            bad(f"task {name[i]} starts before 0")
        if f - s != problem.duration[i][p]:
            bad(f"task {name[i]} on {problem.devices[p]} lasts {f - s}, not {problem.duration[i][p]}")
        per_device[p].append((s, f, i))
    for p, items in per_device.items():
        items.sort()
        for (s1, f1, a), (s2, f2, b) in zip(items, items[1:]):
            if s2 < f1:
                bad(f"tasks {name[a]} and {name[b]} overlap on {problem.devices[p]} ({s1}-{f1} and {s2}-{f2})")


def _param_devices(problem: PlacementProblem, sched: Schedule, bad: Callable[[str], None]) -> dict[int, int]:
    """The device of each parameter: exactly one valid device each, and none for other tensors."""
    m = problem.m
    params: dict[int, int] = {}
    param_set = set(problem.params)
    for k, p in sched.param_device:
        if k not in param_set:
            bad(f"tensor {k} is given a parameter device but is not a parameter anyone reads")
        elif not 0 <= p < m:
            bad(f"parameter {problem.tensors[k].name} is on an invalid device {p}")
        elif k in params:
            bad(f"parameter {problem.tensors[k].name} is given two devices")
        else:
            params[k] = p
    for k in problem.params:
        if k not in params:
            bad(f"parameter {problem.tensors[k].name} has no device")
    return params


def _check_transfers(problem: PlacementProblem, sched: Schedule, origin: Callable[[int], int],
                     bad: Callable[[str], None]) -> _Sent:
    """Transfers: from the producer's device (home for inputs), needed, unique, timed, no overlap per
    channel; what they deliver where and when, for the later checks."""
    m = problem.m
    arrive: dict[tuple[int, int], int] = {}
    sent_at: dict[tuple[int, int], int] = {}
    last_out: dict[int, int] = {}
    dests: dict[int, list[int]] = defaultdict(list)
    per_channel: dict[int, list[tuple[int, int, int, int]]] = defaultdict(list)
    for k, src, dst, start in sched.transfers:
        if not 0 <= k < len(problem.tensors):
            bad(f"transfer of unknown tensor {k}")
            continue
        t = problem.tensors[k]
        made_on = origin(k)
        ready = 0 if t.producer < 0 else sched.finish[t.producer]
        if src != made_on:
            bad(f"tensor {t.name} is sent from {problem.devices[src] if 0 <= src < m else src}, "
                f"but it is made on {problem.devices[made_on]}")
            continue
        if not 0 <= dst < m or dst == src:
            bad(f"tensor {t.name} is sent to an invalid device {dst}")
            continue
        if (k, dst) in arrive:
            bad(f"tensor {t.name} is sent to {problem.devices[dst]} twice")
        if not any(sched.device[c] == dst for c in t.consumers):
            bad(f"tensor {t.name} is sent to {problem.devices[dst]}, where no kernel reads it")
        if start < ready:
            bad(f"tensor {t.name} leaves {problem.devices[src]} at {start}, before it is ready at {ready}")
        dur = problem.xfer[k][src * m + dst]
        arrive[(k, dst)] = start + dur
        sent_at[(k, dst)] = start
        last_out[k] = max(last_out.get(k, 0), start + dur)
        dests[k].append(dst)
        per_channel[problem.route[src][dst]].append((start, start + dur, k, dst))
    for c, items in per_channel.items():
        items.sort()
        for (s1, f1, k1, _), (s2, f2, k2, _) in zip(items, items[1:]):
            if s2 < f1:
                bad(f"transfers of {problem.tensors[k1].name} and {problem.tensors[k2].name} overlap on "
                    f"channel {problem.channels[c]} ({s1}-{f1} and {s2}-{f2})")
    return _Sent(arrive, sent_at, last_out, dests)


def _check_dependences(problem: PlacementProblem, sched: Schedule, origin: Callable[[int], int], sent: _Sent,
                       bad: Callable[[str], None]) -> None:
    """Dependences: local reads after the producer ends; remote reads after the transfer arrives."""
    name = problem.tasks
    arrive = sent.arrive
    for k, t in enumerate(problem.tensors):
        made_on = origin(k)
        ready = 0 if t.producer < 0 else sched.finish[t.producer]
        for c in t.consumers:
            q = sched.device[c]
            if q == made_on:
                if sched.start[c] < ready:
                    bad(f"task {name[c]} starts at {sched.start[c]} before its input {t.name} is ready at {ready}")
            elif (k, q) not in arrive:
                bad(f"task {name[c]} on {problem.devices[q]} reads {t.name}, which is never sent there")
            elif sched.start[c] < arrive[(k, q)]:
                bad(f"task {name[c]} starts at {sched.start[c]} before {t.name} arrives on "
                    f"{problem.devices[q]} at {arrive[(k, q)]}")


def _check_memory(problem: PlacementProblem, sched: Schedule, origin: Callable[[int], int], sent: _Sent,
                  span: int, bad: Callable[[str], None]) -> None:
    """Memory: replay every tensor's residencies (where it is made until its last reader there or its
    last departure, and each copy from arrival to its last reader) and sweep each device."""
    events: dict[int, list[tuple[int, int]]] = defaultdict(list)

    def occupy(p: int, s: int, e: int, size: int) -> None:
        if size and e > s:
            events[p].append((s, size))
            events[p].append((e, -size))

    for k, t in enumerate(problem.tensors):
        made_on = origin(k)
        last: dict[int, int] = {}
        for c in t.consumers:
            q = sched.device[c]
            last[q] = max(last.get(q, 0), sched.finish[c])
        if t.producer < 0:
            if t.consumers:
                occupy(made_on, 0, span, t.size)
        else:
            end = max(sched.finish[t.producer], last.get(made_on, 0), sent.last_out.get(k, 0))
            occupy(made_on, sched.start[t.producer], span if t.output else end, t.size)
        for dst in sent.dests.get(k, ()):
            occupy(dst, sent.sent_at[(k, dst)], last.get(dst, sent.arrive[(k, dst)]), t.size)
    for p, evs in events.items():
        evs.sort()
        level = 0
        for time, delta in evs:
            level += delta
            if level > problem.capacity[p]:
                bad(f"device {problem.devices[p]} holds {level} bytes at time {time}, over its "
                    f"capacity of {problem.capacity[p]}")
                break


def check_schedule(problem: PlacementProblem, sched: Schedule) -> None:
    """Raise ScheduleError listing every broken rule; return None for a valid schedule."""
    found = violations(problem, sched)
    if found:
        listed = "\n".join(f"  - {v}" for v in found)
        raise ScheduleError(f"invalid schedule from {sched.method or 'unknown method'} "
                            f"({len(found)} problem(s)):\n{listed}")


def schedule_of_placement(problem: PlacementProblem, placement) -> Schedule:
    """Turn an IR Placement back into a Schedule of `problem` by kernel, tensor and device names."""
    tasks = {name: i for i, name in enumerate(problem.tasks)}
    devices = {name: p for p, name in enumerate(problem.devices)}
    tensors = {t.name: k for k, t in enumerate(problem.tensors)}
    device = [0] * problem.n
    start = [0] * problem.n
    finish = [0] * problem.n
    seen = set()
    for kp in placement.kernels:
        i = tasks[kp.kernel]
        seen.add(i)
        device[i], start[i], finish[i] = devices[kp.device], kp.start, kp.finish
    if len(seen) != problem.n:
        missing = [problem.tasks[i] for i in range(problem.n) if i not in seen]
        raise ScheduleError(f"placement has no device for kernel(s) {', '.join(missing[:5])}")
    transfers = tuple((tensors[t.tensor], devices[t.src], devices[t.dst], t.start) for t in placement.transfers)
    params = tuple(sorted((tensors[name], devices[dev]) for name, dev in placement.parameters))
    return Schedule(tuple(device), tuple(start), tuple(finish), transfers, placement.makespan, placement.method,
                    params)


def check_placement(program, system, placement) -> None:
    """Verify an IR Placement of `program` on `system` (rebuilding the problem at its tick)."""
    from .problem import problem_from_program

    problem = problem_from_program(program, system, tick=placement.tick)
    sched = schedule_of_placement(problem, placement)
    check_schedule(problem, sched)
    for t in placement.transfers:
        k = next(i for i, x in enumerate(problem.tensors) if x.name == t.tensor)
        p, q = problem.devices.index(t.src), problem.devices.index(t.dst)
        if problem.channels[problem.route[p][q]] != t.link or t.finish - t.start != problem.xfer[k][p * problem.m + q]:
            raise ScheduleError(f"transfer of {t.tensor} names link {t.link} or lasts {t.finish - t.start}, "
                                f"not {problem.channels[problem.route[p][q]]} for {problem.xfer[k][p * problem.m + q]}")
