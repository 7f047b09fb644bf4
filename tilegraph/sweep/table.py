"""The sweep's results: one row per (model, point), the journal that resume reads, and the Parquet table.

DIR/rows.jsonl is the journal: one JSON line per finished point, appended as results arrive, so an
interrupted sweep loses nothing. DIR/results.parquet is the table, rewritten whole at the end of each
run in a fixed row order (models in spec order, then points), so the same spec gives the same table
on any executor; `wall_s` is the one column that differs between runs.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tilegraph.ir import TilegraphError

from .pareto import pareto_front
from .spec import ACCEL_AXES, MEMPLAN_AXES, SweepSpec

JOURNAL = "rows.jsonl"
RESULTS = "results.parquet"
# What the point function measures, with Arrow types (in table order, after the axis columns).
METRICS = {"cycles": "int64", "latency_s": "float64", "energy_pj": "float64", "dram_bytes": "int64",
           "dram_compulsory_bytes": "int64", "dram_spill_reload_bytes": "int64", "dram_stream_bytes": "int64",
           "utilisation": "float64", "plan_gap": "float64", "plan_status": "string"}
OBJECTIVES = ("latency_s", "energy_pj", "area_mm2")  # minimised together by the Pareto fronts
ARROW_OF = {int: "int64", float: "float64", str: "string", bool: "bool"}


def require_pyarrow():
    """pyarrow, or a clear error naming the extra that installs it."""
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ModuleNotFoundError:
        raise TilegraphError("tilegraph sweep writes Parquet with pyarrow, which is not installed: "
                             "pip install 'tilegraph[dse]'") from None
    return pyarrow


def read_journal(out_dir: Path) -> dict[str, dict[str, Any]]:
    """The journal's finished rows by content hash (the last line for a hash wins; a torn last line from an
    interrupted run is skipped)."""
    rows: dict[str, dict[str, Any]] = {}
    path = out_dir / JOURNAL
    if not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "key" in row:
            rows[row["key"]] = row
    return rows


class Journal:
    """Appends finished rows to DIR/rows.jsonl, one flushed line each."""

    def __init__(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.file = open(out_dir / JOURNAL, "a", encoding="utf-8")

    def append(self, row: Mapping[str, Any]) -> None:
        self.file.write(json.dumps(row, sort_keys=True) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def assemble(spec: SweepSpec, results: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The table's rows in spec order: each task's identity and axis values, its result (by content
    hash), its area proxy and whether it is on its model's Pareto front."""
    rows = []
    for task in spec.tasks():
        result = results[task.key]
        try:
            accel = task.accelerator()
            pes, sram = accel.pes, accel.scratchpad_bytes
        except TilegraphError:
            pes = sram = None
        row: dict[str, Any] = {"model": task.model.name, "point": task.point.index, **dict(task.point.params)}
        row["status"] = result["status"]
        row.update({name: result.get(name) for name in METRICS})
        row.update(pes=pes, sram_bytes=sram,
                   area_mm2=None if pes is None else spec.area.area(pes, sram), pareto=False,
                   wall_s=result.get("wall_s"), error=result.get("error", ""), key=task.key)
        rows.append(row)
    for model in spec.models:
        ok = [r for r in rows if r["model"] == model.name and r["status"] == "ok"]
        for i in pareto_front([[r[o] for o in OBJECTIVES] for r in ok]):
            ok[i]["pareto"] = True
    return rows


def schema(spec: SweepSpec):
    """The Arrow schema: model, point, one column per axis (the field's type), status, metrics, area, ..."""
    pa = require_pyarrow()
    axis_types = {**ACCEL_AXES, **MEMPLAN_AXES}
    fields = [("model", "string"), ("point", "int64"),
              *((a.name, ARROW_OF[axis_types[a.name]]) for a in spec.axes), ("status", "string"),
              *METRICS.items(), ("pes", "int64"), ("sram_bytes", "int64"), ("area_mm2", "float64"),
              ("pareto", "bool"), ("wall_s", "float64"), ("error", "string"), ("key", "string")]
    return pa.schema([(name, pa.type_for_alias(kind)) for name, kind in fields])


def write_table(spec: SweepSpec, rows: Iterable[Mapping[str, Any]], out_dir: Path) -> Path:
    """Write DIR/results.parquet (through a temporary file, so a reader never sees half a table); the
    spec's text and the tilegraph version ride along in the file's metadata."""
    pa = require_pyarrow()
    import pyarrow.parquet as pq

    from tilegraph import __version__

    rows = list(rows)
    columns = schema(spec)
    table = pa.Table.from_pylist(rows, schema=columns).replace_schema_metadata(
        {"tilegraph_version": __version__, "spec_path": str(spec.path), "spec": spec.text,
         "accelerator": spec.accelerator.name, "axes": json.dumps([a.name for a in spec.axes])})
    path = out_dir / RESULTS
    partial = out_dir / (RESULTS + ".partial")
    pq.write_table(table, partial)
    os.replace(partial, path)
    return path


def read_table(out_dir: Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """DIR/results.parquet as row dicts, and its metadata (spec text, version, axis names)."""
    require_pyarrow()
    import pyarrow.parquet as pq

    path = out_dir / RESULTS
    if not path.exists():
        raise TilegraphError(f"{out_dir}: no {RESULTS} here (write one with tilegraph sweep SPEC -o {out_dir})")
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise TilegraphError(f"{path}: cannot read the results table: {e}") from None
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    return table.to_pylist(), meta
