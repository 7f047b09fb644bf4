"""Minimum footprint: the smallest arena in which the graph runs with no spill (MODeL/OLLA's objective).

Operator order and addresses are chosen together. Upper bound: TFLite Micro's greedy-by-size
placement (largest tensor first, at the lowest offset free over its lifetime) on the candidate
orders. Then CP-SAT over kernel positions and tensor offsets, minimising the arena: a tensor lives
from its first to its last use, and lifetimes x address ranges must not overlap (NoOverlap2D),
warm-started from the best greedy plan. Lower bound: the largest kernel working set, raised by
CP-SAT's proof. The framework's own order is reported beside it: its peak live bytes (what any
placement in that order needs at least) and its greedy arena.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

from tilegraph.passes.lazy import cp_model

from tilegraph.ir.memory_plan import MemoryPlan

from .api import plan_from_solution
from .cpsat import SolverConfig, configure, size_unit
from .orders import candidate_orders
from .problem import MemoryProblem, peak_live, positions
from .solution import Solution


@dataclass(frozen=True)
class Footprint:
    """The smallest arena found with no spill, its proven lower bound, and the framework order's figures."""

    plan: MemoryPlan  # capacity = the arena; no non-compulsory traffic
    bound: int  # no spill-free plan fits in fewer bytes
    framework_peak: int  # peak live bytes of the program's own order
    framework_greedy: int  # greedy-by-size arena in the program's own order

    @property
    def arena(self) -> int:
        return self.plan.capacity

    @property
    def gap(self) -> float:
        return (self.arena - self.bound) / self.arena if self.arena else 0.0


def lifetimes(problem: MemoryProblem, order: tuple[int, ...]) -> list[tuple[int, int] | None]:
    """Per tensor: (first, last) step of its uses in `order`; None for a tensor no kernel uses."""
    pos = positions(order)
    out: list[tuple[int, int] | None] = []
    for users in problem.users:
        steps = [pos[k] for k in users]
        out.append((min(steps), max(steps)) if steps else None)
    return out


def greedy_by_size(problem: MemoryProblem, order: tuple[int, ...]) -> tuple[int, list[int]]:
    """TFLite Micro's GreedyMemoryPlanner: (arena bytes, offset per tensor) for `order`."""
    life = lifetimes(problem, order)
    ranked = sorted((i for i in range(problem.num_tensors) if life[i] is not None),
                    key=lambda i: (-problem.sizes[i], life[i][0], i))
    offsets = [0] * problem.num_tensors
    placed: list[int] = []
    arena = 0
    for i in ranked:
        (start, end), size = life[i], problem.sizes[i]
        busy = sorted((offsets[j], offsets[j] + problem.sizes[j]) for j in placed
                      if life[j][0] <= end and start <= life[j][1])
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        offsets[i] = offset
        placed.append(i)
        arena = max(arena, offset + size)
    return arena, offsets


def _solution(problem: MemoryProblem, order: tuple[int, ...], offsets: list[int]) -> Solution:
    """The solvers' form of a spill-free plan: every gap kept, one offset per tensor."""
    pos = positions(order)
    uses = [sorted({pos[k] for k in users}) for users in problem.users]
    return Solution(order, tuple((True,) * max(0, len(u) - 1) for u in uses),
                    tuple((offsets[i],) * len(u) for i, u in enumerate(uses)))


@dataclass(frozen=True)
class _Exact:
    order: tuple[int, ...] | None
    offsets: list[int] | None
    arena: int | None
    bound: int


