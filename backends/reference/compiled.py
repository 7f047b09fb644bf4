"""The reference backend behind `tilegraph.compile(target="reference")`: the tiled numpy executor."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tilegraph.backends.base import CompiledProgram
from tilegraph.ir.program import Program

from .tiled import run_program

class TiledReferenceProgram(CompiledProgram):
    """Runs the Program kernel by kernel and tile by tile with numpy: slow, exact, no build step."""

    backend = "reference"

    def execute(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        by_name = {value.name: array for value, array in self.params.items()}
        return run_program(self.program, list(inputs), params=by_name)


def build(program: Program, params: Mapping, **options) -> TiledReferenceProgram:
    if options:
        raise TypeError(f"the reference backend takes no options, got {', '.join(sorted(options))}")
    return TiledReferenceProgram(program, params)
