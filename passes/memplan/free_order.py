"""The free-order capacity-only model: a time-indexed CP-SAT model over every topological order.

`d[k, t]` says kernel k has run by step t (non-decreasing in t; exactly t+1 kernels by step t),
`r[i, t]` that tensor i is resident at step t, `l[i, t]` that it is (re)loaded before step t.
No addresses: its optimum is a lower bound on the traffic of any order, and its solution gives an
order and the replacement decisions, which the fixed-order model then places.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from tilegraph.passes.lazy import cp_model

from .bounds import _bitsets
from .cpsat import SolverConfig, configure, progress_callback, size_unit, status_name
from .problem import MemoryProblem, TensorKind
from .solution import Solution, Timeline, store_cost


@dataclass(frozen=True)
class FreeOrderResult:
    status: str
    order: tuple[int, ...] | None
    keep: tuple | None  # keep flags for `order` taken from the model's residency
    objective: int | None
    bound: int  # valid for every topological order
    wall: float


def _ancestors(problem: MemoryProblem) -> tuple[list[int], list[int]]:
    """Number of ancestors and descendants of each kernel."""
    anc, desc = _bitsets(problem)
    return [bin(a).count("1") for a in anc], [bin(d).count("1") for d in desc]


def model_cells(problem: MemoryProblem) -> int:
    """Time-indexed variables of the free-order model (kernel-run and residency flags): its size,
    small on narrow graphs of hundreds of kernels (DARTS cells), large on wide random DAGs."""
    T = problem.num_kernels
    n_anc, n_desc = _ancestors(problem)
    runs = sum(T - 1 - n_desc[k] - n_anc[k] for k in range(T))
    resident = sum(max(T - 1 - n_desc[k] for k in users) - min(n_anc[k] for k in users) + 1
                   for users in problem.users if users)
    return runs + resident


def _broad_portfolio(solver: cp_model.CpSolver, config: SolverConfig, kernels: int) -> None:
    """Interleave every subsolver on small graphs, else run `wide_workers` workers (see SolverConfig).
    Deterministic mode is interleaved already and keeps its worker count."""
    if config.deterministic:
        return
    if kernels <= config.interleave_limit:
        solver.parameters.interleave_search = True
    else:
        solver.parameters.num_workers = max(solver.parameters.num_workers, config.wide_workers)


def _hint_loads(model: cp_model.CpModel, aux: tuple, resident: set[int], made: int) -> None:
    """Hint the load and spill variables of one tensor from its hinted residency, so the hint is a
    complete solution the solver starts from rather than a partial one it may fail to extend."""
    lo, loads, st = aux
    values = [1 if t in resident and t - 1 not in resident and t != made else 0 for t in range(lo, lo + len(loads))]
    for v, value in zip(loads, values):
        model.AddHint(v, value)
    if st is not None:
        model.AddHint(st, 1 if any(values) else 0)  # only intermediates spill: their first value is 0


def run_flags(model: cp_model.CpModel, problem: MemoryProblem, asap: list[int], alap: list[int], one, zero
              ) -> list[list]:
    """d[k][t], "kernel k has run by step t": 0 before `asap[k]`, 1 from `alap[k]`, non-decreasing,
    t+1 kernels by step t, a kernel after its predecessors."""
    K = T = problem.num_kernels
    d = []
    for k in range(K):
        row = [zero if t < asap[k] else one if t >= alap[k] else model.NewBoolVar("") for t in range(T)]
        for t in range(asap[k] + 1, alap[k]):
            model.AddImplication(row[t - 1], row[t])
        d.append(row)
    for t in range(T - 1):
        model.Add(sum(d[k][t] for k in range(K)) == t + 1)
    for k in range(K):
        for p in problem.preds[k]:
            for t in range(asap[k], alap[k]):
                if t == 0:
                    model.Add(d[k][t] == 0)
                else:
                    model.AddImplication(d[k][t], d[p][t - 1])
    return d


def ran_at(d: list[list], k: int, t: int):
    """Kernel k runs at step t (a linear expression of the run flags)."""
    return d[k][t] - (d[k][t - 1] if t > 0 else 0)


def residency_flags(model: cp_model.CpModel, problem: MemoryProblem, i: int, d: list[list], asap: list[int],
                    alap: list[int]) -> tuple[dict, list]:
    """For tensor i over the steps its users can run: r[t] "resident at step t" (at every use, never
    before its producer) and the load flags l[t] ("(re)loaded before step t", not when produced there)."""
    users = problem.users[i]
    lo, hi = min(asap[k] for k in users), max(alap[k] for k in users)
    prod = problem.producer[i]
    r = {t: model.NewBoolVar("") for t in range(lo, hi + 1)}
    loads = []
    for t in range(lo, hi + 1):
        for k in users:
            if asap[k] <= t <= alap[k]:
                model.Add(r[t] >= ran_at(d, k, t))
        if prod >= 0 and t < alap[prod]:
            model.Add(r[t] <= d[prod][t])
        lt = model.NewBoolVar("")
        prev = r[t - 1] if t - 1 in r else 0
        created = ran_at(d, prod, t) if prod >= 0 and asap[prod] <= t <= alap[prod] else 0
        model.Add(lt >= r[t] - prev - created)
        loads.append(lt)
    return r, loads


def solve_free_order(problem: MemoryProblem, capacity: int, *, hint: Solution | None = None, lower_bound: int = 0,
                     time_limit: float = 5.0, config: SolverConfig = SolverConfig(), progress=None,
                     exclude: tuple[tuple[int, ...], ...] = (),
                     band: tuple[tuple[int, ...], int] | None = None) -> FreeOrderResult:
    """Optimum over all orders of the capacity-only model, except the orders in `exclude`.

    Excluding orders whose decisions could not be placed in address space asks for another order;
    the bound is then valid only for the orders not excluded (callers keep it out of the plan's bound).
    With `band=(order, width)` only orders moving each kernel at most `width` steps from its place in
    `order` are searched (a neighbourhood small enough for large graphs); the bound returned is then
    just `lower_bound`.
    """
    start_time = time.perf_counter()
    K = problem.num_kernels
    g = size_unit(problem)
    cap = capacity // g
    asap, alap = _step_windows(problem, band)
    model = cp_model.CpModel()
    one, zero = model.NewConstant(1), model.NewConstant(0)
    # in this order: CP-SAT's search depends on the order in which variables and constraints are created
    d = run_flags(model, problem, asap, alap, one, zero)
    tensors = _tensor_flags(model, problem, d, asap, alap, g)
    _add_capacity(model, tensors.occupancy, cap)
    for order in exclude:
        _exclude_order(model, d, order, one, zero)
    _set_objective(model, tensors, lower_bound, g)
    if hint is not None:
        _add_hint(model, problem, hint, d, tensors, one, zero)

    solver = cp_model.CpSolver()
    configure(solver, time_limit, config)
    _broad_portfolio(solver, config, K)
    if progress is not None:
        status = solver.Solve(model, progress_callback(progress, g, tensors.const * g))
    else:
        status = solver.Solve(model)
    wall = time.perf_counter() - start_time
    return _result(problem, solver, status, d, tensors, g, lower_bound, band, wall)


@dataclass(frozen=True)
class _TensorFlags:
    """The model's per-tensor part: residency flags per step, (first step, load flags, spill flag),
    what is resident per step (size, flag), the objective's (coefficient, flag) terms and its constant."""

    r_vars: list[dict[int, cp_model.IntVar]]  # tensor -> step -> resident flag (empty for unused tensors)
    aux: dict[int, tuple]  # tensor -> (first step, load per step, spill)
    occupancy: list[list[tuple[int, cp_model.IntVar]]]  # step -> (size in units, resident flag)
    objective: list[tuple[int, cp_model.IntVar]]
    const: int  # traffic in units that no decision changes (minus the compulsory first loads)


def _step_windows(problem: MemoryProblem, band: tuple[tuple[int, ...], int] | None) -> tuple[list[int], list[int]]:
    """The earliest and latest step of each kernel: after its ancestors and before its descendants,
    and within `width` steps of its place in the band's order when there is one."""
    T = problem.num_kernels
    n_anc, n_desc = _ancestors(problem)
    asap = n_anc
    alap = [T - 1 - d for d in n_desc]
    if band is not None:
        center, width = band
        for t, k in enumerate(center):
            asap[k], alap[k] = max(asap[k], t - width), min(alap[k], t + width)
    return asap, alap


def _tensor_flags(model: cp_model.CpModel, problem: MemoryProblem, d: list[list], asap: list[int],
                  alap: list[int], g: int) -> _TensorFlags:
    """Each used tensor's residency and load flags, and a spill flag when it has no DRAM copy; the
    traffic they cost (loads and spills, less the compulsory first load of inputs and weights)."""
    T = problem.num_kernels
    objective = []
    const = 0
    occupancy: list[list] = [[] for _ in range(T)]
    r_vars = []
    aux: dict[int, tuple] = {}  # tensor -> (first step, load per step, spill)
    for i in range(problem.num_tensors):
        users = problem.users[i]
        if not users:
            r_vars.append({})
            continue
        s = problem.sizes[i] // g
        lo = min(asap[k] for k in users)
        r, loads = residency_flags(model, problem, i, d, asap, alap)
        r_vars.append(r)
        for t, v in r.items():
            occupancy[t].append((s, v))
        for lt in loads:
            objective.append((s, lt))
        if problem.kinds[i] is not TensorKind.INTERMEDIATE:
            const -= s  # the first load is compulsory
        st = None
        if store_cost(problem, i):
            st = model.NewBoolVar("")
            for lt in loads:
                model.AddImplication(lt, st)
            objective.append((s, st))
        aux[i] = (lo, loads, st)
    return _TensorFlags(r_vars, aux, occupancy, objective, const)


def _add_capacity(model: cp_model.CpModel, occupancy: list[list[tuple[int, cp_model.IntVar]]], cap: int) -> None:
    """The resident bytes of each step within the capacity (only where they could exceed it)."""
    for t in range(len(occupancy)):
        if sum(s for s, _ in occupancy[t]) > cap:
            model.Add(sum(s * v for s, v in occupancy[t]) <= cap)


def _exclude_order(model: cp_model.CpModel, d: list[list], order: tuple[int, ...], one: cp_model.IntVar,
                   zero: cp_model.IntVar) -> None:
    """A no-good against `order`: some kernel runs at another step (nothing when the run flags already
    rule the order out)."""
    clause = []
    for t, k in enumerate(order):
        here, before = d[k][t], (d[k][t - 1] if t > 0 else zero)
        for literal in (here.Not() if here is not one and here is not zero else None,
                        before if before is not one and before is not zero else None):
            if literal is not None:
                clause.append(literal)
        if here is zero or before is one:
            clause = None  # k can never run at step t: the order is infeasible anyway
            break
    if clause is not None:
        model.AddBoolOr(clause)


def _set_objective(model: cp_model.CpModel, tensors: _TensorFlags, lower_bound: int, g: int) -> None:
    """Minimize the traffic; a known lower bound on it (bytes) becomes a constraint, which helps the proof."""
    obj = sum(c * v for c, v in tensors.objective)
    model.Minimize(obj)
    lb_units = -(-lower_bound // g)
    if lb_units > tensors.const:
        model.Add(obj + tensors.const >= lb_units)


def _add_hint(model: cp_model.CpModel, problem: MemoryProblem, hint: Solution, d: list[list],
              tensors: _TensorFlags, one: cp_model.IntVar, zero: cp_model.IntVar) -> None:
    """Warm start from `hint`: its order as run flags, its keeps as residency flags, and the loads and
    spills they imply, so that the hint is a complete solution."""
    K = T = problem.num_kernels
    tl = Timeline(problem, hint.order)
    pos = tl.pos
    for k in range(K):
        for t in range(T):
            v = d[k][t]
            if not isinstance(v, int) and v is not one and v is not zero:
                model.AddHint(v, 1 if pos[k] <= t else 0)
    for i, uses in enumerate(tl.uses):
        resident = set()
        for j in range(len(uses)):
            resident.add(uses[j])
            if j + 1 < len(uses) and hint.keep[i][j]:
                resident.update(range(uses[j] + 1, uses[j + 1]))
        for t, v in tensors.r_vars[i].items():
            model.AddHint(v, 1 if t in resident else 0)
        if i in tensors.aux:
            _hint_loads(model, tensors.aux[i], resident, pos[problem.producer[i]] if problem.producer[i] >= 0 else -1)


def _result(problem: MemoryProblem, solver: cp_model.CpSolver, status: int, d: list[list], tensors: _TensorFlags,
            g: int, lower_bound: int, band: tuple[tuple[int, ...], int] | None, wall: float) -> FreeOrderResult:
    """The order and keep flags of the best solution, its traffic and the bound (bytes); without a
    solution, CP-SAT's bound where it holds for every order."""
    K = T = problem.num_kernels
    const = tensors.const
    name = status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        bound = max(lower_bound, (int(math.ceil(solver.BestObjectiveBound() - 1e-6)) + const) * g) \
            if name == "unknown" and band is None else lower_bound
        return FreeOrderResult(name, None, None, None, bound, wall)
    objective_bytes = (int(round(solver.ObjectiveValue())) + const) * g
    bound = objective_bytes if status == cp_model.OPTIMAL else \
        (int(math.ceil(solver.BestObjectiveBound() - 1e-6)) + const) * g
    pos = [next(t for t in range(T) if solver.Value(d[k][t])) for k in range(K)]
    order = tuple(sorted(range(K), key=lambda k: pos[k]))
    tl = Timeline(problem, order)
    r_vars = tensors.r_vars
    keep = tuple(tuple(all(solver.Value(r_vars[i][t]) for t in range(uses[j] + 1, uses[j + 1]))
                       for j in range(len(uses) - 1)) for i, uses in enumerate(tl.uses))
    if band is not None:
        bound = lower_bound
    return FreeOrderResult(name, order, keep, objective_bytes, max(bound, lower_bound), wall)