def _solve_exact(problem: MemoryProblem, hint_order: tuple[int, ...], hint_offsets: list[int], upper: int,
                 time_limit: float, config: SolverConfig) -> _Exact:
    """CP-SAT over positions and offsets (in units of the sizes' gcd), minimising the arena."""
    unit = size_unit(problem)
    K, n = problem.num_kernels, problem.num_tensors
    sizes = [s // unit for s in problem.sizes]
    cap = upper // unit + 1
    m = cp_model.CpModel()
    pos = [m.NewIntVar(0, K - 1, f"pos{k}") for k in range(K)]
    m.AddAllDifferent(pos)
    for k, preds in enumerate(problem.preds):
        for p in preds:
            m.Add(pos[p] < pos[k])
    arena = m.NewIntVar(0, cap, "arena")
    times, spaces, offset = [], [], [None] * n
    for i, users in enumerate(problem.users):
        if not users:
            continue
        first, last = m.NewIntVar(0, K - 1, f"first{i}"), m.NewIntVar(0, K - 1, f"last{i}")
        m.AddMinEquality(first, [pos[k] for k in users])
        m.AddMaxEquality(last, [pos[k] for k in users])
        span, end = m.NewIntVar(1, K, f"span{i}"), m.NewIntVar(1, K, f"end{i}")
        m.Add(end == last + 1)
        times.append(m.NewIntervalVar(first, span, end, f"life{i}"))
        offset[i] = m.NewIntVar(0, max(0, cap - sizes[i]), f"off{i}")
        spaces.append(m.NewFixedSizeIntervalVar(offset[i], sizes[i], f"addr{i}"))
        m.Add(arena >= offset[i] + sizes[i])
    m.AddNoOverlap2D(times, spaces)
    m.Minimize(arena)
    hint_pos = positions(hint_order)
    for k in range(K):
        m.AddHint(pos[k], hint_pos[k])
    for i in range(n):
        if offset[i] is not None:
            m.AddHint(offset[i], hint_offsets[i] // unit)
    solver = cp_model.CpSolver()
    configure(solver, time_limit, config)
    status = solver.Solve(m)
    bound = int(solver.BestObjectiveBound() + 1 - 1e-6) * unit if status != cp_model.UNKNOWN else 0
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _Exact(None, None, None, bound)
    order = tuple(sorted(range(K), key=lambda k: solver.Value(pos[k])))
    offsets = [solver.Value(o) * unit if o is not None else 0 for o in offset]
    return _Exact(order, offsets, solver.Value(arena) * unit, bound)


def min_footprint(problem: MemoryProblem, *, time_limit: float = 10.0,
                  config: SolverConfig = SolverConfig(deterministic=True)) -> Footprint:
    """The smallest spill-free arena found within `time_limit` seconds, with its lower bound."""
    start = time.perf_counter()
    program = tuple(range(problem.num_kernels))
    framework_greedy, _ = greedy_by_size(problem, program)
    best = min(((greedy_by_size(problem, order), name, order) for name, order in candidate_orders(problem).items()),
               key=lambda found: (found[0][0], found[1]))
    (arena, offsets), source, order = best
    source = f"greedy-by-size {source}"
    bound = problem.max_working_set()[0]
    if problem.num_kernels and arena > bound and time_limit > 0:
        exact = _solve_exact(problem, order, offsets, arena, time_limit, config)
        bound = max(bound, exact.bound)
        if exact.arena is not None and exact.arena < arena:
            arena, offsets, order, source = exact.arena, exact.offsets, exact.order, "cpsat"
    bound = min(bound, arena)
    plan = plan_from_solution(problem, _solution(problem, order, offsets), arena, solver=source, order_mode="free")
    plan = replace(plan, status="optimal" if bound >= arena else "feasible", solve_time=time.perf_counter() - start)
    return Footprint(plan, bound, peak_live(problem, program), framework_greedy)


def format_footprint(found: Footprint) -> str:
    """The report of `tilegraph memplan --min-footprint`."""
    from .report import format_bytes

    lines = [f"minimum footprint: {format_bytes(found.arena)} arena with no spill "
             f"({found.plan.status}, bound {format_bytes(found.bound)}, gap {found.gap:.1%}, by {found.plan.solver})",
             f"  framework order: peak live {format_bytes(found.framework_peak)}, "
             f"greedy-by-size arena {format_bytes(found.framework_greedy)}"]
    if found.framework_greedy:
        lines.append(f"  saving against the framework's greedy arena: "
                     f"{1 - found.arena / found.framework_greedy:.1%}")
    return "\n".join(lines)


__all__ = ["Footprint", "min_footprint", "greedy_by_size", "lifetimes", "format_footprint"]
