"""The on-disk cache of scheduled Programs (`tilegraph.program_cache`): a second compile of the same
graph skips the passes and builds byte-identical code with equal outputs; another graph, pipeline
or weights miss; a corrupt entry is recompiled over; the environment variable turns it off."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import tilegraph
from tilegraph import program_cache
from tilegraph.ir import GraphBuilder

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the C++ backend needs g++")

FAST = "-O1 -fopenmp"


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    """A private cache root, with the cache on whatever the caller's environment says."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(program_cache.ENV, raising=False)
    return tmp_path / "cache"


def layer(seed: int = 0, act: str = "relu", name: str = "layer"):
    """x @ w.T + 2 * b, activated: the transpose of w folds into a view of w, 2 * b into stored data."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(name)
    x = b.input("x", [4, 8])
    w = b.param("w", [16, 8], rng.standard_normal((16, 8)).astype(np.float32))
    bias = b.param("b", [16], rng.standard_normal(16).astype(np.float32))
    y = b.add(b.matmul(x, b.transpose(w, perm=(1, 0))), b.mul(bias, 2.0))
    return b.output(getattr(b, act)(y))


def compile_cached(graph, **options):
    return tilegraph.compile(graph, target="cpp", program_cache=True, cxxflags=FAST, **options)


def entries(root) -> list:
    return sorted((root / "tilegraph" / "programs").glob("*.npz"))


def run(compiled, x):
    return compiled(x)[0]


def test_a_second_compile_hits_and_builds_the_same_source_with_the_same_outputs(cache_home):
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    first = compile_cached(layer())
    assert "passes (cached)" not in first.compile_seconds and "fuse" in first.compile_seconds
    assert len(entries(cache_home)) == 1
    second = compile_cached(layer())
    assert "passes (cached)" in second.compile_seconds and "fuse" not in second.compile_seconds
    assert second.source == first.source
    np.testing.assert_array_equal(run(second, x), run(first, x))
    uncached = tilegraph.compile(layer(), target="cpp", cxxflags=FAST)
    assert uncached.source == first.source
    np.testing.assert_array_equal(run(uncached, x), run(first, x))


def test_folded_parameters_come_back_as_views_of_the_inputs_or_from_the_entry(cache_home):
    graph = layer()
    first = compile_cached(graph)
    second = compile_cached(layer())
    data = {v.name: a for v, a in first.params.items()}
    again = {v.name: a for v, a in second.params.items()}
    assert data.keys() == again.keys() and len(data) == 2  # w as w^T, and 2 * b
    for name in data:
        np.testing.assert_array_equal(again[name], data[name])


def test_another_graph_pipeline_or_weights_miss(cache_home):
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    compile_cached(layer())
    other_op = compile_cached(layer(act="tanh"))
    other_pipeline = compile_cached(layer(), pipeline="canonicalize{cse=false},fuse,tile{target=cpu}")
    other_weights = compile_cached(layer(seed=3))
    for compiled in (other_op, other_pipeline, other_weights):
        assert "passes (cached)" not in compiled.compile_seconds
    assert len(entries(cache_home)) == 4
    fresh = tilegraph.compile(layer(seed=3), target="cpp", cxxflags=FAST)
    np.testing.assert_array_equal(run(other_weights, x), run(fresh, x))


def test_a_corrupt_entry_is_recompiled_and_rewritten(cache_home):
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    first = compile_cached(layer())
    (entry,) = entries(cache_home)
    for damage in (b"not an npz", entry.read_bytes()[:100]):
        entry.write_bytes(damage)
        again = compile_cached(layer())
        assert "passes (cached)" not in again.compile_seconds
        assert again.source == first.source
        np.testing.assert_array_equal(run(again, x), run(first, x))
        assert "passes (cached)" in compile_cached(layer()).compile_seconds  # the entry was written again


def test_an_entry_whose_program_text_is_broken_is_ignored(cache_home):
    compile_cached(layer())
    (entry,) = entries(cache_home)
    with np.load(entry) as stored:
        arrays = dict(stored)
    arrays["program"] = np.frombuffer(b"func @broken(", np.uint8)
    np.savez(entry, **arrays)
    assert "passes (cached)" not in compile_cached(layer()).compile_seconds


def test_the_environment_variable_turns_it_off(cache_home, monkeypatch):
    monkeypatch.setenv(program_cache.ENV, "0")
    compile_cached(layer())
    compiled = compile_cached(layer())
    assert "passes (cached)" not in compiled.compile_seconds and not entries(cache_home)


def test_tilegraph_compile_leaves_it_off_unless_asked(cache_home):
    tilegraph.compile(layer(), target="cpp", cxxflags=FAST)
    assert not entries(cache_home)


def test_the_key_follows_the_code_of_the_passes(cache_home, monkeypatch):
    program = tilegraph.ir.program.Program.unfused(layer())
    key = program_cache.program_key(program, "canonicalize")
    assert program_cache.program_key(program, "canonicalize") == key
    monkeypatch.setattr(program_cache, "code_version", lambda: "an edited pass")
    assert program_cache.program_key(program, "canonicalize") != key


def test_a_target_file_named_by_the_pipeline_is_part_of_the_key(cache_home, tmp_path):
    preset = (Path(tilegraph.ir.__file__).parent / "hardware_presets" / "cpu.toml").read_text()
    target = tmp_path / "my_cpu.toml"
    target.write_text(preset)
    pipeline = f"canonicalize,fuse,tile{{target={target}}}"
    compile_cached(layer(), pipeline=pipeline)
    assert "passes (cached)" in compile_cached(layer(), pipeline=pipeline).compile_seconds
    target.write_text(preset.replace("bytes = 1048576", "bytes = 4096"))  # a smaller L2: other tiles
    assert "passes (cached)" not in compile_cached(layer(), pipeline=pipeline).compile_seconds


def test_an_unusable_cache_directory_compiles_without_the_cache(tmp_path, monkeypatch):
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    compiled = tilegraph.compile(layer(), target="reference", program_cache=True)
    assert "passes (cached)" not in compiled.compile_seconds
    np.testing.assert_array_equal(run(compiled, x), run(tilegraph.compile(layer(), target="reference"), x))


def test_a_hit_reports_what_the_passes_decided(cache_home):
    first = compile_cached(layer())
    second = compile_cached(layer())
    assert "passes (cached)" in second.compile_seconds
    from tilegraph.report import program_report

    report = program_report(first.program, explain_fusion=True)
    assert "tiling for target" in report and "decisions:" in report
    assert program_report(second.program, explain_fusion=True) == report
