"""Running sweeps: the pool and Ray give the same table, failing points are recorded, resume skips work."""
import json
from pathlib import Path

import pytest

pytest.importorskip("pyarrow", reason="sweep results are Parquet: the optional dse extra (pip install -e '.[dse]')")

from tilegraph.sweep import load_spec, pool_executor, ray_executor, run_point, run_sweep  # noqa: E402
from tilegraph.sweep.table import JOURNAL, RESULTS, read_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# 8 tiny tasks; a 64-byte scratchpad is too small for any tile, so those 4 points fail in the tile pass.
SPEC = f"""\
[sweep]
models = ["{ROOT}/examples/mlp.tg", "{ROOT}/examples/lenet.tg"]
accelerator = "edge-npu"

[axes]
scratchpad_bytes = [64, 131072]
dataflow = ["ws", "os"]

[memplan]
solver = "heuristic"
"""


def serial(tasks):
    """An in-process executor that remembers what it was asked to run."""
    serial.ran = [t.key for t in tasks]
    for task in tasks:
        yield run_point(task)


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text(SPEC)
    return load_spec(path)


def without_wall_time(rows):
    return [{k: v for k, v in row.items() if k != "wall_s"} for row in rows]


def test_a_failing_point_is_recorded_and_the_others_complete(spec, tmp_path):
    outcome = run_sweep(spec, tmp_path / "out", pool_executor(2), progress=False)
    rows, _ = read_table(tmp_path / "out")
    assert without_wall_time(rows) == without_wall_time(outcome.rows) and len(rows) == 8
    assert [(r["model"], r["point"]) for r in rows] == [(m, p) for m in ("mlp", "lenet") for p in range(4)]
    failed = [r for r in rows if r["status"] == "error"]
    assert outcome.failed == 4 and {r["scratchpad_bytes"] for r in failed} == {64}
    assert all(r["error"].startswith("TilingError: kernel") and r["cycles"] is None for r in failed)
    assert all(not r["pareto"] and r["area_mm2"] > 0 for r in failed)  # the area proxy needs no simulation
    for row in (r for r in rows if r["status"] == "ok"):
        assert row["cycles"] > 0 and row["latency_s"] == row["cycles"] / 1e9 and row["energy_pj"] > 0
        assert row["dram_bytes"] >= row["dram_compulsory_bytes"] > 0 and 0 < row["utilisation"] <= 1
        assert row["plan_gap"] == 0.0 and row["error"] == "" and row["wall_s"] > 0
        assert row["pes"] == 256 and row["sram_bytes"] == 131072
    assert sum(r["pareto"] for r in rows if r["model"] == "mlp") >= 1


def test_resume_reruns_only_points_without_a_successful_row(spec, tmp_path):
    out = tmp_path / "out"
    first = run_sweep(spec, out, serial, progress=False)
    assert first.ran == 8 and len(serial.ran) == 8
    again = run_sweep(spec, out, serial, progress=False)
    assert serial.ran == [t.key for t in spec.tasks() if t.point.params[0][1] == 64]  # only the failed ones
    assert (again.ran, again.reused) == (4, 4)
    assert without_wall_time(again.rows) == without_wall_time(first.rows)
    # an interrupted run: the journal lost two finished rows and ends in a torn line
    journal = out / JOURNAL
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    lost = [row["key"] for row in lines if row["status"] == "ok"][:2]
    kept = [json.dumps(row) for row in lines if row["key"] not in lost]
    journal.write_text("\n".join(kept) + '\n{"key": "torn')
    (out / RESULTS).unlink()
    resumed = run_sweep(spec, out, serial, progress=False)
    assert sorted(serial.ran) == sorted(lost + [t.key for t in spec.tasks() if t.point.params[0][1] == 64])
    assert without_wall_time(resumed.rows) == without_wall_time(first.rows)


def test_the_pool_and_a_local_ray_give_the_same_table(spec, tmp_path):
    ray = pytest.importorskip("ray", reason="the Ray executor needs the optional dse extra")
    pooled = run_sweep(spec, tmp_path / "pool", pool_executor(2), progress=False)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    try:
        on_ray = run_sweep(spec, tmp_path / "ray", ray_executor(), progress=False)
    finally:
        ray.shutdown()
    assert on_ray.ran == 8 and on_ray.failed == pooled.failed == 4
    assert without_wall_time(on_ray.rows) == without_wall_time(pooled.rows)
    import pyarrow.parquet as pq

    tables = [pq.read_table(tmp_path / d / RESULTS).drop(["wall_s"]) for d in ("pool", "ray")]
    assert tables[0].equals(tables[1])
