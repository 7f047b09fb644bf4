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
step when single-buffered, two steps back when double-buffered (also across kernels). Commands
are issued per step: compute(g), store(g), then the loads of step g + 2 (and reloads after their
spills). The issue order, and so the order in which transfers reach DRAM, depends only on the
steps, not on the buffering, the scratchpad's size or the DRAM's speed: with one command stream,
more bandwidth can only make commands earlier (`engine`), and so can weaker dependencies (double
buffering's).

The DRAM bytes of the stream are the plan's load and store events (compulsory first loads and
output stores, plus spills and reloads; weights are planned tensors, `weights=True`), a load
moving only the elements the kernels read (`footprint`: a stride-2 1x1 conv reads a quarter of
its input),
plus the tile traffic of tensors too big for the scratchpad, which the plan streams and records
(`MemoryPlan.stream_events`, replayed by `streaming`; counted there for plans that did not record
it): read by every consumer's tiles, written by its producer's;
plus, with `psum_writeback`, the partial sums of every fold of K over the array rows but the last
(ws and is), stored with the kernel's results.

With `dram_model = "calc"`, array operands are read as SCALE-Sim's operand buffers fetch them in
its fold order (`calc.operand_moves`), each result is written once (`calc.result_moves`), the
moves of each kernel are re-timed by `calc.calc_moves` (operand fills before step 0, free
refills, the ofmap remainder drained after the last step), and each loaded tensor has its own
read port, the results one write port.
"""
from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass

from tilegraph.ir.accel import Accelerator
from tilegraph.ir.errors import TilegraphError
from tilegraph.ir.program import Kernel, Program

from .array import array_cycles, spatio_temporal
from .calc import calc_moves, operand_moves, result_moves
from .footprint import read_bytes
from .moves import Move
from .streaming import stream_events, streamed_tensors
from .workload import KernelWork, kernel_work, node_gemm, runs_on_array

DMA_KINDS = ("load", "store")
ISSUE_AHEAD = 2  # a step's loads are issued after the compute this many steps back, whatever the buffering
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
    psum: bool = False  # partial sums written back per fold of K (`psum_writeback`)
    timed: bool = True  # False: a CALC refill or drain sized never to stall (takes no time)


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
    loads: list[Move]
    stores: list[Move]
    array: int
    vector: int


def psum_bytes(kernel: Kernel, accel: Accelerator) -> list[tuple[str, int]]:
    """(result, bytes) of the partial sums an array kernel writes back beyond its results: with
    `psum_writeback` in ws and is, (ceil(K / pe_rows) - 1) writes of each GEMM's result."""
    if not accel.psum_writeback or accel.dataflow == "os":
        return []
    out = []
    for node in kernel.nodes:
        if runs_on_array(node):
            k_folds = math.ceil(spatio_temporal(node_gemm(node), accel.dataflow)[0] / accel.pe_rows)
            if k_folds > 1:
                out.append((node.results[0].name, (k_folds - 1) * node.results[0].type.nbytes))
    return out


def _steps(program: Program, accel: Accelerator) -> tuple[list[_Step], list[KernelWork], list[int], list[int]]:
    plan = program.memory_plan
    if plan is None:
        raise SimError("the program has no memory plan: run memplan first (or use simulate_graph)")
    by_name = {k.name: k for k in program.kernels}
    missing = [name for name in plan.order if name not in by_name]
    if missing or len(plan.order) != len(program.kernels):
        raise SimError(f"the memory plan's order does not match the program's kernels (unknown: {missing[:3]})")
    loads, stores = defaultdict(list), defaultdict(list)
    touched, sizes = read_bytes(program), {v.name: v.type.nbytes for v in program.tensors()}
    for e in plan.events:
        size = e.bytes * touched.get(e.tensor, sizes[e.tensor]) // max(1, sizes[e.tensor]) if e.kind == "load" \
            else e.bytes
        (loads if e.kind == "load" else stores)[e.step].append(Move(e.tensor, size, e.compulsory))
    # double-buffered tiles whatever the buffering: the tiles' traffic must not depend on it; under
    # calc the array's operands and results are moved as SCALE-Sim's buffers do instead
    streams = stream_events(program, dataclasses.replace(accel.tiling_target(), double_buffer=True),
                            search=accel.dram_model != "calc")
    for t, name in enumerate(plan.order):
        for kind, tensor, size, comp, streamed in streams.get(name, ()):
            (loads if kind == "load" else stores)[t].append(Move(tensor, size, comp, streamed))
    streamed = streamed_tensors(program)
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
        for move in (operand_moves(kernel, loads[t], accel, streamed) if accel.dram_model == "calc" else loads[t]):
            if move.tensor in reads:
                for s in range(n):
                    mine[s].loads.append(move.sized(share(move.bytes, n, s)))
            else:
                mine[0].loads.append(move)
        psums = [Move(tensor, size, psum=True) for tensor, size in psum_bytes(kernel, accel)]
        kernel_stores = result_moves(kernel, stores[t]) if accel.dram_model == "calc" else stores[t]
        for move in kernel_stores + psums:
            if move.tensor in writes or move.psum:
                for s in range(n):
                    mine[s].stores.append(move.sized(share(move.bytes, n, s)))
            else:
                mine[-1].stores.append(move)
        if accel.dram_model == "calc":
            calc_moves(mine, accel)
        steps += mine
        works.append(work)
        arrays.append(a_total)
        vectors.append(v_total)
    return steps, works, arrays, vectors


