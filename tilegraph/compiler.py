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
            params: Mapping[str, np.ndarray] | None = None, seed: int = 0, program_cache: bool = False,
            **options) -> CompiledProgram:
    """Run `target`'s default pipeline (or `pipeline`) over `graph` and build it for `target`.

    Parameters take their values from the graph, then `params` by name, then seeded random
    values, as in the reference backend. `program_cache`: reuse the scheduled Program of an equal
    graph compiled before, from disk (`tilegraph.program_cache`; the torch.compile backend does).
    `options` go to the backend's `build`.
    """
    from tilegraph.backends.reference import random_params

    backend = get_backend(target)
    if "memory_limit" in options:
        pipeline, options = limit_memory(backend, pipeline, options)
    source = graph.graph if isinstance(graph, Program) else graph
    # Draw parameters from the graph as written: the passes may rewrite a parameter's users (a
    # batch-norm variance then no longer looks like one), and random values must stay valid.
    drawn = {value.name: array for value, array in random_params(source, seed, params).items()}
    program, phases = _schedule(graph, pipeline, backend.tile_target, program_cache)
    kept = {value.name for value in program.graph.params}
    start = time.perf_counter()
    compiled = build_program(program, target, params={k: v for k, v in drawn.items() if k in kept}, seed=seed,
                             **options)
    built = time.perf_counter() - start
    # the backend's own phases (codegen, build), the rest of building under "bind"
    phases.update(compiled.compile_seconds)
    phases["bind"] = max(0.0, built - sum(compiled.compile_seconds.values()))
    compiled.compile_seconds = phases
    return compiled


def _schedule(graph: Graph | Program, pipeline: str | None, tile_target: str,
              program_cache: bool) -> tuple[Program, dict[str, float]]:
    """The scheduled Program and the seconds of each pass and of verifying them (or of the cache hit)."""
    from tilegraph.driver import compile_program
    from tilegraph.program_cache import enabled, run_cached

    if not enabled(program_cache):
        program, manager = compile_program(graph, pipeline, tile_target)
        overhead = {}
    else:
        run = run_cached(graph, pipeline, tile_target)
        if run.manager is None:
            return run.program, {"passes (cached)": run.seconds}
        program, manager = run.program, run.manager
        passes = sum(r.seconds + r.verify_seconds for r in manager.records)
        overhead = {"program cache": max(0.0, run.seconds - passes)}  # the key, and writing the entry
    phases = {record.name: record.seconds for record in manager.records}
    phases["verify"] = sum(record.verify_seconds for record in manager.records)
    return program, {**phases, **overhead}


def limit_memory(backend, pipeline: str | None, options: dict) -> tuple[str, dict]:
    """The pipeline and build options of `memory_limit=`: plan the memory, then build a library
    that executes the plan (only backends with the "memory-limit" capability can)."""
    from tilegraph.backends.base import with_capability
    from tilegraph.driver import memory_limited_pipeline
    from tilegraph.ir import TilegraphError

    options = dict(options)
    limit = options.pop("memory_limit")
    if limit is None:
        return pipeline, options
    if "memory-limit" not in backend.capabilities:
        raise TilegraphError(f"memory_limit applies to target {' or '.join(with_capability('memory-limit'))}, "
                             f"not {backend.name}")
    return memory_limited_pipeline(pipeline, backend.tile_target, limit), {**options, "execute_plan": True}


def build_program(program: Program, target: str, *, params: Mapping[str, np.ndarray] | None = None,
                  seed: int = 0, **options) -> CompiledProgram:
    """Build an already scheduled Program for `target` (the second half of `compile`)."""
    from tilegraph.backends.reference import random_params

    return get_backend(target).build(program, random_params(program.graph, seed, params), **options)
