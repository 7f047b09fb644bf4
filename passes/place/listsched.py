"""The list-scheduling engine shared by every heuristic: transfers on shared channels, insertion
into idle gaps, and a memory check that never lets a device overflow.

Tasks are taken one at a time (highest priority among the ready ones, or earliest start in ETF
mode) and placed on a device chosen by a policy (earliest finish, or a preferred device per
task). Placing task i on device q schedules a transfer for each input not yet on q, in the
earliest gap of its channel after the input is ready, then the task in the earliest gap of q.

Memory: a tensor's copy is "open" (assumed to stay forever) until every consumer is placed;
then its end becomes known and the copy is closed. A new copy may start at time x only if, for
all t >= x, the device's occupied bytes plus the new ones fit: a conservative test that makes
every schedule this engine returns valid, whatever is placed later.
"""
from __future__ import annotations

import heapq
from bisect import bisect_right, insort
from collections.abc import Callable, Sequence

from .problem import PlacementProblem, Schedule, make_schedule


class Stuck(Exception):
    """No device can take a task now (memory); carries the task and the device it was closest on."""

    def __init__(self, task: int, device: int, need: int, free: int) -> None:
        super().__init__(f"task {task} does not fit on device {device}: needs {need}, {free} free")
        self.task, self.device, self.need, self.free = task, device, need, free
        self.placed = 0  # tasks placed before getting stuck (work done)


class Timeline:
    """Busy intervals of one device or channel, non-overlapping and sorted."""

    __slots__ = ("starts", "ends")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def earliest(self, ready: int, dur: int, insertion: bool = True) -> int:
        """Earliest start >= ready of an idle stretch of length dur (after everything if not insertion)."""
        ends = self.ends
        if not ends:
            return ready
        if not insertion:
            return max(ready, ends[-1])
        t = ready
        starts = self.starts
        for j in range(bisect_right(ends, ready), len(starts)):
            if t + dur <= starts[j]:
                return t
            if ends[j] > t:
                t = ends[j]
        return t

    def add(self, start: int, end: int) -> None:
        """Mark [start, end) busy, merged with the intervals it touches (the same idle gaps, with
        fewer intervals for `earliest` to scan on a busy device)."""
        starts, ends = self.starts, self.ends
        j = bisect_right(starts, start)
        if j > 0 and ends[j - 1] == start:
            if j < len(starts) and starts[j] == end:
                ends[j - 1] = ends[j]
                del starts[j], ends[j]
            else:
                ends[j - 1] = end
        elif j < len(starts) and starts[j] == end:
            starts[j] = start
        else:
            starts.insert(j, start)
            ends.insert(j, end)


def earliest_with(line: Timeline, extra: list[tuple[int, int]], ready: int, dur: int) -> int:
    """Earliest gap on `line` that also avoids the tentative intervals `extra`."""
    while True:
        t = line.earliest(ready, dur)
        clash = [e for s, e in extra if s < t + dur and t < e]
        if not clash:
            return t
        ready = max(clash)


class MemoryTracker:
    """Occupied bytes of one device over time: closed copies plus open ones (assumed endless)."""

    __slots__ = ("limit", "times", "delta", "open_total")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.times: list[int] = []
        self.delta: dict[int, int] = {}
        self.open_total = 0

    def _bump(self, time: int, change: int) -> None:
        if time not in self.delta:
            insort(self.times, time)
            self.delta[time] = 0
        self.delta[time] += change

    def open(self, start: int, size: int) -> None:
        self._bump(start, size)
        self.open_total += size

    def close(self, end: int, size: int) -> None:
        self._bump(end, -size)
        self.open_total -= size

    def threshold(self, need: int, x0: int = 0) -> int | None:
        """Earliest x >= x0 with occupied(t) + need <= limit for every t >= x (None: not before a close)."""
        if need <= 0:
            return x0
        room = self.limit - need
        u = self.open_total
        if u > room:
            return None
        times, delta = self.times, self.delta
        for j in range(len(times) - 1, -1, -1):
            if u > room:
                return max(x0, times[j + 1])
            b = times[j]
            if b <= x0:
                return x0
            u -= delta[b]
        return x0 if u <= room else max(x0, times[0])

    def free_at_end(self) -> int:
        return self.limit - self.open_total


