"""The partition bound: a traffic lower bound over every order for graphs too big for the free-order model.

Cut the kernels into parts (consecutive runs of a topological order). A tensor is *internal* to a
part when all its users (producer and consumers) are in it. Take any plan of the whole graph and
look only at one part's steps, in the plan's order (an order of the part's kernels respecting
reachability in the whole graph): an internal tensor resident at two consecutive of these steps
without a reload in between is kept in this restricted plan, and at each step the running kernel's
whole working set plus the resident internal tensors fit in the capacity. So the part's free-order
capacity model, with every external tensor occupying its bytes for free at the steps that use it,
bounds the traffic of the part's internal tensors. A tensor internal to no part but live in every
order at some kernels gets one flag, "evicted at least once": evicted, it pays a reload and its
spill; never evicted, it occupies those kernels' steps in every part. All parts go in one CP-SAT
model linked by these flags, with the forced-live cover rows (bounds.py) as a stronger relaxation.

Measured (15 s, 8 workers; benchmarks/memplan.py's rand300): without weights the cover bound's
96256 -> 121856, 48128 -> 56320, 15360 -> 27648 B; with weights 289792 -> 316416 B. Cutting the parts
into separate models added almost nothing over the cover bound: the long-range tensors dominate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from tilegraph.passes.lazy import cp_model

from .bounds import _bitsets, cover_rows, forced_live
from .cpsat import SolverConfig, configure, size_unit
from .free_order import _ancestors, _broad_portfolio, ran_at, residency_flags, run_flags
from .problem import MemoryProblem, TensorKind
from .solution import gap_cost, store_cost


@dataclass(frozen=True)
class _PartProblem(MemoryProblem):
    """A MemoryProblem whose precedence also has the edges `order_preds` (reachability through kernels
    outside the part), so its orders are exactly the restrictions of the whole graph's orders."""

    order_preds: tuple[tuple[int, ...], ...] = ()

    @cached_property
    def preds(self) -> tuple[tuple[int, ...], ...]:
        return self.order_preds


