"""An on-disk cache of scheduled Programs, so that compiling the same graph again skips the passes.

An entry is keyed by a hash of the input program's text, the pipeline, the parameters' data (a
CRC-32 per parameter: folding reads weights, and a uniform result changes the program's structure)
and the source of the IR and pass code (editing a pass invalidates every entry). It holds the
scheduled Program's text, the passes' report notes, and how to give each of its parameters data
again: the input parameter of that name, a view of one (a folded relayout keeps numpy's transposed
view), or stored data (other folded constants). Entries live in `programs/` beside the C++ library
cache (`$XDG_CACHE_HOME/tilegraph`, private to the user: the notes are pickled, as the libraries
there are loaded as code); `TILEGRAPH_PROGRAM_CACHE=0` turns the cache off. An entry that cannot be
read is ignored and rewritten.
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import pickle
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tilegraph.ir.errors import TilegraphError
from tilegraph.ir.graph import Graph, Value
from tilegraph.ir.program import Program
from tilegraph.ir.program_text import parse_program, print_program
from tilegraph.ir.switches import switched_on

ENV = "TILEGRAPH_PROGRAM_CACHE"
FORMAT = 2  # bump when the entry layout changes
MAX_STORED_BYTES = 64 << 20  # folded data beyond this is not worth a disk entry: recompile instead


@dataclass(frozen=True)
class CachedRun:
    """What `run_cached` gives: the scheduled Program, the PassManager that made it (None on a hit),
    and whether it came from the cache."""

    program: Program
    manager: object | None
    hit: bool
    seconds: float


def enabled(requested: bool = True) -> bool:
    """Whether to use the cache: asked for, and not turned off by TILEGRAPH_PROGRAM_CACHE=0."""
    return requested and switched_on(ENV)


def cache_dir() -> Path:
    """`programs/` beside the C++ build cache, private to the user like it."""
    from tilegraph.backends.cpp.build import cache_dir as native_dir

    path = native_dir().parent / "programs"
    path.mkdir(exist_ok=True, mode=0o700)
    return path


@functools.cache
def code_version() -> str:
    """A hash of the IR and pass packages' files: a pass or op definition edited gives new keys."""
    import tilegraph.ir
    import tilegraph.passes

    digest = hashlib.sha256(tilegraph.__version__.encode())
    for package in (tilegraph.ir, tilegraph.passes):
        root = Path(package.__file__).parent
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\1")
    return digest.hexdigest()


def program_key(program: Program, pipeline: str, files: tuple[Path, ...] = ()) -> str:
    """The entry's name: input text, pipeline (and the `files` it names, e.g. a target's .toml),
    parameter data and code version, hashed."""
    digest = hashlib.sha256(f"tilegraph-program-cache {FORMAT}\0{code_version()}\0{pipeline}\0".encode())
    for path in files:
        digest.update(path.read_bytes() + b"\0")
    digest.update(print_program(program).encode())
    for value in program.graph.params:
        digest.update(f"\0{value.name}:".encode())
        if value.data is not None:
            data = np.ascontiguousarray(value.data)
            digest.update(f"{data.dtype.str}{data.shape}{zlib.crc32(data.view(np.uint8).reshape(-1))}".encode())
    return digest.hexdigest()[:40]


def run_cached(source: Graph | Program, pipeline: str | None, target: str) -> CachedRun:
    """`driver.compile_program(source, pipeline, target)`, through the cache."""
    from tilegraph.driver import compile_program, default_pipeline
    from tilegraph.passes import parse_pipeline

    start = time.perf_counter()
    program = source if isinstance(source, Program) else Program.unfused(source)
    steps = parse_pipeline(pipeline or default_pipeline(target))
    try:
        path = cache_dir() / f"{program_key(program, str(steps), _named_files(steps))}.npz"
    except (OSError, TilegraphError):  # no usable cache directory: compile as without the cache
        path = None
    loaded = load_entry(path, program.graph) if path is not None else None
    if loaded is not None:
        return CachedRun(loaded, None, True, time.perf_counter() - start)
    result, manager = compile_program(program, pipeline, target)
    if path is not None:
        try:
            store_entry(path, result, program.graph)
        except OSError:  # a full or read-only disk costs the next compile its hit, nothing more
            pass
    return CachedRun(result, manager, False, time.perf_counter() - start)


