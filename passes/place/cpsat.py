"""The exact model, solved with OR-Tools CP-SAT.

- x[i,p]: task i runs on device p (an optional interval of fixed size per device; no-overlap
  per device);
- org[k,p]: tensor k starts on p (its producer's device, the parameter's device, or home);
- u[k,q]: some reader of k runs on q; tr[k,p,q] = org[k,p] and u[k,q] (p != q): a transfer, an
  optional interval on channel route[p][q] (no-overlap per channel) starting at ts[k,q] after
  the producer ends; a reader on q starts after it arrives;
- memory: per device, a cumulative over the producer's copy [s_i, r) (r after local readers,
  outgoing transfers, and the makespan for graph outputs), the copies [ts, c) (c after the
  readers there) and the parameters held throughout;
- minimise the makespan, with the lower bound and the incumbent as its domain, warm-started with
  the incumbent as a complete hint.

`allowed` and `fixed_start` restrict the model for large-neighbourhood search (the tasks outside
a window keep their device). Determinism: with `deterministic` the solver runs with a fixed seed
and its portfolio interleaved in one thread (`interleave_search`: one full search with the LP, for
the bound, and the neighbourhood searches, which improve large schedules), under a deterministic-time limit
of `dtime_per_second` units per second of the time limit; the wall-clock limit stays a hard guard
(`wall_limited` says when it fired, so the run may not be reproducible). Without `deterministic`,
`workers` threads (default: one per core, at most 8) run under the wall-clock limit.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tilegraph.passes.lazy import cp_model

from .problem import PlacementProblem, Schedule, make_schedule


@dataclass(frozen=True)
class SolveResult:
    schedule: Schedule | None
    bound: int  # the solver's proven lower bound (0 if none)
    optimal: bool
    status: str
    wall: float
    deterministic_time: float
    wall_limited: bool = False  # stopped by the wall clock rather than by work


_SLOW_SUBSOLVERS = ("fixed", "max_lp", "no_lp", "pseudo_costs", "quick_restart", "quick_restart_no_lp", "reduced_costs")


def default_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


class _Builder:
    """Builds the model; keeps the variables needed for hints and for reading a solution back."""

    def __init__(self, pb: PlacementProblem, allowed: Sequence[Sequence[int]], horizon: int,
                 fixed_start: dict[int, int] | None = None, param_allowed: dict[int, Sequence[int]] | None = None,
                 memory: bool = True) -> None:
        self.pb = pb
        self.model = cp_model.CpModel()
        self.H = horizon
        self.true = self.model.NewConstant(1)
        free = [pb.capacity[p] - pb.baseline[p] for p in range(pb.m)]  # bytes beyond each device's baseline
        # in this order: CP-SAT's search depends on the order in which variables are created
        self._tasks(allowed, fixed_start or {})
        self._origins(free, param_allowed)
        self._transfers()
        self.r: dict[tuple[int, int], object] = {}
        self.c: dict[tuple[int, int], object] = {}
        self.size: dict[tuple[str, int, int], object] = {}
        self.present: dict[tuple[int, int], object] = {}
        if memory:
            self._memory(free)

    def _tasks(self, allowed: Sequence[Sequence[int]], fixed_start: dict[int, int]) -> None:
        """Per task a start, an end and a device literal per allowed device; one task at a time per
        device, the makespan after every end, and each task after its predecessors."""
        pb, md, H, m, n = self.pb, self.model, self.H, self.pb.m, self.pb.n
        self.s, self.e, self.x = [], [], []
        dev_intervals: list[list] = [[] for _ in range(m)]
        for i in range(n):
            devs = list(allowed[i])
            dmin = min(pb.duration[i][p] for p in devs)
            if i in fixed_start:
                s = md.NewConstant(fixed_start[i])
            else:
                s = md.NewIntVar(0, max(0, H - dmin), f"s{i}")
            xs = {}
            if len(devs) == 1:
                xs[devs[0]] = self.true
            else:
                for p in devs:
                    xs[p] = md.NewBoolVar(f"x{i}_{p}")
                md.AddExactlyOne(xs.values())
            e = md.NewIntVar(dmin, H, f"e{i}")
            md.Add(e == s + sum(pb.duration[i][p] * lit for p, lit in xs.items()))
            for p, lit in xs.items():
                dev_intervals[p].append(md.NewOptionalFixedSizeIntervalVar(s, pb.duration[i][p], lit, f"I{i}_{p}"))
            self.s.append(s)
            self.e.append(e)
            self.x.append(xs)
        for ivs in dev_intervals:
            if len(ivs) > 1:
                md.AddNoOverlap(ivs)
        self.mk = md.NewIntVar(0, H, "makespan")
        for i in range(n):
            md.Add(self.mk >= self.e[i])
        for i in range(n):
            for j in pb.succs[i]:
                md.Add(self.s[j] >= self.e[i])

    def _origins(self, free: list[int], param_allowed: dict[int, Sequence[int]] | None) -> None:
        """Where each tensor starts, as device literals: its producer's device, a chosen device for a
        parameter (one with room for it, else home), home for other graph inputs."""
        pb, md, m = self.pb, self.model, self.pb.m
        self.org: list[dict[int, object]] = []
        self.loc: dict[int, dict[int, object]] = {}
        params = set(pb.params)
        for k, t in enumerate(pb.tensors):
            if t.producer >= 0:
                self.org.append(self.x[t.producer])
            elif k in params:
                devs = [p for p in (param_allowed or {}).get(k, range(m)) if t.size <= free[p]] or [pb.home]
                if len(devs) == 1:
                    row = {devs[0]: self.true}
                else:
                    row = {p: md.NewBoolVar(f"loc{k}_{p}") for p in devs}
                    md.AddExactlyOne(row.values())
                self.loc[k] = row
                self.org.append(row)
            else:
                self.org.append({pb.home: self.true})

    def _transfers(self) -> None:
        """Per tensor and reading device: whether a copy is needed there, when it leaves, and which source
        sends it; one transfer at a time per channel, and readers start after their copy arrives."""
        pb, md, H, m = self.pb, self.model, self.H, self.pb.m
        chan_intervals: list[list] = [[] for _ in pb.channels]
        self.u: dict[tuple[int, int], object] = {}
        self.ts: dict[tuple[int, int], object] = {}
        self.tr: dict[tuple[int, int, int], object] = {}
        for k, t in enumerate(pb.tensors):
            if not t.consumers:
                continue
            org = self.org[k]
            ready = self.e[t.producer] if t.producer >= 0 else 0
            for q in range(m):
                readers = [self.x[j][q] for j in t.consumers if q in self.x[j]]
                sources = [p for p in org if p != q]
                if not readers or not sources:
                    continue
                if len(readers) == 1:
                    u = readers[0]
                else:
                    u = md.NewBoolVar(f"u{k}_{q}")
                    for r in readers:
                        md.AddImplication(r, u)
                    md.AddBoolOr(readers).OnlyEnforceIf(u)
                self.u[(k, q)] = u
                ts = md.NewIntVar(0, H, f"ts{k}_{q}")
                self.ts[(k, q)] = ts
                if t.producer >= 0:
                    md.Add(ts >= ready)
                for p in sources:
                    dur = pb.xfer[k][p * m + q]
                    o = org[p]
                    if o is self.true:
                        tr = u
                    else:
                        tr = md.NewBoolVar(f"tr{k}_{p}_{q}")
                        md.AddBoolAnd([o, u]).OnlyEnforceIf(tr)
                        md.AddBoolOr([o.Not(), u.Not(), tr])
                    self.tr[(k, p, q)] = tr
                    chan_intervals[pb.route[p][q]].append(
                        md.NewOptionalFixedSizeIntervalVar(ts, dur, tr, f"T{k}_{p}_{q}"))
                    md.Add(ts + dur <= H).OnlyEnforceIf(tr)
                    for j in t.consumers:
                        if q in self.x[j]:
                            lits = [lit for lit in (o, self.x[j][q]) if lit is not self.true]
                            md.Add(self.s[j] >= ts + dur).OnlyEnforceIf(lits)
        for ivs in chan_intervals:
            if len(ivs) > 1:
                md.AddNoOverlap(ivs)

    def _memory(self, free: list[int]) -> None:
        """On each memory-limited device, every tensor's residency there (from its producer or its
        arrival to its last reader or departure) within the bytes beyond the device's baseline."""
        pb, md, H, m = self.pb, self.model, self.H, self.pb.m
        for p in range(m):
            if not pb.memory_limited[p]:
                continue
            intervals, demands = [], []
            for k, t in enumerate(pb.tensors):
                if t.size == 0:
                    continue
                if t.producer >= 0 and p in self.x[t.producer]:
                    i = t.producer
                    r = md.NewIntVar(0, H, f"r{k}_{p}")
                    md.Add(r >= self.e[i])
                    if t.output:
                        md.Add(r >= self.mk)
                    for j in t.consumers:
                        if p in self.x[j]:
                            md.Add(r >= self.e[j]).OnlyEnforceIf(self.x[j][p])
                    for q in range(m):
                        if (k, p, q) in self.tr:
                            md.Add(r >= self.ts[(k, q)] + pb.xfer[k][p * m + q]).OnlyEnforceIf(self.tr[(k, p, q)])
                    size = self.size[("r", k, p)] = md.NewIntVar(0, H, f"rs{k}_{p}")
                    intervals.append(md.NewOptionalIntervalVar(self.s[i], size, r, self.x[i][p], f"R{k}_{p}"))
                    demands.append(t.size)
                    self.r[(k, p)] = r
                elif t.producer < 0 and k in self.loc and p in self.loc[k]:
                    intervals.append(md.NewOptionalFixedSizeIntervalVar(0, H, self.loc[k][p], f"P{k}_{p}"))
                    demands.append(t.size)
                if (k, p) in self.ts:
                    trs = [self.tr[(k, src, p)] for src in range(m) if (k, src, p) in self.tr]
                    if len(trs) == 1:
                        present = trs[0]
                    else:
                        present = self.present[(k, p)] = md.NewBoolVar(f"v{k}_{p}")
                        md.AddBoolOr(trs).OnlyEnforceIf(present)
                        for lit in trs:
                            md.AddImplication(lit, present)
                    c = md.NewIntVar(0, H, f"c{k}_{p}")
                    ts = self.ts[(k, p)]
                    md.Add(c >= ts)
                    for j in t.consumers:
                        if p in self.x[j]:
                            md.Add(c >= self.e[j]).OnlyEnforceIf(self.x[j][p])
                    size = self.size[("c", k, p)] = md.NewIntVar(0, H, f"cs{k}_{p}")
                    intervals.append(md.NewOptionalIntervalVar(ts, size, c, present, f"C{k}_{p}"))
                    demands.append(t.size)
                    self.c[(k, p)] = c
            if intervals:
                md.AddCumulative(intervals, demands, free[p])

    # ----- hints and solutions ------------------------------------------------------------------
    def hint(self, sched: Schedule) -> None:
        pb, md, m = self.pb, self.model, self.pb.m
        values: dict = {}

        def put(var, value):
            if var is not self.true:
                values[var.Index()] = (var, int(value))

        def hinted(var) -> int:  # a literal fixed by `allowed` is the constant true, never hinted
            return 1 if var is self.true else values[var.Index()][1]

        for i in range(pb.n):
            put(self.s[i], sched.start[i])
            put(self.e[i], sched.finish[i])
            for p, lit in self.x[i].items():
                put(lit, p == sched.device[i])
        put(self.mk, sched.makespan)
        origin = sched.origins(pb)
        for k, row in self.loc.items():
            for p, lit in row.items():
                put(lit, p == origin[k])
        sent = {(k, dst): (src, st) for k, src, dst, st in sched.transfers}
        for (k, q), u in self.u.items():
            put(u, any(sched.device[j] == q for j in pb.tensors[k].consumers))
        for (k, q), ts in self.ts.items():
            t = pb.tensors[k]
            default = sched.finish[t.producer] if t.producer >= 0 else 0
            put(ts, sent[(k, q)][1] if (k, q) in sent else default)
        for (k, p, q), tr in self.tr.items():
            put(tr, (k, q) in sent and sent[(k, q)][0] == p)
        # residency ends at the tight value of their constraints (present or not)
        on = {}
        for k, t in enumerate(pb.tensors):
            for j in t.consumers:
                key = (k, sched.device[j])
                on[key] = max(on.get(key, 0), sched.finish[j])
        for (k, p), r in self.r.items():
            t = pb.tensors[k]
            i = t.producer
            end = max(sched.finish[i], on.get((k, p), 0), sched.makespan if t.output else 0)
            for q in range(m):
                if (k, p, q) in self.tr and hinted(self.tr[(k, p, q)]):
                    end = max(end, hinted(self.ts[(k, q)]) + pb.xfer[k][p * m + q])
            put(r, end)
            put(self.size[("r", k, p)], end - sched.start[i])
        for (k, p), v in self.present.items():
            put(v, (k, p) in sent)
        for (k, p), c in self.c.items():
            ts = hinted(self.ts[(k, p)])
            end = max(ts, on.get((k, p), 0))
            put(c, end)
            put(self.size[("c", k, p)], end - ts)
        for var, value in values.values():
            md.AddHint(var, value)

    def read(self, solver: cp_model.CpSolver, method: str) -> Schedule:
        pb = self.pb
        device = [next(p for p, lit in self.x[i].items() if solver.BooleanValue(lit)) for i in range(pb.n)]
        start = [solver.Value(s) for s in self.s]
        transfers = []
        for (k, p, q), tr in self.tr.items():
            if solver.BooleanValue(tr):
                transfers.append((k, p, q, solver.Value(self.ts[(k, q)])))
        params = {k: next(p for p, lit in row.items() if solver.BooleanValue(lit)) for k, row in self.loc.items()}
        return make_schedule(pb, device, start, transfers, method, params)


