"""The fixed-order CP-SAT model: keep-or-evict per gap between uses, an offset per residency.

One builder serves three jobs:
- capacity-only (`addresses=False`): bytes per step only; its optimum is a lower bound on the
  traffic of the order and gives the replacement decisions;
- placement (`fixed_keep=...`): decisions fixed, only addresses (`NoOverlap2D` over
  (step, address) rectangles) to find;
- joint: both; with `window=(a, b)` only the uses at steps a..b are free and everything else
  stays as in the incumbent, which is how the windowed (LNS) scheme works.

Sizes and the capacity are divided by the gcd of the tensor sizes (every offset can be moved down
onto a sum of sizes without overlap, so nothing is lost).
"""
from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from tilegraph.passes.lazy import cp_model

from .problem import MemoryProblem
from .solution import Solution, Timeline, store_cost


@dataclass(frozen=True)
class SolverConfig:
    """CP-SAT settings. `deterministic=True` interleaves the workers and limits by deterministic time
    (`max_deterministic_time = time_limit`), so the same input gives the same plan; a wall-clock
    limit of 1 s + 5x the budget stays as a safety net."""

    num_workers: int = 2
    seed: int = 0
    deterministic: bool = False
    # The free-order model proves far more with a broad portfolio than with 2 workers (rand40: 8/8 optima
    # in 6 s interleaved against 3/8; rand80: 2/8 and better orders with 8 workers, none interleaved).
    interleave_limit: int = 48  # free-order model up to this many kernels: every subsolver, interleaved
    wide_workers: int = 8  # free-order model above it: this many workers (time-sliced on fewer cores)


@dataclass(frozen=True)
class ModelResult:
    status: str  # "optimal" | "feasible" | "infeasible" | "unknown"
    keep: tuple | None  # keep flags of the best solution found
    solution: Solution | None  # full solution (addresses mode only)
    objective: int | None  # traffic of the best solution, bytes
    bound: int  # lower bound on the traffic (for windowed models: on this window's neighbourhood only)
    wall: float


def status_name(status: int) -> str:
    """CP-SAT's status code in words."""
    return {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible", cp_model.INFEASIBLE: "infeasible",
            cp_model.MODEL_INVALID: "invalid"}.get(status, "unknown")


def progress_callback(report, scale: int, const: int):
    """A CP-SAT solution callback calling `report(objective, bound)` in bytes (`scale` per unit, plus `const`)."""

    class Progress(cp_model.CpSolverSolutionCallback):  # a subclass of a lazily imported class: made on use
        def on_solution_callback(self) -> None:
            report(int(round(self.ObjectiveValue())) * scale + const,
                   int(math.ceil(self.BestObjectiveBound() - 1e-6)) * scale + const)

    return Progress()


def size_unit(problem: MemoryProblem) -> int:
    g = 0
    for s in problem.sizes:
        g = math.gcd(g, s)
    return g or 1


def configure(solver: cp_model.CpSolver, time_limit: float, config: SolverConfig) -> None:
    p = solver.parameters
    p.num_workers = max(1, config.num_workers)
    p.random_seed = config.seed
    p.log_search_progress = False
    # The feasibility-jump worker ignores the time limit on our NoOverlap2D models (observed: 10 s limit,
    # 50-60 s wall with OR-Tools 9.15); the LP/search workers respect it.
    p.use_feasibility_jump = False
    p.num_violation_ls = 0  # the violation local-search worker can likewise outlive the limit and the proof
    if config.deterministic:
        p.interleave_search = True
        p.max_deterministic_time = max(0.01, time_limit)
        p.max_time_in_seconds = 1.0 + 5 * time_limit  # safety net only; hitting it breaks determinism
    else:
        p.max_time_in_seconds = max(0.05, time_limit)


@dataclass(frozen=True)
class _Frame:
    """What every phase of one fixed-order solve reads: the mode, the incumbent or fixed keeps, the free
    steps a..b (the window; every step without one) and the sizes' unit g, with the capacity in units."""

    problem: MemoryProblem
    timeline: Timeline
    a: int
    b: int
    g: int
    cap: int
    addresses: bool
    windowed: bool
    incumbent: Solution | None
    fixed_keep: tuple | None


