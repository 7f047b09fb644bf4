"""Read models and run-time data from files: `.tg` (DSL) and `.tgir` (IR text), `.npz` arrays."""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from tilegraph.ir import Graph, InputError, TilegraphError
from tilegraph.ir.program import Program

SOURCE_SUFFIXES = (".tg", ".tgir")


def load_graph(path: str | Path, entry: str | None = None) -> Graph:
    """Parse a model file, choosing the parser by extension; a scheduled Program's `.tgir` (as
    `tilegraph compile --emit tgir` writes it) gives its graph."""
    path = Path(path)
    if path.suffix not in SOURCE_SUFFIXES:
        raise TilegraphError(f"{path}: unknown file type {path.suffix or '(none)'}; "
                             f"expected one of {', '.join(SOURCE_SUFFIXES)}")
    if path.suffix == ".tg":
        from tilegraph.frontends.dsl import parse

        return parse(read_text(path), filename=str(path), entry=entry)
    return load_tgir(path, entry).graph


def load_tgir(path: Path, entry: str | None = None) -> Program:
    """A `.tgir` file as a Program (a bare function is the unfused Program of its graph), with the
    parameter values saved beside it."""
    if entry is not None:
        raise TilegraphError(f"{path}: --entry applies to .tg files only")
    from tilegraph.ir.program_text import parse_program

    program = parse_program(read_text(path), filename=str(path))
    attach_params(program.graph, path)
    return program


def params_sidecar(path: Path) -> Path:
    """Where the weights of `model.tgir` live: `model.params.npz` beside it (the text carries no data)."""
    return path.with_name(path.stem + ".params.npz")


def attach_params(graph: Graph, path: Path) -> Graph:
    """Give the graph's params the values saved beside `path`, when a sidecar exists."""
    sidecar = params_sidecar(path)
    if not sidecar.exists():
        return graph
    arrays = load_npz(sidecar, "params")
    for value in graph.params:
        if value.name in arrays:
            array = arrays[value.name]
            if tuple(array.shape) != value.type.shape:
                raise InputError(f"params file {sidecar}: {value.name} has shape {list(array.shape)}, "
                                 f"the model declares {value.type}")
            value.data = array
    return graph


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TilegraphError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TilegraphError(f"{path}: is a directory, not a model file") from None
    except UnicodeDecodeError as e:
        raise TilegraphError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise TilegraphError(f"{path}: cannot read: {e.strerror}") from None


def load_npz(path: str | Path, role: str) -> dict[str, np.ndarray]:
    """Arrays by name from an .npz file, never unpickling objects."""
    path = Path(path)
    if path.is_file() and not zipfile.is_zipfile(path):
        raise InputError(f"{role} file {path}: not a valid .npz archive (save one with numpy.savez)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except FileNotFoundError:
        raise InputError(f"{role} file {path}: no such file") from None
    except ValueError as e:
        raise InputError(f"{role} file {path}: cannot load ({e})") from None
    except (OSError, EOFError) as e:
        raise InputError(f"{role} file {path}: not a valid .npz archive ({e})") from None
