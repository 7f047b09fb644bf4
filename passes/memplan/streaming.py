"""Streamed tensors: those too big to keep whole in the scratchpad, moved by tiles instead.

A memory plan keeps whole tensors resident. When a kernel's tensors together exceed the
capacity, no plan exists; rather than pretend the scratchpad is bigger, the largest tensors of
such kernels are *streamed*: they stay in DRAM and their kernels move them tile by tile. The plan
covers the remaining tensors and records the streamed ones (`MemoryPlan.streamed`); a backend
counts their tile traffic from the kernels' tilings.
"""
from __future__ import annotations

from .problem import MemoryProblem


def choose_streamed(problem: MemoryProblem, capacity: int) -> frozenset[int]:
    """Tensors to stream so that every kernel's remaining working set fits `capacity`: greedily the
    largest tensor of each kernel over capacity (ties: the lower index), until none is over."""
    streamed: set[int] = set()
    for k in range(problem.num_kernels):
        kept = [i for i in problem.io[k] if i not in streamed]
        while kept and sum(problem.sizes[i] for i in kept) > capacity:
            biggest = max(kept, key=lambda i: (problem.sizes[i], -i))
            streamed.add(biggest)
            kept.remove(biggest)
    # a tensor streamed for one kernel is streamed everywhere, which only shrinks other working sets
    return frozenset(streamed)