class Engine:
    """Incremental list scheduler over one problem; `place(i, q, result)` commits task i to device q.

    A parameter's device is decided when its first reader is placed: its preferred device
    (`param_pref`), else the reader's device, else home, whichever can hold it for the whole run.
    """

    def __init__(self, problem: PlacementProblem, insertion: bool = True, memory: bool = True,
                 param_pref: dict[int, int] | None = None, stream: bool = False) -> None:
        self.pb = problem
        self.insertion = insertion
        n, m = problem.n, problem.m
        self.dev = [Timeline() for _ in range(m)]
        self.chan = [Timeline() for _ in problem.channels]
        self.mem: list[MemoryTracker | None] = [
            MemoryTracker(problem.capacity[p] - problem.baseline[p])
            if memory and problem.memory_limited[p] else None for p in range(m)]
        self.param_pref = param_pref or {}
        self.stream = stream
        self.param_dev: dict[int, int] = {}
        self.device = [-1] * n
        self.start = [0] * n
        self.finish = [0] * n
        self.copies: dict[tuple[int, int], int] = {}  # (tensor, device) -> arrival
        self.transfers: list[tuple[int, int, int, int]] = []
        self.remaining = [len(t.consumers) for t in problem.tensors]
        self.local_end: dict[tuple[int, int], int] = {}
        self.open_copies: dict[int, list[tuple[int, int]]] = {}  # tensor -> [(device, start)]
        self.placed = 0

    def origin(self, k: int) -> tuple[int | None, int]:
        """(device, ready time) of tensor k's original; device None for an undecided parameter."""
        t = self.pb.tensors[k]
        if t.producer >= 0:
            return self.device[t.producer], self.finish[t.producer]
        if t.movable:
            return self.param_dev.get(k), 0
        return self.pb.home, 0

    def _free(self, p: int) -> int:
        tracker = self.mem[p]
        return 1 << 62 if tracker is None else tracker.free_at_end()

    def _fits_always(self, p: int, nbytes: int) -> bool:
        tracker = self.mem[p]
        return tracker is None or tracker.threshold(nbytes, 0) == 0

    def need(self, i: int, q: int) -> int:
        """Bytes that placing task i on q adds to q (outputs and copies of inputs not there yet)."""
        pb = self.pb
        need = sum(pb.tensors[k].size for k in pb.outputs[i])
        for k in pb.inputs[i]:
            src, _ = self.origin(k)
            if src != q and (k, q) not in self.copies:
                need += pb.tensors[k].size
        return need

    # ----- evaluation ---------------------------------------------------------------------------
    def evaluate(self, i: int, q: int, floor: int = 0):
        """(start, finish, planned transfers, new parameter devices) of task i on device q, or None
        when memory forbids it now."""
        pb = self.pb
        m = pb.m
        new_params: dict[int, int] = {}
        preload: dict[int, int] = {}
        for k in pb.inputs[i]:
            t = pb.tensors[k]
            if t.movable and t.producer < 0 and k not in self.param_dev:
                pref = self.param_pref.get(k)
                if pref is not None:
                    order = (pref, q, pb.home)
                elif self.stream:  # keep memory-limited devices free: hold it where memory is plentiful
                    order = tuple(sorted(range(pb.m), key=lambda p: (-self._free(p), p != pb.home))) + (q,)
                else:
                    order = (q, pb.home)
                for loc in dict.fromkeys(order):
                    if self._fits_always(loc, preload.get(loc, 0) + t.size):
                        new_params[k] = loc
                        preload[loc] = preload.get(loc, 0) + t.size
                        break
                else:
                    return None
        need = sum(pb.tensors[k].size for k in pb.outputs[i])
        ready = floor
        pending = []
        for k in pb.inputs[i]:
            src, avail = self.origin(k)
            if src is None:
                src = new_params[k]
            if src == q:
                ready = max(ready, avail)
            elif (k, q) in self.copies:
                ready = max(ready, self.copies[(k, q)])
            else:
                pending.append((avail, k, src))
                need += pb.tensors[k].size
        x = floor
        tracker = self.mem[q]
        if tracker is not None:
            x = tracker.threshold(preload.get(q, 0) + need, floor)
            if x is None:
                return None
            ready = max(ready, x)
        plan: list[tuple[int, int, int, int, int]] = []
        extra: dict[int, list[tuple[int, int]]] = {}
        pending.sort()
        for avail, k, src in pending:
            ch = pb.route[src][q]
            dur = pb.xfer[k][src * m + q]
            lst = extra.setdefault(ch, [])
            ts = earliest_with(self.chan[ch], lst, max(avail, x), dur) if lst else \
                self.chan[ch].earliest(max(avail, x), dur)
            lst.append((ts, ts + dur))
            plan.append((k, src, ch, ts, dur))
            ready = max(ready, ts + dur)
        d = pb.duration[i][q]
        s = self.dev[q].earliest(ready, d, self.insertion)
        return s, s + d, plan, new_params

    # ----- commit -------------------------------------------------------------------------------
    def place(self, i: int, q: int, result) -> None:
        pb = self.pb
        s, f, plan, new_params = result
        for k, loc in new_params.items():
            self.param_dev[k] = loc
            if self.mem[loc] is not None and pb.tensors[k].size:
                self.mem[loc].open(0, pb.tensors[k].size)
        self.device[i], self.start[i], self.finish[i] = q, s, f
        self.dev[q].add(s, f)
        tracker = self.mem[q]
        for k, src, ch, ts, dur in plan:
            self.chan[ch].add(ts, ts + dur)
            self.copies[(k, q)] = ts + dur
            self.transfers.append((k, src, q, ts))
            key = (k, src)
            self.local_end[key] = max(self.local_end.get(key, 0), ts + dur)
            if tracker is not None and pb.tensors[k].size:
                tracker.open(ts, pb.tensors[k].size)
                self.open_copies.setdefault(k, []).append((q, ts))
        for k in pb.outputs[i]:
            t = pb.tensors[k]
            self.local_end[(k, q)] = f
            if tracker is not None and t.size:
                tracker.open(s, t.size)
                self.open_copies.setdefault(k, []).append((q, s))
            if not t.consumers:
                self._close(k)
        for k in pb.inputs[i]:
            key = (k, q)
            self.local_end[key] = max(self.local_end.get(key, 0), f)
            self.remaining[k] -= 1
            if self.remaining[k] == 0:
                self._close(k)
        self.placed += 1

    def _close(self, k: int) -> None:
        t = self.pb.tensors[k]
        for p, _start in self.open_copies.pop(k, ()):
            if t.output and t.producer >= 0 and p == self.device[t.producer]:
                continue  # graph outputs stay until the end
            self.mem[p].close(self.local_end.get((k, p), 0), t.size)

    def schedule(self, method: str) -> Schedule:
        return make_schedule(self.pb, self.device, self.start, self.transfers, method, self.param_dev)


