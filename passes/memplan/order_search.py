"""Local search over kernel orders, scored by the bytes-only Belady simulation.

The heuristic orders (program, min-memory, depth-first) are fixed rules; on wide graphs a better
order often cuts the traffic by half or more, which the time-indexed model finds only slowly. A move
takes one kernel to another step between its last predecessor and its first successor; it is kept
when the Belady traffic does not grow (ties too: the landscape has wide plateaus). Seeded and
bounded by a count of evaluations, so the result is reproducible.
"""
from __future__ import annotations

import random

from .heuristics import capacity_keep
from .problem import MemoryProblem
from .solution import traffic

# One evaluation (Belady simulation and traffic) costs about this many seconds per kernel and
# tensor on the reference machine (0.2 ms on 80 kernels and 162 tensors, 0.5 ms on 300 and 302).
EVAL_SECONDS_PER_ITEM = 1.0e-6


def order_cost(problem: MemoryProblem, order: tuple[int, ...], capacity: int) -> int:
    """Non-compulsory bytes of `order` with Belady eviction and no addresses."""
    return traffic(problem, capacity_keep(problem, order, capacity, "belady"))


def evaluations_for(problem: MemoryProblem, seconds: float) -> int:
    """How many evaluations fit in `seconds` (a count, so that the search does not read the clock)."""
    return int(seconds / (EVAL_SECONDS_PER_ITEM * (problem.num_kernels + problem.num_tensors)))


def search_order(problem: MemoryProblem, capacity: int, start: tuple[int, ...], evaluations: int, *,
                 stop_at: int = 0, seed: int = 0) -> tuple[tuple[int, ...], int]:
    """The best order found from `start` within `evaluations` moves, and its Belady traffic."""
    rng = random.Random(seed)
    succs = problem.succs
    order = list(start)
    cost = order_cost(problem, start, capacity)
    best, best_cost = tuple(order), cost
    for _ in range(evaluations):
        if best_cost <= stop_at:
            break
        pos = {k: t for t, k in enumerate(order)}
        k = rng.randrange(len(order))
        lo = max((pos[p] for p in problem.preds[k]), default=-1) + 1
        hi = min((pos[s] for s in succs[k]), default=len(order)) - 1
        step = rng.randint(lo, hi) if lo < hi else pos[k]
        if step == pos[k]:
            continue
        moved = order[:pos[k]] + order[pos[k] + 1:]
        moved.insert(step, k)
        moved_cost = order_cost(problem, tuple(moved), capacity)
        if moved_cost <= cost:
            order, cost = moved, moved_cost
            if cost < best_cost:
                best, best_cost = tuple(order), cost
    return best, best_cost
