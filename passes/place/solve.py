"""The placement driver: bounds, the heuristic portfolio, then improvement within a time limit.

method="auto": lower bounds (path + LP); every heuristic (HEFT, CPOP, PEFT, m-ETF, m-TOPO, LP
rounding, and our list-scheduling portfolio); the randomized portfolio (grasp.py: seeded samples
of priority and device-choice weights, half the time left on large graphs); then, from the best
of them, local search over
assignments (local.py) and -- for problems of up to `exact_max_tasks` tasks -- the exact CP-SAT
model warm-started from the best schedule so far. The answer is never worse than the best
heuristic. Other methods: "cpsat" (heuristics, then CP-SAT for the rest of the time), "local"
(heuristics, then local search), "lns" (heuristics, then windowed CP-SAT LNS, lns.py), or one
heuristic alone: "heft", "cpop", "peft", "metf", "mtopo", "lp", "portfolio".

Determinism (`deterministic=True`, the default): every stage is limited by work, not by the clock
-- local search by a number of decodes, CP-SAT by deterministic time with a fixed seed (and
interleaved parallel search when it uses several workers) -- each sized from the time limit by
constants calibrated on the reference machine. The wall clock stays a hard guard; if it fires
(a much slower machine) the answer may vary between runs, and `stats["wall_guard"]` says so.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tilegraph.ir.placement import MemoryInfeasibleError, PlacementError

from .bounds import fastest_path_bound, path_bound
from .checker import check_schedule
from .cpsat import solve_cpsat
from .grasp import randomized_portfolio
from .heuristics import assigned, cpop, heft, memory_binds, metf, mtopo, peft, portfolio_variants, variant
from .listsched import Stuck, list_schedule
from .lns import windowed_lns
from .local import improve
from .lp import LPResult, lp_bound, round_assignments, solve_lp
from .problem import PlacementProblem, Schedule

METHODS = ("auto", "cpsat", "local", "lns", "heft", "cpop", "peft", "metf", "mtopo", "lp", "portfolio")

# Calibration on the reference machine (2 cores). CP-SAT, interleaved in one thread, advances
# about 0.65 / devices deterministic units per wall second on 50-100 tasks (0.34 on cpu-gpu-pcie,
# 0.20-0.22 on cpu-gpu-npu, 0.13 on 4-core-npu); `cpsat_dtime_rate` stays below that, so that
# work, not the clock, ends the search on this machine. The machine's speed varies: on a slower
# day the same measurement gave 0.19-0.20 on 50 tasks and 0.07-0.13 on 100, where the wall-clock
# guard then ends the search on some instances (the outcome's notes say so).
# List-scheduling costs, fitted on the idle machine to random DAGs of 50-2000 tasks on the three
# presets with and without memory limits (`_cost`'s terms: (tasks + tensors) x devices,
# tasks + tensors, tasks^2 when any device is memory-limited and per such device: the memory
# trackers' scans grow with the schedule). The fits are within 0.8-1.4x of the measurements (one
# portfolio sample at 2.2x); COST_MARGIN keeps the work budgets inside the wall-clock guards under
# load, so that the same input gives the same schedule. A randomized-portfolio sample tries every
# device per task; a local-search decode takes the assigned one.
SAMPLE_COST = (2.2e-6, 2.2e-6, 2.2e-8, 1.0e-8)
DECODE_COST = (2.1e-7, 2.7e-6, 1.2e-8, 1.0e-10)
COST_MARGIN = 1.5
GRASP_MAX_SAMPLES = 4000

Progress = Callable[[str, int, int, float], None]


@dataclass(frozen=True)
class SolveOptions:
    time_limit: float = 30.0
    method: str = "auto"
    seed: int = 0
    deterministic: bool = True
    workers: int | None = None
    exact_max_tasks: int = 150


@dataclass(frozen=True)
class Outcome:
    """The chosen schedule, its lower bound, the method that made it, and what else was tried."""

    schedule: Schedule
    lower_bound: int
    method: str
    optimal: bool
    makespans: dict[str, int | None] = field(default_factory=dict)  # per method tried
    bounds: dict[str, int] = field(default_factory=dict)  # path, lp, cpsat
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per stage
    notes: tuple[str, ...] = ()

    @property
    def gap(self) -> float:
        lb = self.lower_bound
        return 0.0 if lb <= 0 else (self.schedule.makespan - lb) / lb


def cpsat_dtime_rate(pb: PlacementProblem) -> float:
    """CP-SAT's deterministic-time limit per second of its time limit: 0.5 / devices, at least 0.12
    (on five devices 0.1 cost makespan and 0.16 ran into the wall clock)."""
    return max(0.12, 0.5 / pb.m)


def _cost(pb: PlacementProblem, coefficients: tuple[float, float, float, float]) -> float:
    size = pb.n + len(pb.tensors) + 1
    limited = sum(pb.memory_limited)
    per_size_device, per_size, per_square, per_square_device = coefficients
    return COST_MARGIN * (per_size_device * size * pb.m + per_size * size
                          + (per_square + per_square_device * limited) * pb.n ** 2 * (limited > 0))


def sample_seconds(pb: PlacementProblem) -> float:
    """Estimated seconds of one randomized-portfolio sample or portfolio variant (sizes their
    deterministic counts)."""
    return _cost(pb, SAMPLE_COST)


def local_decode_seconds(pb: PlacementProblem) -> float:
    """Estimated seconds of one local-search decode (sizes its deterministic work budget)."""
    return _cost(pb, DECODE_COST)


@dataclass
class _Run:
    """One call of `solve`: its problem, options and clock, the lower bound the stages report against,
    and what each stage took and made (mutable: every stage adds to it)."""

    pb: PlacementProblem
    options: SolveOptions
    progress: Progress | None
    t0: float  # time.monotonic() at the start
    limit: float  # seconds for the whole call
    lower: int = 0  # the best lower bound of the bounds stage
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per stage
    makespans: dict[str, int | None] = field(default_factory=dict)  # per method tried
    wall_guard: bool = False  # a wall-clock guard ended some stage: the result may vary between runs

    def left(self) -> float:
        """Seconds left of the limit."""
        return self.limit - (time.monotonic() - self.t0)

    def report(self, stage: str, sched: Schedule | None) -> None:
        """Record a stage's makespan (None: it found nothing) and pass a schedule on to `progress`."""
        self.makespans[stage] = sched.makespan if sched is not None else None
        if sched is not None and self.progress is not None:
            self.progress(stage, sched.makespan, self.lower, time.monotonic() - self.t0)


