"""Sweep specs: the issue's example, sampling, content hashes, and one-line errors naming file and key."""
from pathlib import Path

import pytest

from tilegraph.sweep.spec import SpecError, load_spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = """\
[sweep]
models = ["examples/lenet.tg", "examples/mlp.tg"]
accelerator = "edge-npu"

[axes]
pe_rows = [8, 16]
pe_cols = [8, 16]
scratchpad_bytes = [131072, 524288]
dataflow = ["ws", "os"]
"""


def write(tmp_path, text, name="spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_issue_example_is_a_full_grid_from_the_repository_root(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the models are found from the current folder when not beside the spec
    spec = load_spec(write(tmp_path, EXAMPLE))
    assert [m.name for m in spec.models] == ["lenet", "mlp"] and spec.accelerator.name == "edge-npu"
    points = spec.points()
    assert len(points) == 16 and len(spec.tasks()) == 32
    assert dict(points[0].params) == {"pe_rows": 8, "pe_cols": 8, "scratchpad_bytes": 131072, "dataflow": "ws"}
    assert dict(points[1].params)["dataflow"] == "os"  # the last axis varies fastest
    assert len({p.params for p in points}) == 16
    accel = spec.tasks()[5].accelerator()
    assert (accel.pe_rows, accel.pe_cols, accel.scratchpad_bytes, accel.dataflow) == (8, 16, 131072, "os")


def test_models_beside_the_spec_are_found_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "mlp.tg").write_text((ROOT / "examples" / "mlp.tg").read_text())
    spec = load_spec(write(tmp_path / "m", '[sweep]\nmodels = ["mlp.tg"]\naccelerator = "tpu-like"\n'))
    assert spec.models[0].path == tmp_path / "m" / "mlp.tg" and len(spec.points()) == 1


