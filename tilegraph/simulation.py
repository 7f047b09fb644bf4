"""prepare(graph, accel) and simulate_graph(graph, accel): a model through the passes, then the simulator.

The simulator backend reads a scheduled Program; this module runs the pipeline that schedules one
for an accelerator (`backends.sim.prepare_pipeline`) through the PassManager, with the
accelerator's tiling target in the PassContext.

    report = simulate_graph(graph, "edge-npu")
    program = prepare(graph, "tpu-like", time_limit=5)   # tiled, memory-planned
"""
from __future__ import annotations

from pathlib import Path

from tilegraph.backends.sim.api import prepare_pipeline, simulate
from tilegraph.backends.sim.report import SimReport
from tilegraph.ir.accel import Accelerator, load_accel
from tilegraph.ir.graph import Graph
from tilegraph.ir.program import Program

__all__ = ["prepare", "simulate_graph"]


def prepare(source: Graph | Program, accel: Accelerator | str | Path, *, time_limit: float = 2.0,
            solver: str = "auto", order: str = "free", capacity: int | None = None,
            stream: bool = True) -> Program:
    """A tiled, memory-planned Program for `accel` (steps already done on a Program are kept).

    `time_limit` bounds the memory planner (seconds, deterministic time); `solver="heuristic"`
    skips the exact models. `capacity` is the memory plan's capacity (default: the scratchpad).
    Where a kernel's whole tensors exceed it, `stream=True` streams the largest of them by tiles;
    `stream=False` raises the plan's capacity to that working set instead (an idealised larger
    scratchpad; the report's notes say so).
    """
    from tilegraph.passes import PassContext, PassManager

    accel = load_accel(accel)
    program = source if isinstance(source, Program) else Program.unfused(source)
    pipeline = prepare_pipeline(program, accel, time_limit=time_limit, solver=solver, order=order,
                                capacity=capacity, stream=stream)
    if not pipeline:
        return program
    return PassManager(pipeline).run(program, PassContext(target=accel.tiling_target()))


def simulate_graph(graph: Graph | Program, accel: Accelerator | str | Path, *, time_limit: float = 2.0,
                   solver: str = "auto") -> SimReport:
    """`prepare` then `simulate`: what `tilegraph simulate model.tg --accel NAME` runs."""
    accel = load_accel(accel)
    return simulate(prepare(graph, accel, time_limit=time_limit, solver=solver), accel)
