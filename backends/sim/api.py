"""simulate(program, accel) and simulate_graph(graph, accel): the simulator's entry points.

`simulate` runs a Program that already has its kernels tiled and a memory plan attached.
`prepare` makes such a Program from a Graph (or an unplanned Program) for an accelerator:
canonicalize and fuse, tile against a target derived from the accelerator (`accel_target`:
its scratchpad, buffering and DMA burst), then plan memory with the scratchpad as capacity and
weights as planned tensors, so that every DRAM byte the simulator moves is a load or store of the
plan -- except for tensors too big to keep whole in the scratchpad, which are streamed by tiles
(`streaming`; their traffic is reported apart).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from tilegraph.ir.accel import Accelerator, load_accel
from tilegraph.ir.graph import Graph
from tilegraph.ir.program import Program
from tilegraph.ir.target import Target

from .commands import lower
from .engine import run
from .report import SimReport, build_report


def accel_target(accel: Accelerator) -> Target:
    """The tiling target of an accelerator: its scratchpad, buffering, DMA burst, array and rates."""
    return Target(
        name=accel.name, kind="accelerator", onchip_bytes=accel.scratchpad_bytes,
        double_buffer=accel.double_buffer, line_bytes=accel.dma_burst_bytes, parallel_units=1,
        description=f"derived from accelerator {accel.name}", pe_rows=accel.pe_rows, pe_cols=accel.pe_cols,
        dataflow=accel.dataflow, clock_ghz=accel.clock_ghz,
        peak_flops=2.0 * accel.pes * accel.clock_ghz * 1e9,
        dram_bandwidth=accel.dram_bytes_per_cycle * accel.clock_ghz * 1e9,
        dram_latency_ns=accel.dram_latency / accel.clock_ghz)


def prepare(source: Graph | Program, accel: Accelerator | str | Path, *, time_limit: float = 2.0,
            solver: str = "auto", order: str = "free", capacity: int | None = None,
            stream: bool = True) -> Program:
    """A tiled, memory-planned Program for `accel` (steps already done on a Program are kept).

    `time_limit` bounds the memory planner (seconds, deterministic time); `solver="heuristic"`
    skips the exact models. `capacity` is the memory plan's capacity (default: the scratchpad).
    Where a kernel's whole tensors exceed it, `stream=True` streams the largest of them by tiles
    (`streaming`); `stream=False` raises the plan's capacity to that working set instead (an
    idealised larger scratchpad; the report's notes say so).
    """
    from tilegraph.passes import PassManager
    from tilegraph.passes.memplan import Options, SolverConfig, as_problem, solve_problem
    from tilegraph.passes.tiling import tile_program

    from .streaming import choose_streamed, without

    accel = load_accel(accel)
    program = source if isinstance(source, Program) else Program.unfused(source)
    if "fused" not in program.properties:
        program = PassManager("canonicalize,fuse").run(program)
    if "tiled" not in program.properties:
        target = accel_target(accel)
        kernels, reports = tile_program(program, target)
        program = dataclasses.replace(program, kernels=tuple(kernels), properties=program.properties | {"tiled"},
                                      notes={**program.notes, "tiling": reports, "target": target.name})
    if program.memory_plan is not None:
        return program
    problem = as_problem(program, weights=True)
    wanted = accel.scratchpad_bytes if capacity is None else int(capacity)
    notes = dict(program.notes)
    streamed = choose_streamed(problem, wanted) if stream else frozenset()
    if streamed:
        names = tuple(sorted(problem.tensor_names[i] for i in streamed))
        notes["sim_streamed"] = names
        notes["sim"] = (f"{len(names)} tensor(s) too big to keep whole in {wanted:,} B are streamed by tiles: "
                        + ", ".join(f"%{n}" for n in names[:6]) + (" ..." if len(names) > 6 else ""),)
        problem = without(problem, streamed)
    working_set, kernel = problem.max_working_set()
    plan_capacity = max(wanted, working_set, 1)
    if plan_capacity > wanted:
        notes["sim"] = (f"kernel {problem.kernel_names[kernel]} keeps {working_set:,} B of whole tensors resident, "
                        f"more than the {wanted:,} B capacity asked for: the memory plan was made for "
                        f"{plan_capacity:,} B",)
    plan = solve_problem(problem, plan_capacity, order=order, time_limit=time_limit, solver=solver,
                         options=Options(config=SolverConfig(deterministic=True)), weights=True)
    by_name = {k.name: k for k in program.kernels}
    return dataclasses.replace(program, kernels=tuple(by_name[n] for n in plan.order), memory_plan=plan, notes=notes)


def simulate(program: Program, accel: Accelerator | str | Path) -> SimReport:
    """Simulate a tiled, memory-planned Program on `accel` (a preset name, TOML path or Accelerator)."""
    accel = load_accel(accel)
    lowered = lower(program, accel)
    timeline = run(lowered.commands, accel)
    return build_report(lowered, timeline, accel, program.memory_plan.capacity,
                        tuple(program.notes.get("sim", ())))


def simulate_graph(graph: Graph | Program, accel: Accelerator | str | Path, *, time_limit: float = 2.0,
                   solver: str = "auto") -> SimReport:
    """`prepare` then `simulate`: what `tilegraph simulate model.tg --accel NAME` runs."""
    accel = load_accel(accel)
    return simulate(prepare(graph, accel, time_limit=time_limit, solver=solver), accel)