@dataclass(frozen=True)
class _Exact:
    """What the exact stage learnt besides its schedule: whether that is proven optimal, and CP-SAT's
    lower bound (0: none, or the stage did not run)."""

    optimal: bool = False
    bound: int = 0


def solve(pb: PlacementProblem, options: SolveOptions = SolveOptions(), progress: Progress | None = None) -> Outcome:
    """Place `pb` within `options.time_limit` seconds (see the module docstring)."""
    if options.method not in METHODS:
        raise PlacementError(f"unknown placement method {options.method!r}; methods: {', '.join(METHODS)}")
    run = _Run(pb, options, progress, time.monotonic(), max(0.1, float(options.time_limit)))
    pb.check_memory_feasible()
    bounds, lp = _bounds(run)
    run.lower = max(bounds.values())
    best = _heuristics(run, lp)
    exact_size = pb.n <= options.exact_max_tasks
    if options.method == "auto" and run.left() > 0 and not (best is not None and best.makespan <= run.lower):
        best = _grasp(run, best, exact_size)
    if options.method in ("auto", "local") and best is not None and run.left() > 0:
        best = _local(run, best, exact_size)
    if options.method == "lns" and best is not None and run.left() > 0.5:
        best = _lns(run, best)
    exact = _Exact()
    run_exact = options.method == "cpsat" or (options.method == "auto" and exact_size)
    if run_exact and run.left() > 0.05 and not (best is not None and best.makespan <= run.lower):
        best, exact = _exact(run, best)
    if best is None:
        raise _memory_error(pb, f"no placement that fits in memory was found within {run.limit:g} s")
    return _outcome(run, best, bounds, exact)


def _bounds(run: _Run) -> tuple[dict[str, int], LPResult | None]:
    """The path and LP lower bounds; the LP relaxation also seeds the LP-rounding heuristic."""
    pb = run.pb
    t = time.monotonic()
    bounds = {"path": max(path_bound(pb), fastest_path_bound(pb))}
    lp = solve_lp(pb, time_limit=min(0.15 * run.limit, 20.0))
    bounds["lp"] = lp_bound(lp)
    run.seconds["bounds"] = time.monotonic() - t
    return bounds, lp


