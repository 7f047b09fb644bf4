"""From a solver Outcome (indices and ticks) to the IR's Placement (names, ticks and the tick size)."""
from __future__ import annotations

from tilegraph.ir.placement import KernelPlacement, Placement, Transfer

from .memory import peak_memory
from .problem import PlacementProblem
from .solve import Outcome


def to_placement(pb: PlacementProblem, outcome: Outcome, system: str) -> Placement:
    sched = outcome.schedule
    m = pb.m
    kernels = tuple(KernelPlacement(pb.tasks[i], pb.devices[sched.device[i]], sched.start[i], sched.finish[i])
                    for i in range(pb.n))
    transfers = tuple(
        Transfer(pb.tensors[k].name, pb.devices[src], pb.devices[dst], pb.channels[pb.route[src][dst]],
                 pb.tensors[k].size, start, start + pb.xfer[k][src * m + dst])
        for k, src, dst, start in sorted(sched.transfers, key=lambda t: (t[3], t[0], t[2])))
    peaks = peak_memory(pb, sched)
    stats: list[tuple[str, float]] = []
    for name, value in outcome.makespans.items():
        stats.append((f"makespan.{name}", float(value) if value is not None else -1.0))
    for name, value in outcome.bounds.items():
        stats.append((f"bound.{name}", float(value)))
    for name, value in outcome.seconds.items():
        stats.append((f"seconds.{name}", round(value, 4)))
    if outcome.notes:
        stats.append(("wall_guard", 1.0))
    return Placement(
        system=system, kernels=kernels, transfers=transfers,
        peak_memory=tuple(zip(pb.devices, peaks)), capacity=tuple(zip(pb.devices, pb.capacity)),
        makespan=sched.makespan, lower_bound=outcome.lower_bound, method=outcome.method, tick=pb.tick,
        optimal=outcome.optimal, stats=tuple(stats), devices=pb.devices + pb.channels,
        parameters=tuple((pb.tensors[k].name, pb.devices[p]) for k, p in sched.param_device))
