"""Topological orders to try: the Program's own, a peak-minimising greedy one, a depth-first one."""
from __future__ import annotations

import heapq

from .problem import MemoryProblem, TensorKind


def program_order(problem: MemoryProblem) -> tuple[int, ...]:
    return tuple(range(problem.num_kernels))


def min_memory_order(problem: MemoryProblem) -> tuple[int, ...]:
    """Greedy list scheduling: run the ready kernel that adds the fewest live bytes (ties: program order)."""
    remaining_uses = [len(u) for u in problem.users]
    started = [False] * problem.num_tensors
    pending = [len(p) for p in problem.preds]
    ready = {k for k in range(problem.num_kernels) if pending[k] == 0}
    order = []
    sizes = problem.sizes
    while ready:
        def delta(k: int) -> int:
            d = 0
            for i in problem.io[k]:
                if not started[i] and problem.kinds[i] is not TensorKind.INTERMEDIATE or i in problem.kernel_outputs[k]:
                    d += sizes[i]
                if remaining_uses[i] == 1:
                    d -= sizes[i]
            return d

        k = min(ready, key=lambda k: (delta(k), k))
        ready.discard(k)
        order.append(k)
        for i in problem.io[k]:
            started[i] = True
            remaining_uses[i] -= 1
        for s in problem.succs[k]:
            pending[s] -= 1
            if pending[s] == 0:
                ready.add(s)
    return tuple(order)


def depth_first_order(problem: MemoryProblem) -> tuple[int, ...]:
    """Run a consumer of what was just produced whenever one is ready (ties: program order)."""
    pending = [len(p) for p in problem.preds]
    stamp = [0] * problem.num_kernels  # when the kernel's last predecessor finished
    heap = [(0, k) for k in range(problem.num_kernels) if pending[k] == 0]
    heapq.heapify(heap)
    order = []
    clock = 0
    while heap:
        _, k = heapq.heappop(heap)
        order.append(k)
        clock -= 1
        for s in problem.succs[k]:
            pending[s] -= 1
            if pending[s] == 0:
                heapq.heappush(heap, (clock, s))
    return tuple(order)


def candidate_orders(problem: MemoryProblem) -> dict[str, tuple[int, ...]]:
    """Distinct orders by name, the Program's first."""
    found: dict[str, tuple[int, ...]] = {}
    for name, fn in (("program", program_order), ("min-memory", min_memory_order), ("depth-first", depth_first_order)):
        order = fn(problem)
        if order not in found.values():
            found[name] = order
    return found