@dataclass
class _Model:
    """The CP-SAT model under construction and the handles that the later phases read (mutable: each
    tensor adds its variables, terms and rectangles in turn)."""

    model: cp_model.CpModel = field(default_factory=lambda: cp_model.CpModel())
    objective: list[tuple[int, cp_model.IntVar]] = field(default_factory=list)  # (coef, literal): coef * literal
    const: int = 0  # traffic, in units, that no decision changes
    per_step: dict[int, list[tuple[int, cp_model.IntVar | None]]] = field(
        default_factory=lambda: defaultdict(list))  # step -> (size, None if surely resident else keep literal)
    xs: list[cp_model.IntervalVar] = field(default_factory=list)  # step side of the rectangles
    ys: list[cp_model.IntervalVar] = field(default_factory=list)  # address side of the rectangles
    keep_vars: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)  # (tensor, gap) -> literal
    group_var: dict[tuple[int, int], cp_model.IntVar | int] = field(
        default_factory=dict)  # (tensor, first use of group) -> offset var or int
    group_of: dict[int, list[int]] = field(default_factory=dict)  # tensor -> group (first use) of each use


def solve_fixed(problem: MemoryProblem, order: tuple[int, ...], capacity: int, *, addresses: bool = True,
                incumbent: Solution | None = None, hint_keep=None, fixed_keep=None,
                window: tuple[int, int] | None = None, lower_bound: int = 0, time_limit: float = 1.0,
                config: SolverConfig = SolverConfig(), progress=None) -> ModelResult:
    """Build and solve the fixed-order model; see the module doc for the three modes."""
    start_time = time.perf_counter()
    frame = _frame(problem, order, capacity, window, addresses=addresses, incumbent=incumbent,
                   fixed_keep=fixed_keep)
    built = _Model()
    _add_tensors(frame, built)
    if not _add_capacity(frame, built):
        return ModelResult("infeasible", None, None, None, lower_bound, time.perf_counter() - start_time)
    if addresses and built.xs:
        built.model.AddNoOverlap2D(built.xs, built.ys)
    _set_objective(frame, built, lower_bound)
    _add_hints(frame, built, hint_keep)
    solver, status = _run(frame, built, time_limit, config, progress)
    wall = time.perf_counter() - start_time
    name = status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return ModelResult(name, None, None, None, lower_bound, wall)
    objective_bytes, bound = _traffic_and_bound(frame, built, solver, status)
    keep_out = _solved_keep(frame, built, solver)
    solution = _solved_solution(frame, built, solver, keep_out) if addresses else None
    return ModelResult(name, keep_out, solution, objective_bytes, bound, wall)