def prefetch_limits(steps: list[_Step], accel: Accelerator) -> list[int]:
    """Per step g: the step whose compute must finish before g's loads may start (-1: none): the
    previous step when single-buffered, two steps back when double-buffered (its tile buffer is
    free again). Fixed by the buffering alone, so the order in which transfers reach DRAM does not
    depend on the scratchpad's size."""
    back = 2 if accel.double_buffer else 1
    return [g - back for g in range(len(steps))]


def lower(program: Program, accel: Accelerator) -> Lowered:
    """The command stream of a memory-planned Program on `accel` (see the module docstring)."""
    steps, works, arrays, vectors = _steps(program, accel)
    names = [w.name for w in works]
    buffers = 2 if accel.double_buffer else 1
    limits = prefetch_limits(steps, accel)
    stored_at: dict[str, list[int]] = defaultdict(list)  # tensor -> steps that store it, ascending
    for g, step in enumerate(steps):
        for move in step.stores:
            if move.bytes > 0 and not move.psum:
                stored_at[move.tensor].append(g)
    # each load is issued right after the compute it waits for (and after the spill it reloads)
    issue_after: dict[int, list[tuple[int, Move]]] = defaultdict(list)
    for g, step in enumerate(steps):
        for move in step.loads:
            if move.bytes <= 0:
                continue
            spill = max((s for s in stored_at.get(move.tensor, ()) if s < g), default=-1)
            issue_after[max(g - ISSUE_AHEAD, spill)].append((g, move))
    raw: list[dict] = []  # command fields; a dep is an id, or ("compute", g) for step g's last compute
    final_compute: list[int] = []
    step_loads: dict[int, list[int]] = defaultdict(list)
    step_stores: dict[int, list[int]] = defaultdict(list)
    last_store: dict[str, int] = {}
    dma_count = 0

    def emit(deps, **fields) -> int:
        raw.append(dict(fields, deps=deps))
        return len(raw) - 1

    read_ports: dict[int, dict[str, str]] = defaultdict(dict)  # calc: kernel -> tensor -> its read port

    def dma_unit(kind: str, g: int, tensor: str) -> str:
        nonlocal dma_count
        if accel.dram_model == "calc":
            if kind == "store":
                return "wr"
            ports = read_ports[steps[g].kernel]
            return ports.setdefault(tensor, f"rd{len(ports)}")
        dma_count += 1
        return f"dma{(dma_count - 1) % accel.dma_engines}"

    def emit_loads(after: int) -> None:
        for g, move in issue_after.get(after, ()):
            deps: list = [("compute", limits[g])] if limits[g] >= 0 else []
            if move.tensor in last_store:
                deps.append(last_store[move.tensor])
            step_loads[g].append(emit(deps, kind="load", unit=dma_unit("load", g, move.tensor),
                                      kernel=names[steps[g].kernel], step=g, bytes=move.bytes, tensor=move.tensor,
                                      compulsory=move.compulsory, streamed=move.streamed, timed=move.timed))

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
        for move in step.stores:
            if move.bytes <= 0:
                continue
            cid = emit([last], kind="store", unit=dma_unit("store", g, move.tensor), kernel=kernel, step=g,
                       bytes=move.bytes, tensor=move.tensor, compulsory=move.compulsory, streamed=move.streamed,
                       psum=move.psum, timed=move.timed)
            step_stores[g].append(cid)
            if not move.psum:
                last_store[move.tensor] = cid
        emit_loads(g)

    def resolve(dep) -> int:
        return final_compute[dep[1]] if isinstance(dep, tuple) else dep
    commands = tuple(Command(id=i, **{**fields, "deps": tuple(sorted({resolve(d) for d in fields["deps"]}))})
                     for i, fields in enumerate(raw))
    return Lowered(commands, tuple(works), tuple(arrays), tuple(vectors))
