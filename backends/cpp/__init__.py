"""The C++/OpenMP backend: one C++17 translation unit per Program, built and loaded with ctypes.

    fn = tilegraph.compile(graph, target="cpp")      # or build(program, params)
    y, = fn(x)
    write_build(fn, "build/")                         # the source and the library

Modules: `emit` (the loop-nest emitter, shared with SYCL), `microkernel`, `attention`, `fold`
(parameter-only nodes computed at load time), `layout`, `source` (the translation unit; its
arena comes from `tilegraph.backends.arena`), `build` (compiler, cache, errors), `runtime`
(ctypes), `names`.
"""
from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from tilegraph.ir import TilegraphError
from tilegraph.ir.program import Program
from tilegraph.ir.units import parse_bytes

from .build import BuildError, build_library, compile_flags, find_compiler
from .dialect import Dialect
from .emit import MicroKernel
from .names import mangle
from .runtime import NativeProgram
from .source import Generated, generate

def generate_source(program: Program, micro: MicroKernel | None = None) -> str:
    """The C++ source of a scheduled Program (deterministic: same Program, same text)."""
    return generate(program, Dialect(), micro or MicroKernel()).source


PACKED_WEIGHTS_VARIABLE = "TILEGRAPH_PACKED_WEIGHTS"


def build(program: Program, params: Mapping, *, cxx: str | None = None,
          cxxflags: str | Sequence[str] | None = None, micro: MicroKernel | None = None,
          trace: bool = False, execute_plan: bool = False,
          packed_weight_limit: int | str | None = None) -> NativeProgram:
    """Generate, compile (or fetch from the cache) and load `program`; `params` maps Value -> array.

    `trace`: a debug build that logs where each kernel found its tensors (`plan_trace()`);
    `execute_plan`: fail, saying why, unless the library carries out the Program's memory plan;
    `packed_weight_limit` (or `$TILEGRAPH_PACKED_WEIGHTS`; bytes, "512MiB", 0 for none): the most memory
    held in load-time copies of weights packed for the register blocks, beside the caller's (default 1 GiB)."""
    start = time.perf_counter()
    micro = micro or MicroKernel()
    limit = packed_weight_limit if packed_weight_limit is not None else os.environ.get(PACKED_WEIGHTS_VARIABLE)
    if limit is not None:
        micro = replace(micro, packed_weight_limit=_bytes_or_zero(limit))
    generated = generate(program, Dialect(), micro, trace=trace)
    if execute_plan:
        require_executed_plan(program, generated)
    generated_at = time.perf_counter()
    compiler = find_compiler(cxx)
    flags = compile_flags(cxxflags)
    library, cached = build_library(generated.source, compiler, flags, units=generated.units)
    info = {"compiler": compiler, "flags": " ".join(flags), "library": str(library), "cached": cached}
    if generated.units:
        info["units"] = f"{len(generated.units)} translation units, compiled in parallel"
    compiled = NativeProgram(program, params, generated, library, info)
    compiled.compile_seconds = {"codegen": generated_at - start,
                                "build (cached)" if cached else "build": time.perf_counter() - generated_at}
    return compiled


def _bytes_or_zero(limit: int | str) -> int:
    """A byte limit as given (an int, "512MiB", "0"); a TilegraphError names what cannot be read."""
    if isinstance(limit, int):
        return max(0, limit)
    if limit.strip().lower() in ("0", "0b"):
        return 0
    try:
        return parse_bytes(limit)
    except ValueError as e:
        raise TilegraphError(f"cpp backend: packed_weight_limit ({PACKED_WEIGHTS_VARIABLE}): {e}, or 0 for no "
                             "copies") from None


def require_executed_plan(program: Program, generated: Generated) -> None:
    """A TilegraphError unless `generated` keeps its tensors where the memory plan says."""
    arena = generated.arena
    if program.memory_plan is None:
        raise TilegraphError("cpp backend: no memory plan to execute (add memplan to the pipeline, or use "
                             "--memory-limit)")
    if arena.refused:
        raise TilegraphError(f"cpp backend: cannot execute the memory plan: {arena.refused}")


def write_build(compiled: NativeProgram, directory: str | Path) -> list[Path]:
    """Write the generated source and (when built) the library into `directory`; returns the paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stem = mangle(compiled.program.graph.name)
    ext = ".sycl.cpp" if compiled.backend == "sycl" else ".cpp"
    source = directory / f"{stem}{ext}"
    source.write_text(compiled.source)
    paths = [source]
    if compiled.library_path is not None:
        library = directory / f"lib{stem}.so"
        shutil.copyfile(compiled.library_path, library)
        paths.append(library)
    return paths


__all__ = ["build", "write_build", "generate_source", "NativeProgram", "MicroKernel", "BuildError",
           "Generated"]
