"""Lowering: a memory-planned Program to a stream of tile-level commands with their dependencies.

Every kernel, in the memory plan's order, runs as `steps` tile steps (`workload.KernelWork`). All
steps of all kernels form one global sequence g = 0, 1, ...; per step:

- `load` commands: the step's share of each tensor the plan loads before this kernel (a tensor the
  kernel reads is streamed in equal chunks over its steps; any other load is needed by step 0);
- an `array` command (the step's share of the kernel's GEMM cycles on the PE array) and a `vector`
  command (its share of the vector unit's work, after the array part of the same step);
- `store` commands: the step's share of each tensor the plan stores after this kernel (a tensor
  the kernel writes is drained per step; a spill of an older tensor goes after the last step).

Dependencies: compute(g) needs its loads and, with B buffers (2 when double-buffered, else 1), the
output buffer freed by the stores of step g - B; store(g) needs compute(g); a reload needs the
spill of the same tensor; the first step of a kernel waits for the last compute of the previous
kernel. Load(g) needs the compute that frees its staging space (`prefetch_limits`): the previous
step when single-buffered; when double-buffered two steps back, or further back while the loads
in between fit in half the scratchpad, so transfers run ahead across steps and kernels. Commands
are issued per step: compute(g), store(g), then the loads that waited for compute(g).

The DRAM bytes of the stream are exactly the plan's load and store events (compulsory first
loads and output stores, plus spills and reloads; weights are planned tensors, `weights=True`),
plus the tile traffic of tensors too big for the scratchpad, which `prepare` left out of the
plan to stream them (`streaming`): read by every consumer's tiles, written by its producer's.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from tilegraph.ir.accel import Accelerator
from tilegraph.ir.errors import TilegraphError
from tilegraph.ir.program import Program

from .array import array_cycles
from .streaming import stream_events
from .workload import KernelWork, kernel_work

DMA_KINDS = ("load", "store")
COMPUTE_KINDS = ("array", "vector")


class SimError(TilegraphError):
    """A Program the simulator cannot run (no memory plan, a plan that does not match its kernels)."""


@dataclass(frozen=True)
class Command:
    """One tile-level command on one unit: DMA `load`/`store` of `bytes`, or `array`/`vector` compute."""

    id: int
    kind: str
    unit: str
    kernel: str
    step: int  # global step index
    cycles: int = 0  # compute cycles (array, vector)
    bytes: int = 0  # DRAM bytes (load, store)
    tensor: str = ""
    compulsory: bool = False
    streamed: bool = False  # traffic of a streamed tensor beyond its compulsory bytes
    deps: tuple[int, ...] = ()


@dataclass(frozen=True)
class Lowered:
    """The command stream in issue order and the work of every kernel, in plan order."""

    commands: tuple[Command, ...]
    works: tuple[KernelWork, ...]
    array_cycles: tuple[int, ...]  # per kernel: stall-free array cycles
    vector_cycles: tuple[int, ...]  # per kernel: vector unit cycles


def share(total: int, parts: int, index: int) -> int:
    """The `index`-th of `parts` nearly equal integer shares of `total` (they sum to `total`)."""
    return total * (index + 1) // parts - total * index // parts


@dataclass
class _Step:
    kernel: int
    loads: list  # (tensor, bytes, compulsory, streamed)
    stores: list
    array: int
    vector: int


def _steps(program: Program, accel: Accelerator) -> tuple[list[_Step], list[KernelWork], list[int], list[int]]:
    plan = program.memory_plan
    if plan is None:
        raise SimError("the program has no memory plan: run memplan first (or use simulate_graph)")
    by_name = {k.name: k for k in program.kernels}
    missing = [name for name in plan.order if name not in by_name]
    if missing or len(plan.order) != len(program.kernels):
        raise SimError(f"the memory plan's order does not match the program's kernels (unknown: {missing[:3]})")
    loads, stores = defaultdict(list), defaultdict(list)
    for e in plan.events:
        (loads if e.kind == "load" else stores)[e.step].append((e.tensor, e.bytes, e.compulsory, False))
    streams = stream_events(program, accel.dma_burst_bytes)
    for t, name in enumerate(plan.order):
        for kind, tensor, size, comp, streamed in streams.get(name, ()):
            (loads if kind == "load" else stores)[t].append((tensor, size, comp, streamed))
    steps, works, arrays, vectors = [], [], [], []
    for t, name in enumerate(plan.order):
        kernel = by_name[name]
        work = kernel_work(kernel)
        a_total = sum(array_cycles(g, accel.pe_rows, accel.pe_cols, accel.dataflow) for g in work.gemms)
        v_total = math.ceil(work.vector_ops / accel.vector_width)
        reads = {v.name for v in kernel.inputs}
        writes = {v.name for v in kernel.outputs}
        n = work.steps
        mine = [_Step(t, [], [], share(a_total, n, s), share(v_total, n, s)) for s in range(n)]
        for tensor, size, comp, streamed in loads[t]:
            if tensor in reads:
                for s in range(n):
                    mine[s].loads.append((tensor, share(size, n, s), comp, streamed))
            else:
                mine[0].loads.append((tensor, size, comp, streamed))
        for tensor, size, comp, streamed in stores[t]:
            if tensor in writes:
                for s in range(n):
                    mine[s].stores.append((tensor, share(size, n, s), comp, streamed))
            else:
                mine[-1].stores.append((tensor, size, comp, streamed))
        steps += mine
        works.append(work)
        arrays.append(a_total)
        vectors.append(v_total)
    return steps, works, arrays, vectors


def prefetch_limits(steps: list[_Step], accel: Accelerator) -> list[int]:
    """Per step g: the step whose compute must finish before g's loads may start (-1: none).

    Single-buffered: the previous step (its buffer is reused). Double-buffered: two steps back
    (the tiles' double buffer), or further while the loads of the steps in between fit in the
    prefetch budget, half the scratchpad: loads run ahead as far as there is room to stage them.
    """
    if not accel.double_buffer:
        return [g - 1 for g in range(len(steps))]
    budget = accel.scratchpad_bytes // 2
    sizes = [sum(size for _, size, _, _ in step.loads) for step in steps]
    limits, k, window = [], -1, 0  # window: load bytes of steps k+1..g
    for g, size in enumerate(sizes):
        window += size
        while window > budget and k < g - 1:
            k += 1
            window -= sizes[k]
        limits.append(min(g - 2, k))
    return limits


def lower(program: Program, accel: Accelerator) -> Lowered:
    """The command stream of a memory-planned Program on `accel` (see the module docstring)."""
    steps, works, arrays, vectors = _steps(program, accel)
    names = [w.name for w in works]
    buffers = 2 if accel.double_buffer else 1
    limits = prefetch_limits(steps, accel)
    stored_at: dict[str, list[int]] = defaultdict(list)  # tensor -> steps that store it, ascending
    for g, step in enumerate(steps):
        for tensor, size, _, _ in step.stores:
            if size > 0:
                stored_at[tensor].append(g)
    # each load is issued right after the compute it waits for (and after the spill it reloads)
    issue_after: dict[int, list[tuple[int, tuple]]] = defaultdict(list)
    for g, step in enumerate(steps):
        for item in step.loads:
            if item[1] <= 0:
                continue
            spill = max((s for s in stored_at.get(item[0], ()) if s < g), default=-1)
            issue_after[max(limits[g], spill)].append((g, item))
    raw: list[dict] = []  # command fields; a dep is an id, or ("compute", g) for step g's last compute
    final_compute: list[int] = []
    step_loads: dict[int, list[int]] = defaultdict(list)
    step_stores: dict[int, list[int]] = defaultdict(list)
    last_store: dict[str, int] = {}
    dma_count = 0

    def emit(deps, **fields) -> int:
        raw.append(dict(fields, deps=deps))
        return len(raw) - 1

    def dma_unit() -> str:
        nonlocal dma_count
        dma_count += 1
        return f"dma{(dma_count - 1) % accel.dma_engines}"

    def emit_loads(after: int) -> None:
        for g, (tensor, size, comp, streamed) in issue_after.get(after, ()):
            deps: list = [("compute", limits[g])] if limits[g] >= 0 else []
            if tensor in last_store:
                deps.append(last_store[tensor])
            step_loads[g].append(emit(deps, kind="load", unit=dma_unit(), kernel=names[steps[g].kernel], step=g,
                                      bytes=size, tensor=tensor, compulsory=comp, streamed=streamed))

    emit_loads(-1)
    for g, step in enumerate(steps):
        kernel = names[step.kernel]
        deps: list = list(step_loads[g]) + (step_stores[g - buffers] if g - buffers >= 0 else [])
        if g > 0 and steps[g - 1].kernel != step.kernel:
            deps.append(final_compute[g - 1])
        last = None
        if step.array > 0:
            last = emit(list(deps), kind="array", unit="array", kernel=kernel, step=g, cycles=step.array)
        if step.vector > 0 or last is None:
            last = emit(deps + ([last] if last is not None else []), kind="vector", unit="vector", kernel=kernel,
                        step=g, cycles=step.vector)
        final_compute.append(last)
        for tensor, size, comp, streamed in step.stores:
            if size <= 0:
                continue
            cid = emit([last], kind="store", unit=dma_unit(), kernel=kernel, step=g, bytes=size, tensor=tensor,
                       compulsory=comp, streamed=streamed)
            step_stores[g].append(cid)
            last_store[tensor] = cid
        emit_loads(g)

    def resolve(dep) -> int:
        return final_compute[dep[1]] if isinstance(dep, tuple) else dep
    commands = tuple(Command(id=i, **{**fields, "deps": tuple(sorted({resolve(d) for d in fields["deps"]}))})
                     for i, fields in enumerate(raw))
    return Lowered(commands, tuple(works), tuple(arrays), tuple(vectors))
