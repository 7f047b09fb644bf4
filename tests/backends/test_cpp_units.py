"""Large programs build as several translation units, compiled in parallel and cached one by one."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from native_checks import FAST_FLAGS, assert_close

import tilegraph
from tilegraph.backends import reference
from tilegraph.backends.cpp import source
from tilegraph.backends.cpp.build import find_compiler
from tilegraph.driver import compile_program
from tilegraph.frontends.dsl import parse_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

try:
    find_compiler(None)
    HAVE_CXX = True
except Exception:  # noqa: BLE001
    HAVE_CXX = False


@pytest.fixture
def split_small_programs(monkeypatch, tmp_path):
    """Split even the examples, on a fresh build cache."""
    monkeypatch.setattr(source, "SPLIT_LINES", 10)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "tilegraph" / "native"


def test_units_split_by_size_and_the_entry_declares_what_it_calls(monkeypatch):
    monkeypatch.setattr(source, "SPLIT_LINES", 10)
    program = compile_program(parse_file(str(EXAMPLES / "lenet.tg")), None, "cpu")[0]
    from tilegraph.backends.cpp.dialect import Dialect

    for cores, expected in ((1, 0), (2, 2), (3, 3)):
        units = source.generate(program, Dialect(), cores=cores).units
        assert len(units) == expected
        if not units:
            continue
        assert sum('extern "C" int tg_run(' in u for u in units) == 1
        assert all("static int kernel_" not in u for u in units)  # hidden, so other units can call them
        entry = next(u for u in units if "tg_run(" in u)
        called = {line.split("err = ")[1].split("(")[0] for line in entry.splitlines() if "err = kernel_" in line}
        for name in called:  # declared or defined in the entry's unit
            assert f"int {name}(" in entry


@pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler")
def test_a_split_build_matches_the_reference_and_rebuilds_only_changed_units(split_small_programs):
    graph = parse_file(str(EXAMPLES / "lenet.tg"))
    fn = tilegraph.compile(graph, target="cpp", cxxflags=FAST_FLAGS)
    assert len(fn.generated.units) >= 2 and "translation units" in fn.report()
    x = reference.random_inputs(graph)
    assert_close(fn(*x), tilegraph.compile(graph, "reference")(*x), [v.type for v in graph.outputs])
    objects = set(split_small_programs.glob("*.o"))
    assert len(objects) == len(fn.generated.units)
    # a different memory limit changes the entry point's unit only: the kernels' objects are reused
    tilegraph.compile(graph, target="cpp", cxxflags=FAST_FLAGS, memory_limit="1MiB")
    assert len(set(split_small_programs.glob("*.o")) - objects) <= len(fn.generated.units) - 1
