"""`tilegraph.compile`: a Graph through the target's pipeline to something you can call.

Every executable backend plugs in the same way: a module with `TILE_TARGET` (the target preset
its tiling pass uses) and `build(program, params, **options) -> CompiledProgram`. The driver runs
the pipeline and binds the parameters; the backend turns the scheduled Program into code.

    fn = tilegraph.compile(graph, target="cpp")
    y, = fn(x)
    print(fn.report())
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import import_module
from pathlib import Path

import numpy as np

from tilegraph.ir import Graph, TilegraphError
from tilegraph.ir.program import Program

# Backend name -> module. A module is imported only when its backend is asked for, so optional
# dependencies (a C++ compiler, triton) are needed only by those who use them.
BACKENDS: dict[str, str] = {
    "reference": "tilegraph.backends.reference.compiled",
    "cpp": "tilegraph.backends.cpp",
    "sycl": "tilegraph.backends.sycl",
    "triton": "tilegraph.backends.triton",
    "sim": "tilegraph.backends.sim.compiled",
}


class CompiledProgram:
    """A scheduled Program bound to its parameters, callable with inputs in graph-input order."""

    backend = "abstract"
    source_suffix = ".txt"  # the file extension of `source`

    def __init__(self, program: Program, params: Mapping, source: str = "") -> None:
        self.program = program
        self.params = dict(params)  # Value -> np.ndarray, every parameter of the graph
        self.source = source

    def __call__(self, *inputs) -> list[np.ndarray]:
        from tilegraph.backends.reference import bind_inputs

        env = bind_inputs(self.program.graph, list(inputs))
        return self.execute([env[v] for v in self.program.graph.inputs])

    def execute(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run on inputs already checked and converted to the graph's dtypes."""
        raise NotImplementedError

    def report(self) -> str:
        """What the passes decided, then what the backend adds (build flags, arena size, ...)."""
        from tilegraph.report import program_report

        extra = self.backend_report()
        return program_report(self.program) + (f"\nbackend {self.backend}:\n{extra}" if extra else "")

    def backend_report(self) -> str:
        return ""

    def write(self, directory: Path) -> list[Path]:
        """Write what was built into `directory` (the generated source; backends may add more)."""
        if not self.source:
            return []
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.program.graph.name}{self.source_suffix}"
        path.write_text(self.source, encoding="utf-8")
        return [path]


def backend_module(target: str):
    """The module of an executable backend; a clear error for an unknown or unavailable one."""
    if target not in BACKENDS:
        raise TilegraphError(f"unknown backend {target!r}; choose one of {', '.join(BACKENDS)}")
    try:
        return import_module(BACKENDS[target])
    except ModuleNotFoundError as error:
        if error.name and error.name.startswith("tilegraph"):
            raise TilegraphError(f"backend {target!r} is not built into this version of tilegraph") from None
        raise TilegraphError(f"backend {target!r} needs the Python package {error.name!r}; "
                             f"install it (pip install 'tilegraph[{target}]')") from None


def compile(graph: Graph | Program, target: str = "reference", pipeline: str | None = None, *,
            params: Mapping[str, np.ndarray] | None = None, seed: int = 0, **options) -> CompiledProgram:
    """Run `target`'s default pipeline (or `pipeline`) over `graph` and build it for `target`.

    Parameters take their values from the graph, then `params` by name, then seeded random
    values, as in the reference backend. `options` go to the backend's `build`.
    """
    from tilegraph.backends.reference import random_params
    from tilegraph.driver import compile_program

    source = graph.graph if isinstance(graph, Program) else graph
    # Draw parameters from the graph as written: the passes may rewrite a parameter's users (a
    # batch-norm variance then no longer looks like one), and random values must stay valid.
    drawn = {value.name: array for value, array in random_params(source, seed, params).items()}
    program, _ = compile_program(graph, pipeline, backend_module(target).TILE_TARGET)
    kept = {value.name for value in program.graph.params}
    return build_program(program, target, params={k: v for k, v in drawn.items() if k in kept}, seed=seed,
                         **options)


def build_program(program: Program, target: str, *, params: Mapping[str, np.ndarray] | None = None,
                  seed: int = 0, **options) -> CompiledProgram:
    """Build an already scheduled Program for `target` (the second half of `compile`)."""
    from tilegraph.backends.reference import random_params

    module = backend_module(target)
    return module.build(program, random_params(program.graph, seed, params), **options)