def _named_files(steps) -> tuple[Path, ...]:
    """Files the pipeline's options name (a target's .toml): their contents are part of the key."""
    import dataclasses

    named = []
    for step in steps:
        for option in dataclasses.fields(step.options):
            value = getattr(step.options, option.name)
            if isinstance(value, str) and value.endswith(".toml") and Path(value).is_file():
                named.append(Path(value))
    return tuple(named)


# ----- entries ---------------------------------------------------------------------------------
def _root(array: np.ndarray) -> np.ndarray:
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _view(base: np.ndarray, offset: int, shape, strides, dtype) -> np.ndarray | None:
    """`base`'s memory seen with `shape` and `strides` from byte `offset`; None where it does not fit."""
    if not base.flags.c_contiguous:
        return None
    try:
        return np.ndarray(tuple(shape), np.dtype(dtype), buffer=base, offset=offset, strides=tuple(strides))
    except (TypeError, ValueError):
        return None


def _recipe(value: Value, inputs: dict[int, Value], roots: dict[int, Value]) -> dict | None:
    """How to give `value` its data again from the input graph; None where it must be stored."""
    data = value.data
    if data is None:
        return {"from": "none"}
    same = inputs.get(id(data))
    if same is not None:
        return {"from": "input", "name": same.name}
    source = roots.get(id(_root(data)))
    if source is not None:
        offset = _address(data) - _address(source.data)
        view = _view(source.data, offset, data.shape, data.strides, data.dtype.str)
        if view is not None and _address(view) == _address(data) and view.strides == data.strides:
            return {"from": "view", "name": source.name, "offset": offset, "strides": list(data.strides),
                    "dtype": data.dtype.str}
    return None


def store_entry(path: Path, program: Program, source: Graph) -> bool:
    """Write `program`'s entry atomically; False (nothing written) where its folded data is too big."""
    with_data = [v for v in source.params if v.data is not None]
    inputs = {id(v.data): v for v in with_data}
    roots = {id(_root(v.data)): v for v in with_data if v.data.flags.c_contiguous}
    recipes, stored = [], {}
    for index, value in enumerate(program.graph.params):
        recipe = _recipe(value, inputs, roots)
        if recipe is None:
            recipe = {"from": "stored"}
            stored[f"p{index}"] = np.ascontiguousarray(value.data)
        recipes.append(recipe)
    if sum(a.nbytes for a in stored.values()) > MAX_STORED_BYTES:
        return False
    manifest = json.dumps({"params": [v.name for v in program.graph.params], "recipes": recipes})
    try:  # the passes' report notes (fusion decisions, tiling figures: plain frozen dataclasses)
        notes = pickle.dumps(program.notes, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # a note that does not pickle: the report of a hit then lacks the notes
        notes = pickle.dumps({})
    buffer = io.BytesIO()
    np.savez(buffer, program=np.frombuffer(print_program(program).encode(), np.uint8),
             manifest=np.frombuffer(manifest.encode(), np.uint8), notes=np.frombuffer(notes, np.uint8), **stored)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp_", suffix=".npz", delete=False) as tmp:
        tmp.write(buffer.getvalue())
    os.replace(tmp.name, path)
    return True


def load_entry(path: Path, source: Graph) -> Program | None:
    """The Program stored at `path` with its parameters' data; None where there is none or it is unreadable."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as entry:
            program = parse_program(entry["program"].tobytes().decode(), filename=str(path))
            manifest = json.loads(entry["manifest"].tobytes().decode())
            by_name = {v.name: v for v in source.params}
            params = program.graph.params
            if manifest["params"] != [v.name for v in params] or len(manifest["recipes"]) != len(params):
                return None
            for index, (value, recipe) in enumerate(zip(params, manifest["recipes"])):
                data = _data(recipe, value, by_name, entry, index)
                if recipe["from"] != "none" and (data is None or tuple(data.shape) != value.type.shape):
                    return None
                value.data = data
            program.notes.update(pickle.loads(entry["notes"].tobytes()))
    except Exception:  # a corrupt or foreign entry (truncated file, bad text, missing array): recompile
        return None
    return program


def _data(recipe: dict, value: Value, by_name: dict[str, Value], entry, index: int) -> np.ndarray | None:
    kind = recipe["from"]
    if kind == "none":
        return None
    if kind == "stored":
        return entry[f"p{index}"]
    source = by_name.get(recipe["name"])
    if source is None or source.data is None:
        return None
    if kind == "input":
        return source.data
    if kind == "view":
        return _view(source.data, recipe["offset"], value.type.shape, recipe["strides"], recipe["dtype"])
    return None
