"""`tilegraph.compile`: a Graph through the target's pipeline to something you can call.

Every executable backend plugs in the same way: a `Backend` entry in the registry of
`tilegraph.backends.base` (its name, the target preset its tiling pass uses, its module) and a
module with `build(program, params, **options) -> CompiledProgram`. The driver runs the pipeline
and binds the parameters; the backend turns the scheduled Program into code.

    fn = tilegraph.compile(graph, target="cpp")
    y, = fn(x)
    print(fn.report())
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from types import ModuleType

import numpy as np

from tilegraph.backends.base import CompiledProgram, get_backend  # CompiledProgram: re-exported, as before
from tilegraph.ir import Graph
from tilegraph.ir.program import Program


def backend_module(target: str) -> ModuleType:
    """The module of a registered backend; a clear error for an unknown or unavailable one."""
    return get_backend(target).load()


def compile(graph: Graph | Program, target: str = "reference", pipeline: str | None = None, *,
            params: Mapping[str, np.ndarray] | None = None, seed: int = 0, **options) -> CompiledProgram:
    """Run `target`'s default pipeline (or `pipeline`) over `graph` and build it for `target`.

    Parameters take their values from the graph, then `params` by name, then seeded random
    values, as in the reference backend. `options` go to the backend's `build`.
    """
    from tilegraph.backends.reference import random_params
    from tilegraph.driver import compile_program

    backend = get_backend(target)
    source = graph.graph if isinstance(graph, Program) else graph
    # Draw parameters from the graph as written: the passes may rewrite a parameter's users (a
    # batch-norm variance then no longer looks like one), and random values must stay valid.
    drawn = {value.name: array for value, array in random_params(source, seed, params).items()}
    program, manager = compile_program(graph, pipeline, backend.tile_target)
    kept = {value.name for value in program.graph.params}
    start = time.perf_counter()
    compiled = build_program(program, target, params={k: v for k, v in drawn.items() if k in kept}, seed=seed,
                             **options)
    built = time.perf_counter() - start
    phases = {record.name: record.seconds for record in manager.records}
    phases["verify"] = sum(record.verify_seconds for record in manager.records)
    # the backend's own phases (codegen, build), the rest of building under "bind"
    phases.update(compiled.compile_seconds)
    phases["bind"] = max(0.0, built - sum(compiled.compile_seconds.values()))
    compiled.compile_seconds = phases
    return compiled


def build_program(program: Program, target: str, *, params: Mapping[str, np.ndarray] | None = None,
                  seed: int = 0, **options) -> CompiledProgram:
    """Build an already scheduled Program for `target` (the second half of `compile`)."""
    from tilegraph.backends.reference import random_params

    return get_backend(target).build(program, random_params(program.graph, seed, params), **options)