def _progress(fn: Callable[[str, int, int, float], None], method: str):
    """A CP-SAT solution callback calling `fn(method, makespan, bound, seconds)`."""
    t0 = time.monotonic()

    class Progress(cp_model.CpSolverSolutionCallback):  # a subclass of a lazily imported class: made on use
        def on_solution_callback(self) -> None:
            fn(method, int(self.ObjectiveValue()), int(self.BestObjectiveBound()), time.monotonic() - t0)

    return Progress()


def solve_cpsat(pb: PlacementProblem, time_limit: float, hint: Schedule | None = None, lower_bound: int = 0,
                allowed: Sequence[Sequence[int]] | None = None, fixed_start: dict[int, int] | None = None,
                param_allowed: dict[int, Sequence[int]] | None = None, workers: int | None = None,
                seed: int = 0, deterministic: bool = True, method: str = "cpsat",
                progress: Callable[[str, int, int, float], None] | None = None,
                horizon: int | None = None, dtime_per_second: float = 0.15) -> SolveResult:
    """Solve (or improve `hint`) within `time_limit` seconds; never returns a schedule worse than the hint."""
    t0 = time.monotonic()
    allowed = allowed or pb.capable
    if horizon is None:
        # Transfers may run past the last kernel (results going home), so the horizon keeps room for
        # them: with the hint's makespan alone, the hint itself was infeasible and nothing improved.
        transfers = sum(max(row) for row in pb.xfer) + 1
        if hint is not None:
            horizon = hint.makespan + transfers
        else:
            horizon = sum(max(pb.duration[i][p] for p in allowed[i]) for i in range(pb.n)) + transfers
    b = _Builder(pb, allowed, horizon, fixed_start, param_allowed)
    md = b.model
    md.Add(b.mk >= lower_bound)
    md.Minimize(b.mk)
    if hint is not None:
        b.hint(hint)
    solver = cp_model.CpSolver()
    prm = solver.parameters
    # Deterministic mode runs CP-SAT's portfolio interleaved in one thread: reproducible, and it
    # stops as soon as optimality is proven (with several workers, interleaved search was seen to
    # run on to the limit after a proof).
    prm.num_workers = 1 if deterministic else (workers or default_workers())
    prm.random_seed = seed
    remaining = max(0.05, time_limit - (time.monotonic() - t0))
    prm.max_time_in_seconds = remaining
    if pb.n > 40:
        # symmetry breaking in presolve can invalidate the warm start, and probing large models
        # costs seconds before the search starts
        prm.symmetry_level = 0
        prm.cp_model_probing_level = 0
    if deterministic:
        prm.interleave_search = True
        prm.max_deterministic_time = remaining * dtime_per_second
        # One thread interleaves the portfolio; on this model most of its time went to seven more
        # full-problem searches that rarely improve on the warm start. Keeping one (with the LP, for
        # the bound) and the neighbourhood searches found better schedules on 50-150 tasks.
        prm.ignore_subsolvers.extend(_SLOW_SUBSOLVERS)
    t1 = time.monotonic()
    status = solver.Solve(md, _progress(progress, method) if progress else None)
    name = solver.StatusName(status)
    wall = time.monotonic() - t0
    wall_limited = status not in (cp_model.OPTIMAL, cp_model.INFEASIBLE) and \
        time.monotonic() - t1 >= 0.97 * remaining
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        sched = b.read(solver, method)
        bound = int(solver.BestObjectiveBound())
        if hint is not None and sched.makespan > hint.makespan:
            sched = hint
        return SolveResult(sched, bound, status == cp_model.OPTIMAL, name, wall, solver.deterministic_time,
                           wall_limited)
    bound = horizon + 1 if status == cp_model.INFEASIBLE else 0
    return SolveResult(None, bound, False, name, wall, solver.deterministic_time, wall_limited)
