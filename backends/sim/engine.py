"""The event-driven timing model: every command gets a start and an end cycle.

Commands are taken in issue order. A compute command starts when its dependencies have finished
and its unit (the PE array or the vector unit) is free, and holds the unit for its cycles. A DMA
command starts when its dependencies have finished and its DMA engine is free; its bytes then
cross the DRAM interface, shared by all engines in issue order, in ceil(bytes / bandwidth)
cycles, and it finishes `dram_latency` cycles after its last byte left (the engine is busy until
then, so several engines hide each other's latency). Every time is a max/plus expression of
durations over a fixed order, so for one command stream more bandwidth or lower latency can never
make anything later. (Double buffering gives another stream: weaker dependencies, loads issued
earlier; that it is never slower is checked by the tests, not guaranteed by construction.)

With `dram_model = "calc"` (SCALE-Sim's interface) every DMA unit is a port with its own
interface: loads at `dram_bytes_per_cycle` in whole bursts (SCALE-Sim fills its SRAMs in sets of
1% of an SRAM), stores at `drain_bytes_per_cycle`; an untimed command (a refill or drain sized
never to stall) takes no time and no latency.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tilegraph.ir.accel import Accelerator

from .commands import DMA_KINDS, Command


@dataclass(frozen=True)
class Timed:
    """A command with its schedule: `start`..`end`; for DMA also its slot on the DRAM interface."""

    command: Command
    start: int
    end: int
    bus_start: int = 0
    bus_end: int = 0


def transfer_cycles(command: Command, accel: Accelerator) -> int:
    """Cycles the command's bytes occupy its DRAM interface (0 when untimed)."""
    if not command.timed:
        return 0
    if accel.dram_model != "calc":
        return math.ceil(command.bytes / accel.dram_bytes_per_cycle)
    if command.kind == "store":
        return math.ceil(command.bytes / accel.drain_bytes_per_cycle)
    return math.ceil(math.ceil(command.bytes / accel.dma_burst_bytes) * accel.dma_burst_bytes
                     / accel.dram_bytes_per_cycle)


def run(commands: tuple[Command, ...], accel: Accelerator) -> tuple[Timed, ...]:
    """Schedule the command stream; returns the commands with start and end cycles, in issue order.

    Each unit serves its commands in issue order, the DRAM interface serves all transfers in issue
    order, and a dependency may point to a command issued later (a load waiting for the compute
    that frees its buffer): times are evaluated in a topological order of all these constraints.
    """
    n = len(commands)
    prev_unit: list[int] = [-1] * n
    prev_bus: list[int] = [-1] * n
    last_unit: dict[str, int] = {}
    last_bus: dict[str, int] = {}
    ports = accel.dram_model == "calc"  # one interface per DMA unit, else one shared by all
    succs: list[list[int]] = [[] for _ in range(n)]
    pending = [0] * n
    for c in commands:
        preds = set(c.deps)
        if c.unit in last_unit:
            prev_unit[c.id] = last_unit[c.unit]
            preds.add(last_unit[c.unit])
        last_unit[c.unit] = c.id
        if c.kind in DMA_KINDS:
            bus_name = c.unit if ports else "dram"
            prev_bus[c.id] = last_bus.get(bus_name, -1)
            if prev_bus[c.id] >= 0:
                preds.add(prev_bus[c.id])
            last_bus[bus_name] = c.id
        pending[c.id] = len(preds)
        for p in preds:
            succs[p].append(c.id)
    start = [0] * n
    end = [0] * n
    bus = [(0, 0)] * n
    ready = [i for i in range(n) if pending[i] == 0]
    done = 0
    while ready:
        i = ready.pop()
        c = commands[i]
        s = max((end[d] for d in c.deps), default=0)
        if prev_unit[i] >= 0:
            s = max(s, end[prev_unit[i]])
        if c.kind in DMA_KINDS:
            b0 = max(s, bus[prev_bus[i]][1] if prev_bus[i] >= 0 else 0)
            b1 = b0 + transfer_cycles(c, accel)
            bus[i] = (b0, b1)
            end[i] = b1 + (accel.dram_latency if c.timed else 0)
        else:
            end[i] = s + c.cycles
        start[i] = s
        done += 1
        for j in succs[i]:
            pending[j] -= 1
            if pending[j] == 0:
                ready.append(j)
    if done != n:
        raise RuntimeError("the command stream has a dependency cycle")  # a lowering bug, not user input
    return tuple(Timed(c, start[c.id], end[c.id], *bus[c.id]) for c in commands)
