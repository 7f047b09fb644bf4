"""The scheduled Program is the faithful record: every decision prints, parses back equal, and
builds the same code; properties a pass invalidates are dropped with their decisions."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from strategies import graphs

from tilegraph.driver import load_program
from tilegraph.ir.errors import VerifyError
from tilegraph.ir.program import Program
from tilegraph.ir.program_text import parse_program, print_program
from tilegraph.passes import PassManager, verify_program

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.tg"))
# memplan at the largest kernel's working set (capacity=1 grown to it), where most examples spill
WHOLE = ("canonicalize,fuse,tile{target=accel-small},"
         "memplan{capacity=1,grow=true,weights=true,solver=heuristic},place{method=heft}")


def generated_sources(program: Program) -> dict[str, str]:
    """Every backend's generated source for `program` (Triton only where it is installed)."""
    from tilegraph.backends import cpp, sycl

    sources = {"cpp": cpp.generate_source(program), "sycl": sycl.generate_source(program)}
    try:
        from tilegraph.backends import triton
        sources["triton"] = triton.generate_source(program)
    except ImportError:
        pass
    return sources


def assert_faithful(program: Program) -> None:
    text = print_program(program)
    parsed = parse_program(text)
    assert print_program(parsed) == text
    assert parsed.memory_plan == program.memory_plan
    assert parsed.placement == program.placement
    assert parsed.target == program.target
    assert parsed.properties == program.properties
    verify_program(parsed)
    assert generated_sources(parsed) == generated_sources(program)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_round_trip_through_the_whole_pipeline(path):
    program = PassManager(WHOLE).run(load_program(path))
    assert program.memory_plan is not None and program.placement is not None and program.target is not None
    assert_faithful(program)


def test_some_example_spills_so_the_plan_in_the_text_is_not_trivial():
    plans = [PassManager(WHOLE).run(load_program(path)).memory_plan for path in EXAMPLES]
    assert any(plan.traffic > 0 for plan in plans)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(graphs(max_nodes=6))
def test_random_graphs_round_trip_through_the_whole_pipeline(graph):
    assert_faithful(PassManager(WHOLE).run(graph))


def test_a_pass_that_invalidates_a_property_drops_it_and_its_decision():
    program = PassManager("canonicalize,fuse,tile{target=accel-small},memplan{capacity=1,grow=true},"
                          "fuse").run(load_program(ROOT / "examples" / "mlp.tg"))
    assert "tiled" not in program.properties and "memplanned" not in program.properties
    assert program.target is None and program.memory_plan is None
    assert not any(kernel.tiles for kernel in program.kernels)


def test_a_claimed_property_that_does_not_hold_is_caught():
    from dataclasses import replace

    tiled = PassManager("canonicalize,fuse,tile{target=accel-small}").run(load_program(ROOT / "examples" / "mlp.tg"))
    untiled = replace(tiled, kernels=tuple(replace(k, tiles=()) for k in tiled.kernels))
    with pytest.raises(VerifyError, match="property tiled"):
        verify_program(untiled)
    planned = PassManager("memplan{capacity=1,grow=true}").run(tiled)
    shuffled = replace(planned, kernels=planned.kernels[::-1])
    with pytest.raises(VerifyError, match="property memplanned"):
        verify_program(shuffled)


def test_backends_never_import_passes():
    offenders = []
    for path in sorted((ROOT / "backends").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.startswith("tilegraph.passes")]
            if isinstance(node, ast.ImportFrom) and node.level >= 2 and (node.module or "").startswith("passes"):
                offenders.append(f"{path.relative_to(ROOT)}: {'.' * node.level}{node.module}")
    assert not offenders, "backends read the Program, never the passes:\n" + "\n".join(offenders)
