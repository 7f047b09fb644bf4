"""A sweep spec (TOML): models, a base accelerator, axes to vary; its sampled points and their tasks.

    [sweep]
    models = ["examples/lenet.tg", "examples/mlp.tg"]   # .tg or .tgir
    accelerator = "edge-npu"                            # a preset name or a .toml file
    samples = 20                                        # optional: seeded random points, not the grid
    seed = 0

    [axes]                   # any Accelerator field, or a memplan setting (capacity, time_limit, solver, order)
    pe_rows = [8, 16]
    dataflow = ["ws", "os"]

    [memplan]                # fixed memplan settings where no axis varies them
    time_limit = 2.0
    solver = "auto"

    [area]                   # the area proxy's per-unit weights (mm^2)
    pe_mm2 = 0.0119
    sram_mm2_per_byte = 4.7e-6

Relative paths are looked up beside the spec file, then in the current folder. Every mistake is a
`SpecError` whose one line names the spec file and the key.
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import random
import tomllib
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilegraph.ir import TilegraphError
from tilegraph.ir.accel import Accelerator, load_accel

Value = int | float | str | bool

# Accelerator fields a sweep may vary: all but the labels.
ACCEL_AXES: dict[str, type] = {name: kind for name, kind in typing.get_type_hints(Accelerator).items()
                               if name not in ("name", "description")}
# Memory-planner settings (arguments of tilegraph.simulation.prepare) a sweep may vary or fix.
MEMPLAN_AXES: dict[str, type] = {"capacity": int, "time_limit": float, "solver": str, "order": str}
SOLVERS = ("auto", "heuristic", "cpsat")
ORDERS = ("free", "fixed")
BYTE_FIELDS = ("scratchpad_bytes", "capacity")  # also accept "256 KiB"
KIND_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
MODEL_SUFFIXES = (".tg", ".tgir")
SECTIONS = {"sweep": ("models", "accelerator", "samples", "seed"), "axes": None,
            "memplan": tuple(MEMPLAN_AXES), "area": ("pe_mm2", "sram_mm2_per_byte")}


class SpecError(TilegraphError):
    """A malformed sweep spec; the message names the spec file and the key."""


@dataclass(frozen=True)
class AreaWeights:
    """The area proxy: PEs and scratchpad bytes at per-unit weights. The defaults are a 45 nm estimate to
    match the presets' 45 nm energies: an f32 multiplier (7,700 um^2) and adder (4,184 um^2) per PE
    (Horowitz, ISSCC 2014), and a 0.346 um^2 6T SRAM cell x 8 bits x ~1.7 for the array periphery."""

    pe_mm2: float = 0.0119
    sram_mm2_per_byte: float = 4.7e-6

    def area(self, pes: int, sram_bytes: int) -> float:
        return self.pe_mm2 * pes + self.sram_mm2_per_byte * sram_bytes


@dataclass(frozen=True)
class MemplanSettings:
    """How `prepare` plans memory at a point: capacity (None: the scratchpad), time limit (deterministic
    seconds), solver and kernel order."""

    capacity: int | None = None
    time_limit: float = 2.0
    solver: str = "auto"
    order: str = "free"


@dataclass(frozen=True)
class Model:
    """One model of the sweep: its name (the file's stem), file, text and kind (.tg or .tgir)."""

    name: str
    path: Path
    text: str
    suffix: str


@dataclass(frozen=True)
class Axis:
    """One varied parameter and its values, in the order the spec lists them."""

    name: str
    values: tuple[Value, ...]


@dataclass(frozen=True)
class Point:
    """One design point: its index among the sampled points and the value of every axis."""

    index: int
    params: tuple[tuple[str, Value], ...]


@dataclass(frozen=True)
class PointTask:
    """What a worker needs for one (model, point) pair, self-contained so a remote worker needs no files;
    `key` is the content hash that resume looks up."""

    model: Model
    point: Point
    base: Accelerator
    memplan: MemplanSettings
    key: str

    def accelerator(self) -> Accelerator:
        return dataclasses.replace(self.base, **{k: v for k, v in self.point.params if k in ACCEL_AXES})

    def settings(self) -> MemplanSettings:
        return dataclasses.replace(self.memplan, **{k: v for k, v in self.point.params if k in MEMPLAN_AXES})


@dataclass(frozen=True)
class SweepSpec:
    """A parsed, checked sweep spec."""

    path: Path
    text: str
    models: tuple[Model, ...]
    accelerator: Accelerator
    axes: tuple[Axis, ...]
    samples: int | None
    seed: int
    memplan: MemplanSettings
    area: AreaWeights

    @property
    def grid_size(self) -> int:
        return math.prod(len(a.values) for a in self.axes)

    def points(self) -> tuple[Point, ...]:
        """The full grid in axis order, or `samples` distinct grid points drawn with `seed` (in grid
        order); the whole grid when `samples` covers it."""
        size = self.grid_size
        if self.samples is None or self.samples >= size:
            chosen: typing.Iterable[int] = range(size)
        else:
            chosen = sorted(random.Random(self.seed).sample(range(size), self.samples))
        return tuple(Point(i, self._decode(flat)) for i, flat in enumerate(chosen))

    def _decode(self, flat: int) -> tuple[tuple[str, Value], ...]:
        """Grid index -> axis values (the last axis varies fastest, as itertools.product)."""
        picked = []
        for axis in reversed(self.axes):
            flat, i = divmod(flat, len(axis.values))
            picked.append((axis.name, axis.values[i]))
        return tuple(reversed(picked))

    def tasks(self) -> tuple[PointTask, ...]:
        """Every (model, point) pair, models in spec order, then points."""
        points = self.points()
        tasks = []
        for model in self.models:
            for point in points:
                task = PointTask(model, point, self.accelerator, self.memplan, "")
                tasks.append(dataclasses.replace(task, key=point_key(model, task.accelerator(), task.settings())))
        return tuple(tasks)


def point_key(model: Model, accel: Accelerator, settings: MemplanSettings) -> str:
    """The content hash of a (model, point): the model's text and kind, the point's whole accelerator and
    memplan settings (so an axis value equal to the base's hashes as the base), and the tilegraph version.
    Equal keys give equal results, so resume reuses them."""
    from tilegraph import __version__

    content = {"model": model.text, "suffix": model.suffix, "accelerator": dataclasses.asdict(accel),
               "memplan": dataclasses.asdict(settings), "version": __version__}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def load_spec(path: str | Path) -> SweepSpec:
    """Read and check a spec file; raise SpecError (one line, naming the file and key) on any mistake."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such spec file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: cannot read: {e}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML: {e}") from None
    return parse_spec(data, path, text)


def parse_spec(data: dict[str, Any], path: Path, text: str = "") -> SweepSpec:
    """Check the TOML data of a spec read from `path` (relative paths resolve beside it)."""
    fail = _Failer(path)
    for section, value in data.items():
        if section not in SECTIONS:
            fail(section, f"unknown section; expected {', '.join(f'[{s}]' for s in SECTIONS)}")
        if not isinstance(value, dict):
            fail(section, f"must be a table [{section}]")
        for key in value if SECTIONS[section] else ():
            if key not in SECTIONS[section]:
                fail(f"{section}.{key}", "unknown key" + _hint(key, SECTIONS[section])
                     + f"; [{section}] takes {', '.join(SECTIONS[section])}")
    sweep = data.get("sweep")
    if sweep is None:
        fail("sweep", "missing: the spec needs a [sweep] table with models and accelerator")
    models = _models(sweep, path, fail)
    accelerator = _accelerator(sweep, path, fail)
    samples = sweep.get("samples")
    if samples is not None and (not _is_int(samples) or samples < 1):
        fail("sweep.samples", f"must be a positive integer, got {samples!r}")
    seed = sweep.get("seed", 0)
    if not _is_int(seed):
        fail("sweep.seed", f"must be an integer, got {seed!r}")
    memplan = MemplanSettings(**{key: _value(f"memplan.{key}", key, value, fail)
                                 for key, value in data.get("memplan", {}).items()})
    area = AreaWeights(**{key: _number(f"area.{key}", value, fail) for key, value in data.get("area", {}).items()})
    axes = tuple(_axis(name, values, accelerator, fail) for name, values in data.get("axes", {}).items())
    return SweepSpec(path, text, models, accelerator, axes, samples, seed, memplan, area)


class _Failer:
    """Raises the spec's one-line errors: `spec.toml: [axes] pe_rows: must be ...`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, key: str, message: str) -> typing.NoReturn:
        section, _, rest = key.partition(".")
        where = f"[{section}] {rest}" if rest else f"[{section}]"
        raise SpecError(f"{self.path}: {where}: {message}")


def _resolve(name: str, spec_path: Path) -> Path | None:
    """A path as written: beside the spec file first, then from the current folder; None if neither exists."""
    given = Path(name)
    for candidate in ([given] if given.is_absolute() else [spec_path.parent / given, given]):
        if candidate.exists():
            return candidate
    return None


def _models(sweep: dict[str, Any], path: Path, fail: _Failer) -> tuple[Model, ...]:
    names = sweep.get("models")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        fail("sweep.models", f"must be a non-empty list of .tg or .tgir file names, got {names!r}")
    models: list[Model] = []
    for name in names:
        found = _resolve(name, path)
        if found is None:
            fail("sweep.models", f"{name}: no such model file (looked beside the spec and in the current folder)")
        if found.suffix not in MODEL_SUFFIXES:
            fail("sweep.models", f"{name}: unknown model type {found.suffix or '(none)'}; expected .tg or .tgir")
        if found.stem in [m.name for m in models]:
            fail("sweep.models", f"{name}: two models named {found.stem} (the results name models by file stem)")
        try:
            text = found.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            fail("sweep.models", f"{name}: cannot read: {e}")
        models.append(Model(found.stem, found, text, found.suffix))
    return tuple(models)


def _accelerator(sweep: dict[str, Any], path: Path, fail: _Failer) -> Accelerator:
    name = sweep.get("accelerator")
    if not isinstance(name, str):
        fail("sweep.accelerator", f"must be a preset name or a .toml file, got {name!r}")
    source: str | Path = name
    if name.endswith(".toml"):
        source = _resolve(name, path) or name
    try:
        return load_accel(source)
    except TilegraphError as e:
        fail("sweep.accelerator", str(e).splitlines()[0])


def _axis(name: str, values: Any, base: Accelerator, fail: _Failer) -> Axis:
    if name not in ACCEL_AXES and name not in MEMPLAN_AXES:
        fail(f"axes.{name}", "unknown field" + _hint(name, [*ACCEL_AXES, *MEMPLAN_AXES])
             + "; axes are Accelerator fields (ir/accel.py) or memplan settings "
             + f"({', '.join(MEMPLAN_AXES)})")
    listed = values if isinstance(values, list) else [values]  # a single value fixes the field
    if not listed:
        fail(f"axes.{name}", "no values")
    checked = tuple(_value(f"axes.{name}", name, v, fail) for v in listed)
    if len(set(checked)) != len(checked):
        fail(f"axes.{name}", f"a value is listed twice in {listed!r}")
    for value in checked if name in ACCEL_AXES else ():
        try:
            dataclasses.replace(base, **{name: value})
        except TilegraphError as e:
            fail(f"axes.{name}", f"{value!r}: {str(e).splitlines()[0]}")
    return Axis(name, checked)


def _value(key: str, name: str, value: Any, fail: _Failer) -> Value:
    """One value of field `name`, of the field's type (ints where floats go become floats; byte sizes may
    carry units)."""
    kind = ACCEL_AXES.get(name) or MEMPLAN_AXES[name]
    if name in BYTE_FIELDS and isinstance(value, str):
        from tilegraph.ir.units import parse_bytes

        try:
            return parse_bytes(value)
        except ValueError as e:
            fail(key, str(e))
    if kind is bool and isinstance(value, bool) or kind is str and isinstance(value, str):
        checked: Value = value
    elif kind is int and _is_int(value):
        checked = value
    elif kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        checked = float(value)
    else:
        fail(key, f"must be {KIND_WORDS[kind]}"
             + (" or a size such as '256 KiB'" if name in BYTE_FIELDS else "") + f", got {value!r}")
    choices = {"solver": SOLVERS, "order": ORDERS}.get(name)
    if choices and checked not in choices:
        fail(key, f"must be one of {', '.join(choices)}, got {checked!r}")
    if name in ("capacity",) and checked < 1 or name == "time_limit" and checked < 0:
        fail(key, f"must be {'positive' if name == 'capacity' else 'at least 0'}, got {checked!r}")
    return checked


def _number(key: str, value: Any, fail: _Failer) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        fail(key, f"must be a number >= 0, got {value!r}")
    return float(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _hint(name: str, choices: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


__all__ = ["SweepSpec", "SpecError", "Axis", "Point", "PointTask", "Model", "MemplanSettings", "AreaWeights",
           "load_spec", "parse_spec", "point_key", "ACCEL_AXES", "MEMPLAN_AXES"]