# ----- drivers ------------------------------------------------------------------------------------

def best_device(engine: Engine, i: int, devices: Sequence[int], floor: int = 0):
    """(finish, device, result) minimising finish time over `devices`; None if memory blocks all."""
    best = None
    for q in devices:
        res = engine.evaluate(i, q, floor)
        if res is not None and (best is None or res[1] < best[0]):
            best = (res[1], q, res)
    return best


def stuck_error(engine: Engine, i: int) -> Stuck:
    pb = engine.pb
    q = max(pb.capable[i], key=lambda p: (engine.mem[p].free_at_end() if engine.mem[p] else 1 << 62))
    free = engine.mem[q].free_at_end() if engine.mem[q] else 0
    return Stuck(i, q, engine.need(i, q), free)


def list_schedule(problem: PlacementProblem, priority: Sequence[float], method: str, *,
                  choose: Callable[[Engine, int], tuple | None] | None = None,
                  insertion: bool = True, memory: bool = True,
                  param_pref: dict[int, int] | None = None, stream: bool = False) -> Schedule:
    """Place ready tasks highest priority first; `choose(engine, i)` picks (finish, device, result).

    The default choice is the earliest finish over the devices able to run the task. Parameters go
    to their reader's device, or with `stream` to the device with the most free memory (streamed to
    readers elsewhere). Raises Stuck when memory leaves no device for the next task.
    """
    pb = problem
    engine = Engine(pb, insertion, memory, param_pref, stream)
    choose = choose or (lambda e, i: best_device(e, i, pb.capable[i]))
    waiting = [len(p) for p in pb.preds]
    heap = [(-priority[i], i) for i in range(pb.n) if waiting[i] == 0]
    heapq.heapify(heap)
    while heap:
        _, i = heapq.heappop(heap)
        pick = choose(engine, i)
        if pick is None:
            stuck = stuck_error(engine, i)
            stuck.placed = engine.placed
            raise stuck
        engine.place(i, pick[1], pick[2])
        for j in pb.succs[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(heap, (-priority[j], j))
    return engine.schedule(method)


def etf_schedule(problem: PlacementProblem, priority: Sequence[float], method: str, *,
                 width: int = 12, insertion: bool = True, memory: bool = True) -> Schedule:
    """Earliest-task-first: among the `width` highest-priority ready tasks, place the (task, device)
    pair that can start earliest (ties: higher priority). Memory-aware as m-ETF in Baechi."""
    pb = problem
    engine = Engine(pb, insertion, memory)
    waiting = [len(p) for p in pb.preds]
    ready = [(-priority[i], i) for i in range(pb.n) if waiting[i] == 0]
    heapq.heapify(ready)
    while ready:
        top = heapq.nsmallest(width, ready)
        best = None
        for rank, (negp, i) in enumerate(top):
            for q in pb.capable[i]:
                res = engine.evaluate(i, q)
                if res is None:
                    continue
                key = (res[0], res[1], rank)
                if best is None or key < best[0]:
                    best = (key, i, q, res)
        if best is None:
            raise stuck_error(engine, top[0][1])
        _, i, q, res = best
        ready.remove((-priority[i], i))
        heapq.heapify(ready)
        engine.place(i, q, res)
        for j in pb.succs[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, (-priority[j], j))
    return engine.schedule(method)
