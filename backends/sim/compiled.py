"""The sim backend behind `tilegraph.compile(graph, target="sim")`: numbers from the tiled numpy
executor, cycles from the simulator.

    fn = tilegraph.compile(graph, target="sim", accel="edge-npu")
    y, = fn(x)                       # the tiled reference executor
    print(format_sim_report(fn.simulate()))

The default pipeline tiles for the `tile_target` of its registry entry (accel-small: the edge
NPU's 256 KiB double-buffered scratchpad); `simulate()` adds the memory plan for the accelerator
and runs it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property

import numpy as np

from tilegraph.backends.base import CompiledProgram
from tilegraph.ir.accel import load_accel
from tilegraph.ir.program import Program

from .api import simulate
from .report import SimReport, format_sim_report


class SimProgram(CompiledProgram):
    """A scheduled Program bound to an accelerator: call it for numbers, `simulate()` for cycles."""

    backend = "sim"

    def __init__(self, program: Program, params: Mapping, accel="edge-npu", time_limit: float = 2.0,
                 solver: str = "auto") -> None:
        super().__init__(program, params)
        self.accel = load_accel(accel)
        self.time_limit = time_limit
        self.solver = solver

    def execute(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        from tilegraph.backends.reference.tiled import run_program

        by_name = {value.name: array for value, array in self.params.items()}
        return run_program(self.program, list(inputs), params=by_name)

    @cached_property
    def planned(self) -> Program:
        """The Program with the accelerator's memory plan (computed once, by the driver's pipeline)."""
        from tilegraph.simulation import prepare

        return prepare(self.program, self.accel, time_limit=self.time_limit, solver=self.solver)

    def simulate(self) -> SimReport:
        return simulate(self.planned, self.accel)

    def backend_report(self) -> str:
        return format_sim_report(self.simulate())


def build(program: Program, params: Mapping, *, accel="edge-npu", time_limit: float = 2.0,
          solver: str = "auto") -> SimProgram:
    return SimProgram(program, params, accel, time_limit, solver)