def _frame(problem: MemoryProblem, order: tuple[int, ...], capacity: int, window: tuple[int, int] | None, *,
           addresses: bool, incumbent: Solution | None, fixed_keep: tuple | None) -> _Frame:
    """The frame of one solve; a window needs an incumbent, which fixes everything outside it."""
    tl = Timeline(problem, order)
    a, b = window if window is not None else (0, tl.steps - 1)
    if window is not None and incumbent is None:
        raise ValueError("a windowed model needs an incumbent")
    g = size_unit(problem)
    return _Frame(problem, tl, a, b, g, capacity // g, addresses, window is not None, incumbent, fixed_keep)


def _add_tensors(f: _Frame, m: _Model) -> None:
    """Each tensor's part of the model, one tensor after the other and in this order within it (CP-SAT's
    search depends on the order of creation): keeps, traffic, offsets, then its uses and kept gaps."""
    for i, uses in enumerate(f.timeline.uses):
        if not uses:
            continue
        s = f.problem.sizes[i] // f.g
        free = [f.a <= u <= f.b for u in uses]
        keep = _keep_decisions(f, m, i, free)
        _add_traffic(f, m, i, s, keep)
        groups = _use_groups(keep)
        m.group_of[i] = groups
        if f.addresses:
            _add_offsets(f, m, i, s, keep, groups, free)
        _add_uses(f, m, i, s, uses, groups, free)
        _add_kept_gaps(f, m, i, s, uses, keep, groups)


def _keep_decisions(f: _Frame, m: _Model, i: int, free: list[bool]) -> list[cp_model.IntVar | bool]:
    """Tensor i's keep flag per gap between uses: a new literal when both ends are free, else fixed
    (by `fixed_keep`, or by the incumbent outside the window)."""
    keep: list[cp_model.IntVar | bool] = []
    for j in range(len(free) - 1):
        if f.fixed_keep is not None:
            keep.append(bool(f.fixed_keep[i][j]))
        elif free[j] and free[j + 1]:
            lit = m.model.NewBoolVar("")
            m.keep_vars[(i, j)] = lit
            keep.append(lit)
        else:
            keep.append(bool(f.incumbent.keep[i][j]))
    return keep


def _add_traffic(f: _Frame, m: _Model, i: int, s: int, keep: list[cp_model.IntVar | bool]) -> None:
    """Tensor i's traffic in units: a reload per evicted gap, plus one store if it has no DRAM copy and
    any gap is evicted; fixed amounts go to the constant, the rest to the objective."""
    var_keeps = [k for k in keep if not isinstance(k, bool)]
    m.const += s * sum(1 for k in keep if k is False)
    for lit in var_keeps:
        m.objective.append((-s, lit))
        m.const += s
    if store_cost(f.problem, i):
        if any(k is False for k in keep):
            m.const += s
        elif var_keeps:
            st = m.model.NewBoolVar("")
            for lit in var_keeps:
                m.model.AddImplication(lit.Not(), st)
            m.objective.append((s, st))
            if f.incumbent is not None:
                m.model.AddHint(st, not all(f.incumbent.keep[i]))


def _use_groups(keep: list[cp_model.IntVar | bool]) -> list[int]:
    """The group of each use: the first use of its run of uses joined by gaps kept for certain (True),
    which share one offset."""
    groups: list[int] = []
    for j in range(len(keep) + 1):
        groups.append(groups[j - 1] if j and keep[j - 1] is True else j)
    return groups


def _add_offsets(f: _Frame, m: _Model, i: int, s: int, keep: list[cp_model.IntVar | bool], groups: list[int],
                 free: list[bool]) -> None:
    """One offset per group of tensor i (the incumbent's where the window leaves part of the group
    outside), and equal offsets across a gap whose keep literal is true."""
    n = len(groups)
    for j in range(n):
        root = groups[j]
        if (i, root) in m.group_var:
            continue
        members = [x for x in range(n) if groups[x] == root]
        if f.windowed and not all(free[x] for x in members):
            m.group_var[(i, root)] = f.incumbent.offset[i][root] // f.g
        else:
            m.group_var[(i, root)] = m.model.NewIntVar(0, f.cap - s, "")
    for j in range(n - 1):
        lit = keep[j]
        if not isinstance(lit, bool):
            oa, ob = m.group_var[(i, groups[j])], m.group_var[(i, groups[j + 1])]
            m.model.Add(oa == ob).OnlyEnforceIf(lit)


def _add_uses(f: _Frame, m: _Model, i: int, s: int, uses: tuple[int, ...], groups: list[int],
              free: list[bool]) -> None:
    """Tensor i is resident at each of its uses inside the window: its bytes at that step and, with
    addresses, a one-step rectangle at its group's offset."""
    for j in range(len(uses)):
        if free[j]:
            m.per_step[uses[j]].append((s, None))
            if f.addresses:
                m.xs.append(m.model.NewFixedSizeIntervalVar(uses[j], 1, ""))
                m.ys.append(m.model.NewFixedSizeIntervalVar(m.group_var[(i, groups[j])], s, ""))


def _add_kept_gaps(f: _Frame, m: _Model, i: int, s: int, uses: tuple[int, ...],
                   keep: list[cp_model.IntVar | bool], groups: list[int]) -> None:
    """Tensor i is resident in each gap that may be kept, clipped to the window: its bytes per step and,
    with addresses, a rectangle; both optional on the keep literal when the gap is not kept for certain."""
    for j in range(len(uses) - 1):
        lo, hi = max(uses[j] + 1, f.a), min(uses[j + 1] - 1, f.b)
        lit = keep[j]
        if lo > hi or lit is False:
            continue
        for t in range(lo, hi + 1):
            m.per_step[t].append((s, None if lit is True else lit))
        if f.addresses:
            off = m.group_var.get((i, groups[j]))
            if off is None:  # a kept gap crossing a window whose ends are both outside
                off = f.incumbent.offset[i][j] // f.g
            if lit is True:
                m.xs.append(m.model.NewFixedSizeIntervalVar(lo, hi - lo + 1, ""))
                m.ys.append(m.model.NewFixedSizeIntervalVar(off, s, ""))
            else:
                m.xs.append(m.model.NewOptionalFixedSizeIntervalVar(lo, hi - lo + 1, lit, ""))
                m.ys.append(m.model.NewOptionalFixedSizeIntervalVar(off, s, lit, ""))


def _add_capacity(f: _Frame, m: _Model) -> bool:
    """The bytes resident at each step of the window within the capacity (a constraint only where the
    optional ones could exceed it); False when the certain ones alone already do."""
    for t in range(f.a, f.b + 1):
        items = m.per_step.get(t, [])
        fixed = sum(s for s, lit in items if lit is None)
        optional = [(s, lit) for s, lit in items if lit is not None]
        if fixed > f.cap:
            return False
        if fixed + sum(s for s, _ in optional) > f.cap:
            m.model.Add(sum(s * lit for s, lit in optional) <= f.cap - fixed)
    return True


def _set_objective(f: _Frame, m: _Model, lower_bound: int) -> None:
    """Minimize the traffic the decisions change; a known lower bound on the whole traffic (bytes)
    becomes a constraint, which helps the proof."""
    if not m.objective:
        return
    obj_expr = sum(c * lit for c, lit in m.objective)
    m.model.Minimize(obj_expr)
    lb_units = -(-lower_bound // f.g)
    if lb_units > m.const:
        m.model.Add(obj_expr + m.const >= lb_units)


def _add_hints(f: _Frame, m: _Model, hint_keep: tuple | None) -> None:
    """Warm start: the incumbent's keep flags and offsets, else the keep flags of `hint_keep`."""
    if f.incumbent is not None:
        for (i, j), lit in m.keep_vars.items():
            m.model.AddHint(lit, bool(f.incumbent.keep[i][j]))
        if f.addresses:
            for (i, root), var in m.group_var.items():
                if not isinstance(var, int):
                    m.model.AddHint(var, f.incumbent.offset[i][root] // f.g)
    elif hint_keep is not None:
        for (i, j), lit in m.keep_vars.items():
            m.model.AddHint(lit, bool(hint_keep[i][j]))


def _run(f: _Frame, m: _Model, time_limit: float, config: SolverConfig,
         progress: Callable[[int, int], None] | None) -> tuple[cp_model.CpSolver, int]:
    """Solve the model; `progress(traffic, bound)` hears each new solution, in bytes."""
    solver = cp_model.CpSolver()
    configure(solver, time_limit, config)
    if progress is not None and m.objective:
        status = solver.Solve(m.model, progress_callback(progress, f.g, m.const * f.g))
    else:
        status = solver.Solve(m.model)
    return solver, status


def _traffic_and_bound(f: _Frame, m: _Model, solver: cp_model.CpSolver, status: int) -> tuple[int, int]:
    """The best solution's traffic and the lower bound, in bytes (the bound is the traffic once proven
    optimal)."""
    objective_bytes = (int(round(solver.ObjectiveValue())) + m.const) * f.g if m.objective else m.const * f.g
    bound = (int(math.ceil(solver.BestObjectiveBound() - 1e-6)) + m.const) * f.g if m.objective else objective_bytes
    if status == cp_model.OPTIMAL:
        bound = objective_bytes
    return objective_bytes, bound


def _solved_keep(f: _Frame, m: _Model, solver: cp_model.CpSolver) -> tuple[tuple[bool, ...], ...]:
    """Every tensor's keep flags: the solver's where they were decisions, else the fixed ones."""
    keep_out = []
    for i, uses in enumerate(f.timeline.uses):
        row = []
        for j in range(max(0, len(uses) - 1)):
            lit = m.keep_vars.get((i, j))
            if lit is not None:
                row.append(bool(solver.BooleanValue(lit)))
            elif f.fixed_keep is not None:
                row.append(bool(f.fixed_keep[i][j]))
            else:
                row.append(bool(f.incumbent.keep[i][j]))
        keep_out.append(tuple(row))
    return tuple(keep_out)


def _solved_solution(f: _Frame, m: _Model, solver: cp_model.CpSolver,
                     keep_out: tuple[tuple[bool, ...], ...]) -> Solution:
    """The full solution: offsets in bytes from the solver inside the window and from the incumbent
    outside it, and uses joined by a kept gap at the offset of the first (re-derived to be exact)."""
    offsets = []
    for i, uses in enumerate(f.timeline.uses):
        row = []
        for j in range(len(uses)):
            var = m.group_var.get((i, m.group_of[i][j])) if i in m.group_of else None
            if var is None or not (f.a <= uses[j] <= f.b):
                row.append(f.incumbent.offset[i][j])
            elif isinstance(var, int):
                row.append(var * f.g)
            else:
                row.append(solver.Value(var) * f.g)
        offsets.append(tuple(row))
    fixed_offsets = []
    for i, row in enumerate(offsets):
        row = list(row)
        for j in range(len(row) - 1):
            if keep_out[i][j]:
                row[j + 1] = row[j]
        fixed_offsets.append(tuple(row))
    return Solution(tuple(f.timeline.order), keep_out, tuple(fixed_offsets))
