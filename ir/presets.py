"""Hardware descriptions as flat dataclasses, read from TOML presets by name or by path.

Targets (tiling), accelerators (the simulator) and their presets share this: TOML tables are only
grouping, so `[memory] onchip_bytes = ...` and a top-level `onchip_bytes = ...` mean the same field.
"""
from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any, TypeVar

from .errors import TilegraphError

T = TypeVar("T")


def from_flat_toml(cls: type[T], data: dict[str, Any], default_name: str, error: type[TilegraphError],
                   what: str) -> T:
    """Build `cls` from TOML data: top-level keys and the keys of any tables, flattened and type-checked."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        for inner, item in (value.items() if isinstance(value, dict) else [(key, value)]):
            if isinstance(item, dict):
                raise error(f"{what} {default_name}: table [{key}.{inner}] is nested too deep")
            if inner in flat:
                raise error(f"{what} {default_name}: {inner} is given twice")
            flat[inner] = item
    flat.setdefault("name", default_name)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(flat) - set(fields))
    if unknown:
        raise error(f"{what} {flat['name']}: unknown field(s) {', '.join(unknown)}; fields: {', '.join(fields)}")
    missing = [n for n, f in fields.items() if f.default is dataclasses.MISSING and n not in flat]
    if missing:
        raise error(f"{what} {flat['name']}: missing field(s) {', '.join(missing)}")
    for name, value in flat.items():
        expected = fields[name].type
        ok = {"int": isinstance(value, int) and not isinstance(value, bool),
              "float": isinstance(value, (int, float)) and not isinstance(value, bool),
              "bool": isinstance(value, bool), "str": isinstance(value, str)}.get(expected, True)
        if not ok:
            raise error(f"{what} {flat['name']}: {name} must be {expected}, got {value!r}")
        if expected == "float":
            flat[name] = float(value)
    return cls(**flat)


def preset_names(preset_dir: Path) -> list[str]:
    return sorted(p.stem for p in preset_dir.glob("*.toml"))


def read_preset(name_or_path: str | Path, preset_dir: Path, error: type[TilegraphError],
                what: str) -> tuple[dict[str, Any], str]:
    """The TOML data of a preset by name or a file by path, and the name it goes by."""
    path = Path(name_or_path)
    if path.suffix != ".toml" and not path.exists():
        path = preset_dir / f"{name_or_path}.toml"
        if not path.exists():
            raise error(f"unknown {what} {str(name_or_path)!r}; presets: {', '.join(preset_names(preset_dir))} "
                        "(or give the path of a .toml file)")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")), path.stem
    except FileNotFoundError:
        raise error(f"{path}: no such {what} file") from None
    except tomllib.TOMLDecodeError as e:
        raise error(f"{path}: {e}") from None