def _heuristics(run: _Run, lp: LPResult | None) -> Schedule | None:
    """Every heuristic (or the one method asked for), each timed, checked and reported; the best
    schedule among them, None if none fits in memory."""
    pb, options = run.pb, run.options
    heuristics = _heuristic_table(pb, lp, options.seed, run.limit)
    wanted = list(heuristics) if options.method in ("auto", "cpsat", "local", "lns") else [options.method]
    candidates: list[Schedule] = []
    for name in wanted:
        t = time.monotonic()
        sched = heuristics[name]()
        run.seconds[name] = time.monotonic() - t
        if sched is not None:
            sched = sched.renamed(name)
            check_schedule(pb, sched)
            candidates.append(sched)
        run.report(name, sched)
    return min(candidates, key=lambda s: s.makespan) if candidates else None


def _heuristic_table(pb: PlacementProblem, lp: LPResult | None, seed: int,
                     limit: float) -> dict[str, Callable[[], Schedule | None]]:
    """The heuristics by method name, in the order `auto` runs them."""
    binds = memory_binds(pb)
    return {
        "heft": lambda: _with_streaming(pb, heft, binds), "cpop": lambda: cpop(pb),
        "peft": lambda: _with_streaming(pb, peft, binds), "metf": lambda: metf(pb),
        "mtopo": lambda: _with_streaming(pb, mtopo, binds), "lp": lambda: _lp_rounding(pb, lp, seed),
        "portfolio": lambda: _portfolio(pb, limit, binds),
    }


def _with_streaming(pb: PlacementProblem, fn: Callable[..., Schedule | None], binds: bool) -> Schedule | None:
    """`fn` on `pb`; with binding memory, also streaming parameters from roomy devices; the better."""
    found = [s for s in (fn(pb), fn(pb, stream=True) if binds else None) if s is not None]
    return min(found, key=lambda s: s.makespan) if found else None


def _portfolio(pb: PlacementProblem, limit: float, binds: bool) -> Schedule | None:
    """Our own list-scheduling variants (priorities x look-ahead / thrifty choices): as many as fit in a
    tenth of the time limit -- a deterministic count, from their estimated cost; the best."""
    variants = portfolio_variants()
    count = max(4, int(0.1 * limit / (sample_seconds(pb) * (2 if binds else 1))))
    found = []
    for prio, choice in variants[:count]:
        found += [s for s in (variant(pb, prio, choice), variant(pb, prio, choice, stream=True) if binds else None)
                  if s is not None]
    return min(found, key=lambda s: s.makespan) if found else None


def _grasp(run: _Run, best: Schedule | None, exact_size: bool) -> Schedule | None:
    """The randomized portfolio: half the limit on large graphs, 8% when CP-SAT follows; the sample
    count comes from the limit, not the clock, so that it is the same on every run."""
    pb, options = run.pb, run.options
    share = run.limit * (0.08 if exact_size else 0.5)
    t = time.monotonic()
    samples = max(8, min(GRASP_MAX_SAMPLES, int(share / sample_seconds(pb))))
    guard = min(share * 2 if options.deterministic else share, 0.8 * run.left())  # leave local search some
    sampled = randomized_portfolio(pb, samples, seed=options.seed, lower_bound=run.lower,
                                   stop=lambda: time.monotonic() - t > guard)
    run.seconds["grasp"] = time.monotonic() - t
    run.wall_guard |= run.seconds["grasp"] > guard
    if sampled is not None:
        check_schedule(pb, sampled)
        run.report("grasp", sampled)
        if best is None or sampled.makespan < best.makespan:
            best = sampled
    return best


def _local(run: _Run, best: Schedule, exact_size: bool) -> Schedule:
    """Local search over assignments from `best`, limited by a number of decodes when deterministic;
    the better of the two."""
    pb, options, auto = run.pb, run.options, run.options.method == "auto"
    share = run.left() * (0.25 if auto and exact_size else 1.0)
    # the work budget, like the sample count, from the limit: 20% with CP-SAT after it, 50% after
    # the randomized portfolio, 85% alone
    budget = run.limit * (0.2 if auto and exact_size else 0.5 if auto else 0.85)
    t = time.monotonic()
    evals = max(1, int(budget / local_decode_seconds(pb))) if options.deterministic else None
    improved = improve(pb, best, share, seed=options.seed, progress=run.progress, max_evals=evals,
                       lower_bound=run.lower)
    run.seconds["local"] = time.monotonic() - t
    run.wall_guard |= options.deterministic and run.seconds["local"] >= 0.99 * share
    check_schedule(pb, improved)
    run.report("local", improved)
    return improved if improved.makespan < best.makespan else best


