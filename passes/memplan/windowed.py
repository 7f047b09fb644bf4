"""Divide and conquer for large graphs: re-solve the joint model one window of steps at a time.

Inside the window `[a, b]` every decision is free; every residency crossing a seam keeps its
incumbent keep flag and offset, so the merged plan stays valid at the seams, and a window's
model always contains the incumbent, so the traffic never increases. Windows overlap by half and
sweep the order until a sweep improves nothing or the time is up.
"""
from __future__ import annotations

import time

from .cpsat import SolverConfig, solve_fixed
from .problem import MemoryProblem
from .solution import Solution, traffic


def improve_windowed(problem: MemoryProblem, incumbent: Solution, capacity: int, *,
                     deadline: float | None = None, remaining=None, take=None, window: int = 48, window_time: float = 2.0, config: SolverConfig = SolverConfig(),
                     progress=None, stop_at: int = 0) -> tuple[Solution, int, int]:
    """Best solution found, its traffic, and the number of windows solved.

    The time left is `remaining()` when given (with `take(seconds)` charging each window's limit, for the
    deterministic clock), else the wall clock until `deadline`."""
    if remaining is None:
        end = deadline if deadline is not None else time.perf_counter()

        def remaining() -> float:
            return end - time.perf_counter()
    if take is None:
        def take(seconds: float) -> float:
            return seconds
    T = len(incumbent.order)
    best, best_cost = incumbent, traffic(problem, incumbent.keep)
    stride = max(1, window // 2)
    starts = list(range(0, max(1, T - window + stride), stride)) or [0]
    solved = 0
    improved = True
    while improved and best_cost > stop_at:
        improved = False
        for a in starts:
            left = remaining()
            if left <= 0.05 or best_cost <= stop_at:
                return best, best_cost, solved
            b = min(T - 1, a + window - 1)
            result = solve_fixed(problem, best.order, capacity, incumbent=best, window=(a, b),
                                 time_limit=take(min(window_time, left)), config=config)
            solved += 1
            if result.solution is not None:
                cost = traffic(problem, result.solution.keep)
                if cost < best_cost:
                    best, best_cost, improved = result.solution, cost, True
                    if progress is not None:
                        progress(best_cost)
    return best, best_cost, solved
