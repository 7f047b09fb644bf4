"""Streamed tensors: those too big to keep whole in the scratchpad, moved by tiles instead.

A memory plan keeps whole tensors resident. When a kernel's tensors together exceed the
capacity, no plan exists; rather than pretend the scratchpad is bigger, the largest tensors of
such kernels are *streamed*: they stay in DRAM and their kernels move them tile by tile. The plan
covers the remaining tensors, records the streamed ones (`MemoryPlan.streamed`) and their tile
traffic (`MemoryPlan.stream_events`, counted by `ir.stream_traffic` from the kernels' tilings), which
the checker checks and the simulator replays. Below a kernel's smallest tile working set no plan
exists even streaming every tensor (`check_tile_capacity`; with `grow` the capacity grows instead).
The tile buffers of streamed operands are not subtracted from the capacity the resident tensors
share (the simulator's model too): a plan is exact for the resident tensors, and its streamed
traffic is that of tiles chosen to fit the whole capacity.
"""
from __future__ import annotations

import dataclasses

from tilegraph.ir.memory_plan import MemoryPlan
from tilegraph.ir.program import Program
from tilegraph.ir.stream_traffic import min_tile_working_set, stream_target, stream_traffic
from tilegraph.ir.target import Target

from .problem import InfeasibleCapacityError, MemoryProblem


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


def stream_tiling_target(program: Program, capacity: int) -> Target:
    """What streamed tiles are chosen for: the target the tile pass used (a generic one for an
    untiled program) with the plan's capacity as its on-chip memory, double-buffered."""
    base = program.target or Target(name="memplan", kind="accelerator", onchip_bytes=max(1, capacity))
    return stream_target(dataclasses.replace(base, onchip_bytes=max(1, capacity)))


def check_tile_capacity(program: Program, problem: MemoryProblem, capacity: int, target: Target) -> None:
    """Raise InfeasibleCapacityError naming the kernel and the bytes when a kernel whose whole
    tensors exceed `capacity` does not fit even with all of them streamed (its smallest tile
    working set under the tile model is larger)."""
    by_name = {k.name: k for k in program.kernels}
    for k, name in enumerate(problem.kernel_names):
        if problem.working_sets[k] <= capacity:
            continue
        need = min_tile_working_set(by_name[name], target)
        if need > capacity:
            raise InfeasibleCapacityError(
                f"capacity {capacity} B is below what kernel {name} needs even with every tensor streamed by "
                f"tiles: its smallest tile working set is {need} B (whole tensors: {problem.working_sets[k]} B); "
                f"the smallest feasible capacity for it is {need} B")


def planned_streams(program: Program, plan: MemoryPlan, target: Target) -> MemoryPlan:
    """`plan` with the tile traffic of its streamed tensors recorded, kernel by kernel in its order,
    and counted in its streamed totals."""
    events = stream_traffic(program, plan.order, frozenset(plan.streamed), target)
    return dataclasses.replace(plan, stream_events=events,
                               streamed_traffic=sum(e.bytes for e in events if not e.compulsory),
                               streamed_compulsory=sum(e.bytes for e in events if e.compulsory))
