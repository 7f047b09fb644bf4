"""A randomized list-scheduling portfolio (GRASP-style sampling of the heuristics' parameters).

The fixed portfolio tries a handful of (priority, device choice) pairs; on graphs with hundreds
or thousands of kernels the best pair depends on the instance, and small changes in the
weights move the makespan by a few percent. Each sample draws, from a seeded generator:
- the priority: the upward rank over durations mixing fastest and mean (weight `mix`) and mean
  transfers scaled by `comm`, times a small multiplicative noise (ties and near-ties reordered);
- the device choice: earliest finish + `waste` * (time there - fastest time) + `look` * the
  optimistic cost after the task there (PEFT's table), i.e. HEFT, thrifty and PEFT in between;
- with binding memory, whether parameters stream from the roomiest device, and a weight `order`
  blending the rank with program order (m-TOPO's, which keeps few tensors alive).
After a third of the samples, half of the draws perturb the best parameters found so far
(intensification). The sample count is the caller's budget, so a run is deterministic.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from .heuristics import edge_costs, mean_costs, memory_binds, upward_rank
from .listsched import Stuck, list_schedule
from .paths import tails
from .problem import PlacementProblem, Schedule


@dataclass(frozen=True)
class Params:
    """One sample's weights (see the module docstring)."""

    mix: float
    comm: float
    noise: float
    waste: float
    look: float
    stream: bool
    order: float = 0.0


def _draw(rng: random.Random, binds: bool) -> Params:
    return Params(rng.random(), rng.random(), rng.uniform(0.0, 0.1), rng.uniform(0.0, 2.0),
                  rng.uniform(0.0, 1.0), binds and rng.random() < 0.5, rng.random() if binds else 0.0)


def _perturb(rng: random.Random, p: Params, binds: bool) -> Params:
    def near(v: float, lo: float, hi: float, scale: float) -> float:
        return min(hi, max(lo, v + rng.gauss(0.0, scale)))

    return replace(p, mix=near(p.mix, 0, 1, 0.1), comm=near(p.comm, 0, 1, 0.1), noise=near(p.noise, 0, 0.1, 0.02),
                   waste=near(p.waste, 0, 2, 0.2), look=near(p.look, 0, 1, 0.1),
                   stream=p.stream if rng.random() < 0.8 else (binds and not p.stream),
                   order=near(p.order, 0, 1, 0.1) if binds else 0.0)


def sample_schedule(pb: PlacementProblem, params: Params, rng: random.Random,
                    costs: tuple[list[float], list[float]], oct_: list[list[int]]) -> Schedule | None:
    """List-schedule `pb` with one sample's priority and device choice; None when memory blocks it."""
    w, c = costs
    base = upward_rank(pb, [params.mix * f + (1 - params.mix) * x for f, x in zip(pb.fastest, w)],
                       edge_costs(pb, [x * params.comm for x in c]))
    top = max(base, default=0.0) or 1.0
    n = max(pb.n, 1)
    prio = [(1 - params.order) * b / top * (1 + rng.uniform(-params.noise, params.noise))
            - params.order * i / n for i, b in enumerate(base)]

    def choose(engine, i):
        best = None
        for q in pb.capable[i]:
            res = engine.evaluate(i, q)
            if res is not None:
                key = res[1] + params.waste * (pb.duration[i][q] - pb.fastest[i]) + params.look * oct_[i][q]
                if best is None or key < best[0]:
                    best = (key, q, res)
        return best

    try:
        return list_schedule(pb, prio, "grasp", choose=choose, stream=params.stream)
    except Stuck:
        return None


def randomized_portfolio(pb: PlacementProblem, samples: int, seed: int = 0,
                         stop: Callable[[], bool] | None = None, lower_bound: int = 0) -> Schedule | None:
    """The best of `samples` seeded list schedules (fewer if `stop()` turns true or the bound is met)."""
    rng = random.Random(seed)
    binds = memory_binds(pb)
    costs = mean_costs(pb)
    oct_ = tails(pb)
    best: Schedule | None = None
    best_params: Params | None = None
    for s in range(samples):
        if stop is not None and stop():
            break
        explore = best_params is None or s < samples // 3 or rng.random() < 0.5
        params = _draw(rng, binds) if explore else _perturb(rng, best_params, binds)
        sched = sample_schedule(pb, params, rng, costs, oct_)
        if sched is not None and (best is None or sched.makespan < best.makespan):
            best, best_params = sched, params
            if best.makespan <= lower_bound:
                break
    return best