def test_random_samples_are_seeded_distinct_grid_points(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    text = EXAMPLE.replace('accelerator = "edge-npu"', 'accelerator = "edge-npu"\nsamples = 5\nseed = 7')
    first, again = load_spec(write(tmp_path, text)).points(), load_spec(write(tmp_path, text)).points()
    grid = {p.params for p in load_spec(write(tmp_path, EXAMPLE)).points()}
    assert first == again and len({p.params for p in first}) == 5 and {p.params for p in first} <= grid
    other = load_spec(write(tmp_path, text.replace("seed = 7", "seed = 8"))).points()
    assert [p.params for p in other] != [p.params for p in first]
    everything = load_spec(write(tmp_path, text.replace("samples = 5", "samples = 100"))).points()
    assert len(everything) == 16  # more samples than the grid: the grid


def test_values_take_the_fields_types_units_and_memplan_settings(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    spec = load_spec(write(tmp_path, '[sweep]\nmodels = ["examples/mlp.tg"]\naccelerator = "edge-npu"\n'
                           '[axes]\ndram_bytes_per_cycle = [8, 12.5]\nscratchpad_bytes = ["128 KiB"]\n'
                           'solver = ["heuristic", "auto"]\ndouble_buffer = false\n'
                           '[memplan]\ntime_limit = 1\n[area]\npe_mm2 = 1\nsram_mm2_per_byte = 0\n'))
    axes = {a.name: a.values for a in spec.axes}
    assert axes == {"dram_bytes_per_cycle": (8.0, 12.5), "scratchpad_bytes": (131072,),
                    "solver": ("heuristic", "auto"), "double_buffer": (False,)}
    assert isinstance(axes["dram_bytes_per_cycle"][0], float)
    task = spec.tasks()[0]
    assert task.settings().solver == "heuristic" and task.settings().time_limit == 1.0
    assert task.accelerator().double_buffer is False and spec.area.area(256, 10**6) == 256.0


def test_the_content_hash_follows_model_text_and_point_but_not_names(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    spec = load_spec(write(tmp_path, EXAMPLE))
    keys = [t.key for t in spec.tasks()]
    assert len(set(keys)) == len(keys) and keys == [t.key for t in load_spec(write(tmp_path, EXAMPLE)).tasks()]
    reordered = EXAMPLE.replace('dataflow = ["ws", "os"]', 'dataflow = ["os", "ws"]')
    assert set(keys) == {t.key for t in load_spec(write(tmp_path, reordered)).tasks()}
    other_base = load_spec(write(tmp_path, EXAMPLE.replace("edge-npu", "tpu-like")))
    assert not set(keys) & {t.key for t in other_base.tasks()}
    # a value equal to the base's is the base: edge-npu has 16 rows
    plain = '[sweep]\nmodels = ["examples/mlp.tg"]\naccelerator = "edge-npu"\n'
    assert (load_spec(write(tmp_path, plain)).tasks()[0].key
            == load_spec(write(tmp_path, plain + "[axes]\npe_rows = [16]\n")).tasks()[0].key)


BAD = [
    ('[axes]\npe_rowz = [8]', "[axes] pe_rowz: unknown field (did you mean pe_rows?)"),
    ("[axes]\npe_rows = [0, 8]", "[axes] pe_rows: 0: accelerator edge-npu: pe_rows must be at least 1"),
    ('[axes]\npe_rows = ["x"]', "[axes] pe_rows: must be an integer, got 'x'"),
    ('[axes]\ndataflow = ["ws", "xs"]', "[axes] dataflow: 'xs'"),
    ("[axes]\npe_rows = [8, 8]", "[axes] pe_rows: a value is listed twice"),
    ("[axes]\npe_rows = []", "[axes] pe_rows: no values"),
    ('[axes]\nsolver = ["fast"]', "[axes] solver: must be one of auto, heuristic, cpsat"),
    ('[axes]\nscratchpad_bytes = ["lots"]', "[axes] scratchpad_bytes: cannot read 'lots'"),
    ("[memplan]\ntime_limt = 1", "[memplan] time_limt: unknown key (did you mean time_limit?)"),
    ("[area]\npe_mm2 = -1", "[area] pe_mm2: must be a number >= 0"),
    ("[extra]\nx = 1", "[extra]: unknown section"),
]


@pytest.mark.parametrize("extra, message", BAD)
def test_bad_values_name_the_spec_file_and_the_key(tmp_path, monkeypatch, extra, message):
    monkeypatch.chdir(ROOT)
    path = write(tmp_path, '[sweep]\nmodels = ["examples/mlp.tg"]\naccelerator = "edge-npu"\n' + extra + "\n")
    with pytest.raises(SpecError) as error:
        load_spec(path)
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("sweep, message", [
    ('models = ["examples/nope.tg"]\naccelerator = "edge-npu"', "[sweep] models: examples/nope.tg: no such model"),
    ('models = ["README.md"]\naccelerator = "edge-npu"', "[sweep] models: README.md: unknown model type .md"),
    ('models = "examples/mlp.tg"\naccelerator = "edge-npu"', "[sweep] models: must be a non-empty list"),
    ('models = ["examples/mlp.tg"]\naccelerator = "edge-npuu"', "[sweep] accelerator: unknown accelerator"),
    ('models = ["examples/mlp.tg"]\naccelerator = "cpu-gpu-pcie"', "[sweep] accelerator:"),
    ('models = ["examples/mlp.tg"]\naccelerator = "edge-npu"\nsamples = 0', "[sweep] samples: must be a positive"),
    ('models = ["examples/mlp.tg"]\naccelerator = "edge-npu"\nseeds = 1', "[sweep] seeds: unknown key"),
    ('models = ["examples/mlp.tg", "examples/mlp.tg"]\naccelerator = "edge-npu"', "two models named mlp"),
])
def test_bad_sweep_tables(tmp_path, monkeypatch, sweep, message):
    monkeypatch.chdir(ROOT)
    with pytest.raises(SpecError, match=None) as error:
        load_spec(write(tmp_path, f"[sweep]\n{sweep}\n"))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_unreadable_specs(tmp_path):
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec(tmp_path / "missing.toml")
    with pytest.raises(SpecError, match=r"not valid TOML"):
        load_spec(write(tmp_path, "[sweep\n"))
    with pytest.raises(SpecError, match=r"\[sweep\]: missing"):
        load_spec(write(tmp_path, "[axes]\npe_rows = [8]\n"))
