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

import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tilegraph.ir.program import Program

from .build import BuildError, build_library, compile_flags, find_compiler
from .dialect import Dialect
from .emit import MicroKernel
from .names import mangle
from .runtime import NativeProgram
from .source import Generated, generate

def generate_source(program: Program, micro: MicroKernel | None = None) -> str:
    """The C++ source of a scheduled Program (deterministic: same Program, same text)."""
    return generate(program, Dialect(), micro or MicroKernel()).source


def build(program: Program, params: Mapping, *, cxx: str | None = None,
          cxxflags: str | Sequence[str] | None = None, micro: MicroKernel | None = None) -> NativeProgram:
    """Generate, compile (or fetch from the cache) and load `program`; `params` maps Value -> array."""
    start = time.perf_counter()
    generated = generate(program, Dialect(), micro or MicroKernel())
    generated_at = time.perf_counter()
    compiler = find_compiler(cxx)
    flags = compile_flags(cxxflags)
    library, cached = build_library(generated.source, compiler, flags)
    info = {"compiler": compiler, "flags": " ".join(flags), "library": str(library), "cached": cached}
    compiled = NativeProgram(program, params, generated, library, info)
    compiled.compile_seconds = {"codegen": generated_at - start,
                                "build (cached)" if cached else "build": time.perf_counter() - generated_at}
    return compiled


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