def parts_of(order, part_size: int) -> list[list[int]]:
    """Consecutive runs of `order`, of about `part_size` kernels each (equal lengths)."""
    order = list(order)
    n = max(1, round(len(order) / max(1, part_size)))
    bounds = [round(j * len(order) / n) for j in range(n + 1)]
    return [order[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


def internal_tensors(problem: MemoryProblem, part: list[int]) -> list[int]:
    """Tensors whose users are all in `part` (and which have users)."""
    inside = set(part)
    found = {i for k in part for i in problem.io[k]}
    return sorted(i for i in found if all(u in inside for u in problem.users[i]))


def subproblem(problem: MemoryProblem, part: list[int], desc: list[int] | None = None) -> tuple[MemoryProblem, list[int]]:
    """The part's subproblem and its internal tensors (the subproblem's first tensors, in that order).

    Internal tensors keep their size and kind; every use of an external tensor becomes an input read by
    that kernel only (one use, so its only load is the compulsory first one: it costs nothing).
    """
    if desc is None:
        desc = _bitsets(problem)[1]
    ks = sorted(part)  # kernel ids are topological: so are the part's, in id order
    local = {k: j for j, k in enumerate(ks)}
    internal = internal_tensors(problem, ks)
    tid = {i: j for j, i in enumerate(internal)}
    names = [problem.tensor_names[i] for i in internal]
    sizes = [problem.sizes[i] for i in internal]
    kinds = [problem.kinds[i] for i in internal]
    outs = [problem.is_output[i] for i in internal]
    k_in, k_out = [], []
    for k in ks:
        ins = [tid[i] for i in problem.kernel_inputs[k] if i in tid]
        for i in problem.io[k]:
            if i not in tid:
                ins.append(len(names))
                names.append(f"{problem.tensor_names[i]}@{problem.kernel_names[k]}")
                sizes.append(problem.sizes[i])
                kinds.append(TensorKind.INPUT)
                outs.append(False)
        k_in.append(tuple(dict.fromkeys(ins)))
        k_out.append(tuple(tid[i] for i in problem.kernel_outputs[k] if i in tid))
    # precedence: reachability in the whole graph among the part's kernels, transitively reduced
    mask = 0
    for k in ks:
        mask |= 1 << k
    reach = {k: desc[k] & mask for k in ks}
    preds: list[list[int]] = [[] for _ in ks]
    for a in ks:
        implied = 0
        for c in _bits(reach[a]):
            implied |= reach[c]
        for b in _bits(reach[a] & ~implied):
            preds[local[b]].append(local[a])
    sub = _PartProblem(tuple(names), tuple(sizes), tuple(kinds), tuple(outs),
                       tuple(problem.kernel_names[k] for k in ks), tuple(k_in), tuple(k_out),
                       order_preds=tuple(tuple(sorted(p)) for p in preds))
    return sub, internal


def _bits(mask: int):
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _add_part(model: cp_model.CpModel, sub: MemoryProblem, cap: int, g: int, shared: dict[int, object],
              occupants: list[tuple[int, int, tuple[int, ...]]], evicted: dict[int, object]) -> tuple[list, int]:
    """The free-order capacity model of one part (as `solve_free_order` builds it) inside `model`; the
    occupants (tensor, size, local kernels) share their eviction flag `shared[tensor]` across parts.
    `evicted[i]` (subproblem tensor) may be 1 only if the tensor is reloaded.
    Returns the objective terms (units) and the constant (minus the compulsory first loads)."""
    T = sub.num_kernels
    n_anc, n_desc = _ancestors(sub)
    asap, alap = n_anc, [T - 1 - d for d in n_desc]
    d = run_flags(model, sub, asap, alap, model.NewConstant(1), model.NewConstant(0))

    def x(k: int, t: int):
        return ran_at(d, k, t)

    objective, const = [], 0
    occupancy: list[list] = [[] for _ in range(T)]
    for i in range(sub.num_tensors):
        users = sub.users[i]
        if not users:
            continue
        s = sub.sizes[i] // g
        if len(users) == 1:  # resident at its one step only (more only costs): no variables
            k = users[0]
            for t in range(asap[k], alap[k] + 1):
                occupancy[t].append((s, x(k, t)))
            continue
        r, loads = residency_flags(model, sub, i, d, asap, alap)
        for t, v in r.items():
            occupancy[t].append((s, v))
        objective += [(s, lt) for lt in loads]
        first = 0 if sub.kinds[i] is TensorKind.INTERMEDIATE else 1
        const -= s * first
        if i in evicted:
            model.Add(evicted[i] <= sum(loads) - first)
        if store_cost(sub, i):
            st = model.NewBoolVar("")
            for lt in loads:
                model.AddImplication(lt, st)
            objective.append((s, st))
    for i, size, kernels in occupants:
        for t in range(T):
            here = [k for k in kernels if asap[k] <= t <= alap[k]]
            if here:
                y = model.NewBoolVar("")
                model.Add(y >= sum(x(k, t) for k in here) - shared[i])
                occupancy[t].append((size // g, y))
    for t in range(T):
        if sum(s for s, _ in occupancy[t]) > cap:
            model.Add(sum(s * v for s, v in occupancy[t]) <= cap)
    return objective, const


def joint_partition_bound(problem: MemoryProblem, capacity: int, *, part_size: int = 30, time_limit: float = 10.0,
                          order=None, config: SolverConfig = SolverConfig()) -> int:
    """The parts' free-order models in one CP-SAT model, linked by one eviction flag per tensor internal
    to no part: never evicted, it occupies every part's steps where it is live in every order; evicted,
    it pays a reload and its spill once. Lower bound on the traffic of every order, at least the sum of
    the parts' own optima and (up to the time limit) the cover bound."""
    order = tuple(range(problem.num_kernels)) if order is None else tuple(order)
    if not order:
        return 0
    g = size_unit(problem)
    cap = capacity // g
    parts = parts_of(order, part_size)
    desc = _bitsets(problem)[1]
    built = [subproblem(problem, part, desc) for part in parts]
    charged = {i for _, internal in built for i in internal}
    where = {}
    for j, part in enumerate(parts):
        for n, k in enumerate(sorted(part)):
            where[k] = (j, n)
    live_sets = forced_live(problem)
    live_at: dict[int, dict[int, list[int]]] = {}
    for k, live in enumerate(live_sets):
        for i in live:
            if i not in charged:
                j, n = where[k]
                live_at.setdefault(i, {}).setdefault(j, []).append(n)
    model = cp_model.CpModel()
    shared = {i: model.NewBoolVar("") for i in live_at}
    objective = [((gap_cost(problem, i) + store_cost(problem, i)) // g, z) for i, z in shared.items()]
    const = 0
    # the cover rows, redundant but a stronger relaxation: at each kernel, the bytes live in every order
    # and not evicted fit next to its working set
    flag = dict(shared)
    for excess, live in cover_rows(problem, cap, g, live_sets):
        for i in live:
            if i not in flag:
                flag[i] = model.NewBoolVar("")
        model.Add(sum((problem.sizes[i] // g) * flag[i] for i in live) >= excess)
    for j, (sub, internal) in enumerate(built):
        occ = [(i, problem.sizes[i], tuple(by[j])) for i, by in live_at.items() if j in by]
        evicted = {n: flag[i] for n, i in enumerate(internal) if i in flag}
        terms, c = _add_part(model, sub, cap, g, shared, occ, evicted)
        objective += terms
        const += c
    model.Minimize(sum(c * v for c, v in objective))
    solver = cp_model.CpSolver()
    configure(solver, time_limit, config)
    _broad_portfolio(solver, config, problem.num_kernels)  # 8 workers prove far more than 2 here too
    status = solver.Solve(model)
    if status == cp_model.OPTIMAL:
        return max(0, int(round(solver.ObjectiveValue())) + const) * g
    if status in (cp_model.FEASIBLE, cp_model.UNKNOWN):
        return max(0, int(math.ceil(solver.BestObjectiveBound() - 1e-6)) + const) * g
    return 0
