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
from dataclasses import dataclass

from ortools.sat.python import cp_model

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


_STATUS = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible", cp_model.INFEASIBLE: "infeasible",
           cp_model.MODEL_INVALID: "invalid", cp_model.UNKNOWN: "unknown"}


class _Progress(cp_model.CpSolverSolutionCallback):
    def __init__(self, report, scale: int, const: int) -> None:
        super().__init__()
        self.report, self.scale, self.const = report, scale, const

    def on_solution_callback(self) -> None:
        self.report(int(round(self.ObjectiveValue())) * self.scale + self.const,
                    int(math.ceil(self.BestObjectiveBound() - 1e-6)) * self.scale + self.const)


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


def solve_fixed(problem: MemoryProblem, order: tuple[int, ...], capacity: int, *, addresses: bool = True,
                incumbent: Solution | None = None, hint_keep=None, fixed_keep=None,
                window: tuple[int, int] | None = None, lower_bound: int = 0, time_limit: float = 1.0,
                config: SolverConfig = SolverConfig(), progress=None) -> ModelResult:
    """Build and solve the fixed-order model; see the module doc for the three modes."""
    start_time = time.perf_counter()
    tl = Timeline(problem, order)
    T = tl.steps
    a, b = window if window is not None else (0, T - 1)
    if window is not None and incumbent is None:
        raise ValueError("a windowed model needs an incumbent")
    g = size_unit(problem)
    cap = capacity // g
    model = cp_model.CpModel()
    objective: list[tuple[int, object]] = []  # (coef, literal): coef * literal
    const = 0
    per_step: dict[int, list] = defaultdict(list)
    xs, ys = [], []
    keep_vars: dict[tuple[int, int], object] = {}
    group_var: dict[tuple[int, int], object] = {}  # (i, first use of group) -> offset var or int
    group_of: dict[int, list[int]] = {}

    for i, uses in enumerate(tl.uses):
        m = len(uses)
        if m == 0:
            continue
        s = problem.sizes[i] // g
        free = [a <= u <= b for u in uses]
        keep: list = []
        for j in range(m - 1):
            if fixed_keep is not None:
                keep.append(bool(fixed_keep[i][j]))
            elif free[j] and free[j + 1]:
                lit = model.NewBoolVar("")
                keep_vars[(i, j)] = lit
                keep.append(lit)
            else:
                keep.append(bool(incumbent.keep[i][j]))
        # costs
        var_keeps = [k for k in keep if not isinstance(k, bool)]
        const += s * sum(1 for k in keep if k is False)
        for lit in var_keeps:
            objective.append((-s, lit))
            const += s
        if store_cost(problem, i):
            if any(k is False for k in keep):
                const += s
            elif var_keeps:
                st = model.NewBoolVar("")
                for lit in var_keeps:
                    model.AddImplication(lit.Not(), st)
                objective.append((s, st))
                if incumbent is not None:
                    model.AddHint(st, not all(incumbent.keep[i]))
        # capacity-only contributions (point uses and kept gaps inside the window)
        groups: list[int] = []  # group index of each use: uses joined by constant keeps
        for j in range(m):
            groups.append(groups[j - 1] if j and keep[j - 1] is True else j)
        group_of[i] = groups
        if addresses:
            for j in range(m):
                root = groups[j]
                if (i, root) in group_var:
                    continue
                members = [x for x in range(m) if groups[x] == root]
                if window is not None and not all(free[x] for x in members):
                    group_var[(i, root)] = incumbent.offset[i][root] // g
                else:
                    group_var[(i, root)] = model.NewIntVar(0, cap - s, "")
            for j in range(m - 1):
                lit = keep[j]
                if not isinstance(lit, bool):
                    oa, ob = group_var[(i, groups[j])], group_var[(i, groups[j + 1])]
                    model.Add(oa == ob).OnlyEnforceIf(lit)
        for j in range(m):
            if free[j]:
                per_step[uses[j]].append((s, None))
                if addresses:
                    xs.append(model.NewFixedSizeIntervalVar(uses[j], 1, ""))
                    ys.append(model.NewFixedSizeIntervalVar(group_var[(i, groups[j])], s, ""))
        for j in range(m - 1):
            lo, hi = max(uses[j] + 1, a), min(uses[j + 1] - 1, b)
            lit = keep[j]
            if lo > hi or lit is False:
                continue
            for t in range(lo, hi + 1):
                per_step[t].append((s, None if lit is True else lit))
            if addresses:
                off = group_var.get((i, groups[j]))
                if off is None:  # a kept gap crossing a window whose ends are both outside
                    off = incumbent.offset[i][j] // g
                if lit is True:
                    xs.append(model.NewFixedSizeIntervalVar(lo, hi - lo + 1, ""))
                    ys.append(model.NewFixedSizeIntervalVar(off, s, ""))
                else:
                    xs.append(model.NewOptionalFixedSizeIntervalVar(lo, hi - lo + 1, lit, ""))
                    ys.append(model.NewOptionalFixedSizeIntervalVar(off, s, lit, ""))

    for t in range(a, b + 1):
        items = per_step.get(t, [])
        fixed = sum(s for s, lit in items if lit is None)
        optional = [(s, lit) for s, lit in items if lit is not None]
        if fixed > cap:
            return ModelResult("infeasible", None, None, None, lower_bound, time.perf_counter() - start_time)
        if fixed + sum(s for s, _ in optional) > cap:
            model.Add(sum(s * lit for s, lit in optional) <= cap - fixed)
    if addresses and xs:
        model.AddNoOverlap2D(xs, ys)

    obj_expr = sum(c * lit for c, lit in objective) if objective else 0
    if objective:
        model.Minimize(obj_expr)
        lb_units = -(-lower_bound // g)
        if lb_units > const:
            model.Add(obj_expr + const >= lb_units)
    # hints
    if incumbent is not None:
        for (i, j), lit in keep_vars.items():
            model.AddHint(lit, bool(incumbent.keep[i][j]))
        if addresses:
            for (i, root), var in group_var.items():
                if not isinstance(var, int):
                    model.AddHint(var, incumbent.offset[i][root] // g)
    elif hint_keep is not None:
        for (i, j), lit in keep_vars.items():
            model.AddHint(lit, bool(hint_keep[i][j]))

    solver = cp_model.CpSolver()
    configure(solver, time_limit, config)
    if progress is not None and objective:
        status = solver.Solve(model, _Progress(progress, g, const * g))
    else:
        status = solver.Solve(model)
    wall = time.perf_counter() - start_time
    name = _STATUS.get(status, "unknown")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return ModelResult(name, None, None, None, lower_bound, wall)
    objective_bytes = (int(round(solver.ObjectiveValue())) + const) * g if objective else const * g
    bound = (int(math.ceil(solver.BestObjectiveBound() - 1e-6)) + const) * g if objective else objective_bytes
    if status == cp_model.OPTIMAL:
        bound = objective_bytes
    keep_out = []
    for i, uses in enumerate(tl.uses):
        row = []
        for j in range(max(0, len(uses) - 1)):
            lit = keep_vars.get((i, j))
            if lit is not None:
                row.append(bool(solver.BooleanValue(lit)))
            elif fixed_keep is not None:
                row.append(bool(fixed_keep[i][j]))
            else:
                row.append(bool(incumbent.keep[i][j]))
        keep_out.append(tuple(row))
    keep_out = tuple(keep_out)
    solution = None
    if addresses:
        offsets = []
        for i, uses in enumerate(tl.uses):
            row = []
            for j in range(len(uses)):
                var = group_var.get((i, group_of[i][j])) if i in group_of else None
                if var is None or not (a <= uses[j] <= b):
                    row.append(incumbent.offset[i][j])
                elif isinstance(var, int):
                    row.append(var * g)
                else:
                    row.append(solver.Value(var) * g)
            offsets.append(tuple(row))
        # uses joined by a kept gap share the offset of the first (re-derive to be exact)
        fixed_offsets = []
        for i, row in enumerate(offsets):
            row = list(row)
            for j in range(len(row) - 1):
                if keep_out[i][j]:
                    row[j + 1] = row[j]
            fixed_offsets.append(tuple(row))
        solution = Solution(tuple(order), keep_out, tuple(fixed_offsets))
    return ModelResult(name, keep_out, solution, objective_bytes, bound, wall)
