"""The older flat preset format of targets and accelerators, still read from files given by path.

TOML tables are only grouping, so `[memory] onchip_bytes = ...` and a top-level `onchip_bytes = ...`
mean the same field. Shipped presets are in the hardware format (`ir/hardware.py`).
"""
from __future__ import annotations

import dataclasses
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