def _lns(run: _Run, best: Schedule) -> Schedule:
    """Windowed CP-SAT LNS from `best` for the rest of the time; the better of the two."""
    pb, options = run.pb, run.options
    t = time.monotonic()
    improved = windowed_lns(pb, best, run.left(), lower_bound=run.lower, seed=options.seed,
                            deterministic=options.deterministic, workers=options.workers,
                            dtime_per_second=cpsat_dtime_rate(pb), progress=run.progress)
    run.seconds["lns"] = time.monotonic() - t
    check_schedule(pb, improved)
    run.report("lns", improved)
    return min((best, improved), key=lambda s: s.makespan)


def _exact(run: _Run, best: Schedule | None) -> tuple[Schedule | None, _Exact]:
    """The exact CP-SAT model for the rest of the time, warm-started from `best`; the better schedule
    and what CP-SAT proved. Raises when it proves that nothing fits in memory and nothing was found."""
    pb, options = run.pb, run.options
    t = time.monotonic()
    res = solve_cpsat(pb, run.left(), hint=best, lower_bound=run.lower, workers=options.workers,
                      seed=options.seed, deterministic=options.deterministic, progress=run.progress,
                      dtime_per_second=cpsat_dtime_rate(pb))
    run.seconds["cpsat"] = time.monotonic() - t
    optimal = False
    if res.schedule is not None:
        check_schedule(pb, res.schedule)
        run.report("cpsat", res.schedule)
        if best is None or res.schedule.makespan < best.makespan:
            best = res.schedule
        optimal = res.optimal
    if res.status == "INFEASIBLE" and best is None:
        raise _memory_error(pb, "the exact model proves that no placement fits in memory")
    run.wall_guard |= options.deterministic and res.wall_limited
    return best, _Exact(optimal, res.bound)


def _outcome(run: _Run, best: Schedule, bounds: dict[str, int], exact: _Exact) -> Outcome:
    """The final lower bound (CP-SAT's too, and the makespan itself once proven optimal) and the notes."""
    if exact.bound:
        bounds["cpsat"] = min(exact.bound, best.makespan)
    lower = max(bounds.values())
    if exact.optimal:
        lower = best.makespan
    notes: list[str] = []
    if run.wall_guard:
        notes.append("wall-clock guard reached: the result may differ between runs")
    return Outcome(best, min(lower, best.makespan), best.method, exact.optimal or lower >= best.makespan,
                   run.makespans, bounds, run.seconds, tuple(notes))


def _lp_rounding(pb: PlacementProblem, lp, seed: int) -> Schedule | None:
    """List-schedule the LP's assignments (largest share, and seeded samples); the best of them."""
    if lp is None:
        return None
    best = None
    for tasks, params in round_assignments(pb, lp, samples=4, seed=seed):
        sched = assigned(pb, tasks, "lp", param_pref=params)
        if sched is not None and (best is None or sched.makespan < best.makespan):
            best = sched
    return best


def _memory_error(pb: PlacementProblem, why: str) -> MemoryInfeasibleError:
    """Name the device that memory blocks first when scheduling in program order."""
    try:
        list_schedule(pb, [-float(i) for i in range(pb.n)], "probe")
    except Stuck as stuck:
        dev = pb.devices[stuck.device]
        return MemoryInfeasibleError(
            f"{why}: kernel {pb.tasks[stuck.task]} needs {_mib(stuck.need)} on device {dev}, which has "
            f"{_mib(max(stuck.free, 0))} left of {_mib(pb.capacity[stuck.device])} (capacities: "
            + ", ".join(f"{d} {_mib(c)}" for d, c in zip(pb.devices, pb.capacity)) + ")", dev)
    tight = min(range(pb.m), key=lambda p: pb.capacity[p] - pb.baseline[p])
    return MemoryInfeasibleError(f"{why} (tightest device: {pb.devices[tight]})", pb.devices[tight])


def _mib(nbytes: int) -> str:
    from tilegraph.ir.system import format_bytes

    return format_bytes(nbytes)


__all__ = ["solve", "SolveOptions", "Outcome", "METHODS"]
