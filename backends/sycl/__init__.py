"""The SYCL 2020 backend: the cpp backend's loop-nest emitter in the SYCL dialect.

Per kernel, one `nd_range` `parallel_for` with a work-group per parallel tile: the group runs
the same code the C++ backend runs per OpenMP iteration, its work-items sharing each node's
outermost loop and meeting at barriers between nodes, the tile's intermediates in local memory
(`local_accessor`) when they fit, else in USM device memory; inputs, parameters, outputs and the arena are USM device allocations copied in and out by
the entry point. The output targets SYCL 2020 implementations (Intel oneAPI DPC++ `icpx -fsycl`,
AdaptiveCpp `acpp`). When neither is on PATH the program is generated but not built, unless
`host_include` names a directory with a host stand-in `sycl/sycl.hpp` (the tests use
`tests/sycl_host`), which g++ compiles into a sequential host build. No real SYCL compiler or
device has run this output in this project's tests.
"""
from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from tilegraph.backends.cpp import write_build
from tilegraph.backends.cpp.build import build_library, compile_flags, find_compiler
from tilegraph.backends.cpp.dialect import SyclDialect
from tilegraph.backends.cpp.emit import MicroKernel
from tilegraph.backends.cpp.runtime import NativeProgram
from tilegraph.backends.cpp.source import generate
from tilegraph.ir.program import Program

SYCL_COMPILERS: tuple[tuple[str, tuple[str, ...]], ...] = (("icpx", ("-fsycl", "-O3")), ("acpp", ("-O3",)))


class SyclProgram(NativeProgram):
    backend = "sycl"


def generate_source(program: Program, micro: MicroKernel | None = None, group_size: int = 8) -> str:
    """The SYCL source of a scheduled Program (deterministic)."""
    return generate(program, SyclDialect(group_size), micro or MicroKernel()).source


def find_sycl_compiler() -> tuple[str, tuple[str, ...]] | None:
    for name, flags in SYCL_COMPILERS:
        path = shutil.which(name)
        if path:
            return path, flags
    return None


def build(program: Program, params: Mapping, *, host_include: str | Path | None = None,
          cxxflags: str | Sequence[str] | None = None, micro: MicroKernel | None = None,
          group_size: int = 8) -> SyclProgram:
    """Generate SYCL source and build it: with a SYCL compiler on PATH, or, given `host_include`,
    with the C++ compiler against that host stand-in header. Otherwise the result holds the source
    and raises a clear error when called."""
    generated = generate(program, SyclDialect(group_size), micro or MicroKernel())
    if host_include is not None:
        compiler = find_compiler()
        flags = compile_flags(cxxflags if cxxflags is not None else "-O1") + [
            "-pthread", "-I", str(Path(host_include).resolve())]
        mode = f"host stand-in header {host_include} (sequential, not a SYCL runtime)"
    else:
        found = find_sycl_compiler()
        if found is None:
            reason = ("not built: no SYCL compiler (icpx, acpp) on PATH; the source is in .source, or pass "
                      "host_include= for a host test build")
            return SyclProgram(program, params, generated, None, {"reason": reason})
        compiler, default = found
        flags = compile_flags(cxxflags if cxxflags is not None else list(default))
        mode = "SYCL compiler"
    library, cached = build_library(generated.source, compiler, flags, suffix=".cpp")
    info = {"compiler": f"{compiler} ({mode})", "flags": " ".join(flags), "library": str(library), "cached": cached}
    return SyclProgram(program, params, generated, library, info)


__all__ = ["build", "generate_source", "write_build", "SyclProgram", "find_sycl_compiler"]
