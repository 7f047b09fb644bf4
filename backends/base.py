"""What every executable backend shares: `CompiledProgram`, the `Backend` description, the registry.

A backend is a module with `build(program, params, **options) -> CompiledProgram` plus one
`register_backend(Backend(...))` entry; `tilegraph.compile` and the CLI read everything else
(the tiling target, what `--emit source` and `--aot-arch` apply to, help texts) from the entry.
Modules are imported only when their backend is used, so optional dependencies (a C++ compiler,
triton) are needed only by those who use them.
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from types import ModuleType

import numpy as np

from tilegraph.ir import TilegraphError
from tilegraph.ir.program import Program

# The capabilities a backend may declare, and what each promises; the CLI consults them.
CAPABILITIES: dict[str, str] = {
    "source": "build() puts generated code in CompiledProgram.source (tilegraph compile --emit source)",
    "aot": "build() takes aot_arch= to compile ahead of time for a GPU architecture (--aot-arch)",
    "memory-limit": "executes a memory plan within a byte limit (`memory_limit=`, `--memory-limit`)",
}


class CompiledProgram:
    """A scheduled Program bound to its parameters, callable with inputs in graph-input order."""

    backend = "abstract"
    source_suffix = ".txt"  # the file extension of `source`

    def __init__(self, program: Program, params: Mapping, source: str = "") -> None:
        self.program = program
        self.params = dict(params)  # Value -> np.ndarray, every parameter of the graph
        self.source = source
        # seconds per compile phase (each pass, verify, codegen, build, ...), for the report; filled by
        # the backend's build and by tilegraph.compile
        self.compile_seconds: dict[str, float] = {}

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
        text = program_report(self.program) + (f"\nbackend {self.backend}:\n{extra}" if extra else "")
        if self.compile_seconds:
            phases = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in self.compile_seconds.items())
            text += f"\ncompile time: {sum(self.compile_seconds.values()):.2f} s ({phases})"
        return text

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


@dataclass(frozen=True, kw_only=True)
class Backend:
    """An executable backend: its name, the target preset its default pipeline tiles for, what it
    can do beyond running (`CAPABILITIES`), a one-line summary for help texts, and its module."""

    name: str
    tile_target: str
    capabilities: frozenset[str] = field(default_factory=frozenset)
    summary: str
    module: str  # dotted path of a module with `build(program, params, **options)`
    extra: str | None = None  # the `pip install 'tilegraph[extra]'` that brings its optional packages

    def __post_init__(self) -> None:
        object.__setattr__(self, "capabilities", frozenset(self.capabilities))
        unknown = self.capabilities - CAPABILITIES.keys()
        if unknown:
            raise ValueError(f"backend {self.name}: unknown capabilities {', '.join(sorted(unknown))} "
                             f"(known: {', '.join(CAPABILITIES)})")

    def load(self) -> ModuleType:
        """Import the backend's module; a clear error when it or a package it needs is missing."""
        try:
            return import_module(self.module)
        except ModuleNotFoundError as error:
            missing = error.name or ""
            if missing.split(".")[0] == "tilegraph":
                raise TilegraphError(f"backend {self.name!r} is not built into this version of tilegraph") from None
            if self.module == missing or self.module.startswith(missing + "."):
                raise TilegraphError(f"backend {self.name!r} cannot be loaded: no module {missing!r}") from None
            how = f" (pip install 'tilegraph[{self.extra}]')" if self.extra else ""
            raise TilegraphError(f"backend {self.name!r} needs the Python package {missing!r}; "
                                 f"install it{how}") from None

    def build(self, program: Program, params: Mapping, **options) -> CompiledProgram:
        """Build a scheduled Program (`params`: Value -> array) with the backend module's `build`."""
        return self.load().build(program, params, **options)


_REGISTRY: dict[str, Backend] = {}


def register_backend(backend: Backend) -> Backend:
    """Make `backend` available to `tilegraph.compile(target=...)` and the CLI."""
    if backend.name in _REGISTRY:
        raise ValueError(f"backend {backend.name} registered twice")
    _REGISTRY[backend.name] = backend
    return backend


def unregister_backend(name: str) -> Backend:
    """Remove a registered backend (for tests and plugins that register one for a while)."""
    return _REGISTRY.pop(name)


def get_backend(name: str) -> Backend:
    """The registered backend called `name`; a TilegraphError naming the choices otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, _REGISTRY, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise TilegraphError(f"unknown backend {name!r}{hint}; choose one of {', '.join(_REGISTRY)}") from None


def backends() -> tuple[Backend, ...]:
    """Every registered backend: the built-in ones in a fixed order, then others as registered."""
    return tuple(_REGISTRY.values())


def with_capability(capability: str) -> list[str]:
    """Names of the backends that declare `capability`, in registry order."""
    return [b.name for b in _REGISTRY.values() if capability in b.capabilities]


for _builtin in (
    Backend(name="reference", tile_target="accel-small", summary="tiled numpy executor",
            module="tilegraph.backends.reference.compiled"),
    Backend(name="cpp", tile_target="cpu", capabilities=frozenset({"source", "memory-limit"}),
            summary="C++17 and OpenMP", module="tilegraph.backends.cpp"),
    Backend(name="sycl", tile_target="cpu", capabilities=frozenset({"source"}),
            summary="SYCL 2020, built with icpx or acpp", module="tilegraph.backends.sycl"),
    Backend(name="triton", tile_target="gpu-h100", capabilities=frozenset({"source", "aot"}),
            summary="Triton kernels for CUDA GPUs", module="tilegraph.backends.triton",
            extra="triton"),
    Backend(name="sim", tile_target="accel-small", summary="tiled numpy plus simulated cycles",
            module="tilegraph.backends.sim.compiled"),
):
    register_backend(_builtin)
