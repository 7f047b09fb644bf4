"""A traffic lower bound that holds for every topological order: the forced-live cover.

When kernel k runs, a tensor used by an ancestor of k and by a descendant of k (and not by k) is
live in every order. Whatever of it is not resident at k's step has been evicted at least once,
which costs at least a reload (plus a spill if it has no DRAM copy). So with z_i = "tensor i is
evicted at least once": for every kernel, the forced-live bytes kept must fit next to its working
set, i.e. sum over forced-live i of size_i * z_i >= working_set_k + forced_live_k - capacity, and
sum of cost_i * z_i is a lower bound. A small covering ILP, solved with CP-SAT.
"""
from __future__ import annotations

import math

from tilegraph.passes.lazy import cp_model

from .cpsat import SolverConfig, configure, size_unit
from .problem import MemoryProblem
from .solution import gap_cost, store_cost


def _bitsets(problem: MemoryProblem) -> tuple[list[int], list[int]]:
    K = problem.num_kernels
    anc = [0] * K
    for k in range(K):
        for p in problem.preds[k]:
            anc[k] |= anc[p] | (1 << p)
    desc = [0] * K
    for k in reversed(range(K)):
        for s in problem.succs[k]:
            desc[k] |= desc[s] | (1 << s)
    return anc, desc


def forced_live(problem: MemoryProblem) -> list[list[int]]:
    """For each kernel, the tensors it does not use that are live when it runs, in every order."""
    anc, desc = _bitsets(problem)
    out: list[list[int]] = [[] for _ in range(problem.num_kernels)]
    for i, users in enumerate(problem.users):
        if len(users) < 2:
            continue
        after = before = mask = 0
        for u in users:
            before |= desc[u]
            after |= anc[u]
            mask |= 1 << u
        live = before & after & ~mask
        while live:
            low = live & -live
            out[low.bit_length() - 1].append(i)
            live ^= low
    return out


def cover_rows(problem: MemoryProblem, cap: int, g: int, live: list[list[int]]) -> list[tuple[int, list[int]]]:
    """(excess, forced-live tensors) of each kernel whose working set and forced-live tensors (`live`,
    from `forced_live`) exceed the capacity `cap`; sizes in units of `g`. The evicted forced-live
    tensors of such a kernel cover at least the excess."""
    rows = []
    for k, tensors in enumerate(live):
        excess = problem.working_sets[k] // g + sum(problem.sizes[i] // g for i in tensors) - cap
        if excess > 0:
            rows.append((excess, tensors))
    return rows


def cover_bound(problem: MemoryProblem, capacity: int, *, time_limit: float = 1.0,
                config: SolverConfig = SolverConfig()) -> int:
    """The forced-live cover lower bound on non-compulsory traffic, in bytes (0 when nothing is forced)."""
    g = size_unit(problem)
    rows = cover_rows(problem, capacity // g, g, forced_live(problem))
    if not rows:
        return 0
    model = cp_model.CpModel()
    z = {}
    for _, live in rows:
        for i in live:
            if i not in z:
                z[i] = model.NewBoolVar("")
    for excess, live in rows:
        model.Add(sum((problem.sizes[i] // g) * z[i] for i in live) >= excess)
    model.Minimize(sum(((gap_cost(problem, i) + store_cost(problem, i)) // g) * v for i, v in z.items()))
    solver = cp_model.CpSolver()
    configure(solver, time_limit, config)
    status = solver.Solve(model)
    if status == cp_model.OPTIMAL:
        return int(round(solver.ObjectiveValue())) * g
    if status == cp_model.FEASIBLE:
        return max(0, int(math.ceil(solver.BestObjectiveBound() - 1e-6))) * g
    return 0
