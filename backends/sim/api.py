"""simulate(program, accel): the simulator's entry point, and the pipeline that prepares a Program for it.

`simulate` runs a Program that already has its kernels tiled and a memory plan attached.
`prepare_pipeline` says which passes make such a Program for an accelerator: canonicalize and
fuse, tile against the accelerator's target (`Accelerator.tiling_target()`: its scratchpad,
buffering and DMA burst), then plan memory with the scratchpad as capacity and weights as planned
tensors, so that every DRAM byte the simulator moves is a load or store of the plan -- except for
tensors too big to keep whole, which the plan streams by tiles (`streaming`; their traffic is
reported apart). `tilegraph.simulation.prepare` runs it through the PassManager.
"""
from __future__ import annotations

from pathlib import Path

from tilegraph.ir.accel import Accelerator, load_accel
from tilegraph.ir.program import Program

from .commands import lower
from .engine import run
from .report import SimReport, build_report


def prepare_pipeline(program: Program, accel: Accelerator, *, time_limit: float = 2.0, solver: str = "auto",
                     order: str = "free", capacity: int | None = None, stream: bool = True) -> str:
    """The pipeline that makes `program` ready to simulate on `accel`: the steps it has not had yet.

    canonicalize and fuse; tile for the accelerator's target (given through the PassContext:
    `accel.tiling_target()`); memplan with the scratchpad as capacity, weights planned, tensors too
    big to keep whole streamed (`stream`), and the capacity grown where a kernel still needs more.
    """
    steps = []
    if "fused" not in program.properties:
        steps += ["canonicalize", "fuse"]
    if "tiled" not in program.properties:
        steps.append("tile")
    if program.memory_plan is None:
        wanted = accel.scratchpad_bytes if capacity is None else int(capacity)
        steps.append(f"memplan{{capacity={wanted},weights=true,order={order},time_limit={float(time_limit)!r},"
                     f"solver={solver},stream={str(stream).lower()},grow=true}}")
    return ",".join(steps)


def plan_notes(program: Program) -> tuple[str, ...]:
    """What the report says about the memory plan's streamed tensors and grown capacity."""
    plan = program.memory_plan
    notes = []
    if plan.streamed:
        names = plan.streamed
        wanted = plan.requested_capacity or plan.capacity
        notes.append(f"{len(names)} tensor(s) too big to keep whole in {wanted:,} B are streamed by tiles: "
                     + ", ".join(f"%{n}" for n in names[:6]) + (" ..." if len(names) > 6 else ""))
    if plan.requested_capacity is not None:
        notes.append(f"a kernel keeps {plan.capacity:,} B of whole tensors resident, more than the "
                     f"{plan.requested_capacity:,} B capacity asked for: the memory plan was made for "
                     f"{plan.capacity:,} B")
    return tuple(notes)


def simulate(program: Program, accel: Accelerator | str | Path) -> SimReport:
    """Simulate a tiled, memory-planned Program on `accel` (a preset name, TOML path or Accelerator)."""
    accel = load_accel(accel)
    lowered = lower(program, accel)
    timeline = run(lowered.commands, accel)
    return build_report(lowered, timeline, accel, program.memory_plan.capacity, plan_notes(program), program)
