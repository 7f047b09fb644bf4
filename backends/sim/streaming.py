"""The DRAM traffic of streamed tensors: those the memory plan leaves out, moved by tiles instead.

Which tensors are streamed is the memory plan's decision (`MemoryPlan.streamed`, made by the
memplan pass with `stream=true`), and so is their traffic: the plan records it per step, tensor and
direction (`MemoryPlan.stream_events`), and the simulator replays those events. A plan that did not
record them (made before streams were planned), and the parameters of a plan made without weights,
are counted here with the same tile traffic model (`ir.stream_traffic`): a streamed tensor stays in
DRAM, its producer writes it tile by tile, every consumer reads it tile by tile as its tiling
dictates. The tile buffers of streamed operands share the scratchpad with resident tensors; the
model does not subtract them.
"""
from __future__ import annotations

from tilegraph.ir.program import Program
from tilegraph.ir.stream_traffic import least_streamed_tiling, stream_bytes, stream_traffic
from tilegraph.ir.target import Target

__all__ = ["stream_bytes", "least_streamed_tiling", "streamed_tensors", "stream_events"]


def streamed_tensors(program: Program) -> frozenset[str]:
    """Tensors the memory plan leaves out, streamed by tiles: those it streams for size, and the
    parameters when the plan was made without weights (memplan's `weights=False`)."""
    plan = program.memory_plan
    names = set(plan.streamed) if plan is not None else set()
    if plan is not None and not plan.weights:
        names |= {v.name for v in program.graph.params}
    return frozenset(names)


def stream_events(program: Program, target: Target, search: bool = True) -> dict[str, list[tuple]]:
    """Per kernel name: (kind, tensor, bytes, compulsory, streamed) of its streamed tensors' traffic.

    The plan's recorded events where it has them; the rest counted for `target` (with `search`, the
    least-streaming tiling that fits; else the kernels' own tiles)."""
    plan = program.memory_plan
    tensors = streamed_tensors(program)
    if not tensors:
        return {}
    recorded = plan.stream_events if plan is not None else None
    events = list(recorded or ())
    rest = tensors - set(plan.streamed) if recorded is not None else tensors
    events += stream_traffic(program, plan.order, frozenset(rest), target, search)
    out: dict[str, list[tuple]] = {}
    for e in sorted(events, key=lambda e: (e.step, e.tensor, e.kind, not e.compulsory)):
        out.setdefault(plan.order[e.step], []).append((e.kind, e.tensor, e.bytes, e.compulsory, not e.compulsory))
    return out
