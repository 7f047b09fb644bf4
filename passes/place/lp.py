"""The LP relaxation of placement: a lower bound on load (with memory and links), and rounding.

Variables x[i,p] in [0, 1] (task i's share on device p, only where p can run i and i's working
set fits p's memory) and the makespan C. Constraints, each valid for every placement:
- load: sum_i d[i,p] x[i,p] <= C on each device;
- memory-time: sum_i d[i,p] ws[i,p] x[i,p] <= capacity[p] C (the running task's inputs and
  outputs are resident while it runs, and tasks on one device never overlap);
- links: w[k,q] >= x[j,q] - x[producer,q] is the share of tensor k that must travel to q;
  each channel carries at most C of the transfers that can only use it, and the channels into q
  carry at most |channels into q| * C;
- paths: for chains of tasks found by separation, sum over the chain of the expected duration
  sum_p d[i,p] x[i,p] <= C (the critical path inside the LP);
- heads and tails: the tasks on p that cannot start before h (their head on p) and leave at
  least tau after them (their tail on p) run one at a time in [h, C - tau], for a grid of
  (h, tau) per device.
Solved with GLOP (deterministic). `round_assignments` turns x into device assignments for the
list scheduler: the largest share, then a few seeded samples.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

from tilegraph.passes.lazy import pywraplp

from .paths import heads, tails
from .problem import PlacementProblem


@dataclass(frozen=True)
class LPResult:
    value: float  # the LP optimum (a lower bound on the makespan, in ticks)
    x: tuple[tuple[tuple[int, float], ...], ...]  # per task: (device, share) with share > 0
    loc: dict[int, tuple[tuple[int, float], ...]]  # per parameter: (device, share)
    cuts: int
    optimal: bool


def allowed_devices(pb: PlacementProblem) -> list[list[int]]:
    """Devices that can run each task and hold its working set alongside the resident inputs."""
    return [[p for p in pb.capable[i] if pb.working_set(i, p) + pb.baseline[p] <= pb.capacity[p]]
            for i in range(pb.n)]


def _longest_path(pb: PlacementProblem, weight: list[float]) -> tuple[float, list[int]]:
    best = [0.0] * pb.n
    back = [-1] * pb.n
    for i in range(pb.n):
        base, arg = 0.0, -1
        for j in pb.preds[i]:
            if best[j] > base:
                base, arg = best[j], j
        best[i] = base + weight[i]
        back[i] = arg
    if not pb.n:
        return 0.0, []
    end = max(range(pb.n), key=lambda i: best[i])
    path = []
    while end >= 0:
        path.append(end)
        end = back[end]
    return max(best), path[::-1]


class _Model:
    """A GLOP model written through the low-level API (fast to build for thousands of variables)."""

    def __init__(self) -> None:
        self.solver = pywraplp.Solver.CreateSolver("GLOP")
        self.inf = self.solver.infinity()

    def var(self, lo: float, hi: float, name: str = ""):
        return self.solver.NumVar(lo, hi, name)

    def add(self, terms, lo: float, hi: float) -> None:
        ct = self.solver.Constraint(lo, hi)
        for coef, var in terms:
            if coef:
                ct.SetCoefficient(var, ct.GetCoefficient(var) + coef)


def solve_lp(pb: PlacementProblem, time_limit: float = 10.0, max_rounds: int = 30,
             links: bool | None = None) -> LPResult | None:
    """Solve the relaxation with path cuts added until none is violated (or rounds/time run out)."""
    if pb.n == 0:
        return LPResult(0.0, (), {}, 0, True)
    t0 = time.monotonic()
    allowed = allowed_devices(pb)
    if any(not a for a in allowed):
        return None
    md = _Model()
    C = md.var(0, md.inf, "C")
    x = [{p: md.var(0, 1) for p in allowed[i]} for i in range(pb.n)]
    free = [pb.capacity[p] - pb.baseline[p] for p in range(pb.m)]
    loc = {k: {p: md.var(0, 1) for p in range(pb.m) if pb.tensors[k].size <= free[p]} for k in pb.params}
    for i in range(pb.n):
        md.add([(1.0, v) for v in x[i].values()], 1, 1)
    for k, row in loc.items():
        md.add([(1.0, v) for v in row.values()], 1, 1)
    for p in range(pb.m):
        on_p = [i for i in range(pb.n) if p in x[i]]
        if not on_p:
            continue
        md.add([(pb.duration[i][p], x[i][p]) for i in on_p] + [(-1.0, C)], -md.inf, 0)
        if free[p] > 0:
            area = [(pb.duration[i][p] * pb.working_set(i, p) / free[p], x[i][p]) for i in on_p]
            if any(c for c, _ in area):
                md.add(area + [(-1.0, C)], -md.inf, 0)
        held = [(pb.tensors[k].size, row[p]) for k, row in loc.items() if p in row]
        if held and sum(c for c, _ in held) > free[p]:
            md.add(held, -md.inf, free[p])
    _add_head_body_tail(pb, md, x, C, levels=8 if pb.n <= 400 else 5)
    if links is None:
        links = pb.n <= 400
    if links:
        _add_link_constraints(pb, md, x, loc, C)
    cuts = 0
    _, path = _longest_path(pb, [float(f) for f in pb.fastest])
    md.add([(pb.duration[i][p], v) for i in path for p, v in x[i].items()] + [(-1.0, C)], -md.inf, 0)
    objective = md.solver.Objective()
    objective.SetCoefficient(C, 1)
    objective.SetMinimization()
    optimal = False
    value = 0.0
    rounds = 0
    while True:
        remaining = time_limit - (time.monotonic() - t0)
        if remaining <= 0:
            break
        md.solver.SetTimeLimit(max(1, int(remaining * 1000)))
        if md.solver.Solve() != pywraplp.Solver.OPTIMAL:
            break
        optimal = True
        value = C.solution_value()
        shares = [sum(pb.duration[i][p] * v.solution_value() for p, v in x[i].items()) for i in range(pb.n)]
        length, path = _longest_path(pb, shares)
        rounds += 1
        if length <= value * (1 + 1e-6) + 1e-6 or rounds >= max_rounds:
            break
        md.add([(pb.duration[i][p], v) for i in path for p, v in x[i].items()] + [(-1.0, C)], -md.inf, 0)
        cuts += 1
    if not optimal:
        return None
    shares_x = tuple(tuple((p, v.solution_value()) for p, v in x[i].items() if v.solution_value() > 1e-9)
                     for i in range(pb.n))
    shares_loc = {k: tuple((p, v.solution_value()) for p, v in row.items() if v.solution_value() > 1e-9)
                  for k, row in loc.items()}
    return LPResult(value, shares_x, shares_loc, cuts, optimal)


def _quantiles(values: list[int], count: int) -> list[int]:
    values = sorted(set(values))
    if len(values) <= count:
        return values
    return sorted({values[round(j * (len(values) - 1) / (count - 1))] for j in range(count)})


def _add_head_body_tail(pb: PlacementProblem, md: _Model, x, C, levels: int) -> None:
    """Tasks on p with head >= h and tail >= tau run one at a time in [h, C - tau] -- if any of
    them is on p, which y[a, b] >= x[i, p] expresses (y over nested groups, each task linked once):
        C >= sum over the group of d[i,p] x[i,p] + (h + tau) y[a, b]."""
    from bisect import bisect_right

    head, tail = heads(pb), tails(pb)
    for p in range(pb.m):
        on_p = [i for i in range(pb.n) if p in x[i]]
        if not on_p:
            continue
        hs = _quantiles([head[i][p] for i in on_p], levels)
        ts = _quantiles([tail[i][p] for i in on_p], levels)
        y = [[md.var(0, 1) for _ in ts] for _ in hs]
        groups: list[list[list[int]]] = [[[] for _ in ts] for _ in hs]
        for i in on_p:
            a = bisect_right(hs, head[i][p]) - 1
            b = bisect_right(ts, tail[i][p]) - 1
            md.add([(1.0, y[a][b]), (-1.0, x[i][p])], 0, md.inf)
            for aa in range(a + 1):
                for bb in range(b + 1):
                    groups[aa][bb].append(i)
        for a in range(len(hs)):
            for b in range(len(ts)):
                if a + 1 < len(hs):
                    md.add([(1.0, y[a][b]), (-1.0, y[a + 1][b])], 0, md.inf)
                if b + 1 < len(ts):
                    md.add([(1.0, y[a][b]), (-1.0, y[a][b + 1])], 0, md.inf)
                if groups[a][b] and hs[a] + ts[b] > 0:
                    md.add([(pb.duration[i][p], x[i][p]) for i in groups[a][b]]
                           + [(float(hs[a] + ts[b]), y[a][b]), (-1.0, C)], -md.inf, 0)


def _add_link_constraints(pb: PlacementProblem, md: _Model, x, loc, C) -> None:
    m = pb.m
    chans_into = [{pb.route[p][q] for p in range(m) if p != q} for q in range(m)]
    per_channel: dict[int, list] = {}
    per_dest: dict[int, list] = {}
    for k, t in enumerate(pb.tensors):
        if not t.consumers:
            continue
        prod = t.producer
        if prod >= 0:
            origin = x[prod]
        elif t.movable:
            origin = loc[k]
        else:
            origin = None  # fixed at home
        sources = [pb.home] if origin is None else list(origin)
        for q in range(m):
            readers = [x[j][q] for j in t.consumers if q in x[j]]
            if not readers or (origin is None and q == pb.home):
                continue
            others = [p for p in sources if p != q]
            if not others:
                continue
            tau = min(pb.xfer[k][p * m + q] for p in others)
            w = md.var(0, 1)
            local = origin.get(q) if origin is not None else None
            for r in readers:
                md.add([(1.0, w), (-1.0, r)] + ([(1.0, local)] if local is not None else []), 0, md.inf)
            channels = {pb.route[p][q] for p in others}
            if len(channels) == 1:
                per_channel.setdefault(channels.pop(), []).append((tau, w))
            per_dest.setdefault(q, []).append((tau, w))
    for terms in per_channel.values():
        md.add(terms + [(-1.0, C)], -md.inf, 0)
    for q, terms in per_dest.items():
        md.add(terms + [(-float(len(chans_into[q])), C)], -md.inf, 0)
    if per_dest:
        everything = [term for terms in per_dest.values() for term in terms]
        md.add(everything + [(-float(len(pb.channels)), C)], -md.inf, 0)


def lp_bound(result: LPResult | None) -> int:
    """The LP optimum as an integer lower bound (rounded up, with a tolerance for the LP solver)."""
    if result is None or not result.optimal:
        return 0
    return max(0, math.ceil(result.value * (1 - 1e-7) - 1e-6))


def round_assignments(pb: PlacementProblem, result: LPResult, samples: int = 4,
                      seed: int = 0) -> list[tuple[list[int], dict[int, int]]]:
    """(task devices, parameter devices) from the LP shares: the largest share per task, then
    seeded random samples."""
    def largest(shares, cost):
        return max(shares, key=lambda ps: (ps[1], -cost(ps[0])))[0]

    out = []
    tasks = [largest(sh, lambda p, i=i: pb.duration[i][p]) for i, sh in enumerate(result.x)]
    params = {k: largest(sh, lambda p: p != pb.home) for k, sh in result.loc.items() if sh}
    out.append((tasks, params))
    rng = random.Random(seed)
    for _ in range(samples):
        tasks = [rng.choices([p for p, _ in sh], [v for _, v in sh])[0] for sh in result.x]
        params = {k: rng.choices([p for p, _ in sh], [v for _, v in sh])[0] for k, sh in result.loc.items() if sh}
        out.append((tasks, params))
    return out
