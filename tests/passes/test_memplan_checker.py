"""The independent checker accepts valid plans and names each kind of broken one."""
from __future__ import annotations

import dataclasses

import pytest

from tilegraph.ir.memory_plan import Residency, TransferEvent
from tilegraph.passes.memplan import MemoryProblem, PlanCheckError, TensorKind, check_plan, find_violations, solve_problem

I, X = TensorKind.INPUT, TensorKind.INTERMEDIATE


@pytest.fixture
def problem():
    # x -> k0 -> a -> k1 -> b ; k2 reads a and b -> c (output)
    return MemoryProblem(("x", "a", "b", "c"), (2, 2, 2, 2), (I, X, X, X), (False, False, False, True),
                         ("k0", "k1", "k2"), ((0,), (1,), (1, 2)), ((1,), (2,), (3,)))


@pytest.fixture
def plan(problem):
    plan = solve_problem(problem, 6, order="fixed", time_limit=2)
    check_plan(problem, plan)
    return plan


def broken(problem, plan, **changes):
    return find_violations(problem, dataclasses.replace(plan, **changes))


def test_valid_plan_passes(problem, plan):
    assert find_violations(problem, plan) == []
    assert plan.traffic == 0 and plan.compulsory == 4


def test_order_must_be_topological(problem, plan):
    assert any("before" in v for v in broken(problem, plan, order=("k1", "k0", "k2")))
    assert broken(problem, plan, order=("k0", "k1"))


def test_operand_must_be_resident(problem, plan):
    rs = tuple(r for r in plan.residencies if r.tensor != "a")
    assert any("operand %a is not resident" in v for v in broken(problem, plan, residencies=rs))


def test_overlap_and_capacity(problem, plan):
    rs = tuple(dataclasses.replace(r, offset=0) for r in plan.residencies)
    assert any("overlaps" in v for v in broken(problem, plan, residencies=rs))
    rs = tuple(dataclasses.replace(r, offset=5) if r.tensor == "x" else r for r in plan.residencies)
    assert any("outside capacity" in v for v in broken(problem, plan, residencies=rs))
    assert any("exceeds capacity" in v or "outside capacity" in v for v in broken(problem, plan, capacity=4))


def test_resident_before_produced(problem, plan):
    rs = tuple(dataclasses.replace(r, start=0) if r.tensor == "b" else r for r in plan.residencies)
    assert any("before it is produced" in v for v in broken(problem, plan, residencies=rs))


def test_reload_needs_an_earlier_store(problem):
    # a spilled after k0 and reloaded for k2 without being stored first
    plan = solve_problem(problem, 6, order="fixed", time_limit=2)
    rs = [r for r in plan.residencies if r.tensor != "a"]
    a_off = next(r.offset for r in plan.residencies if r.tensor == "a")
    rs += [Residency("a", 0, 1, a_off, 2), Residency("a", 2, 2, a_off, 2)]
    events = plan.events + (TransferEvent(2, "load", "a", 2, False),)
    bad = broken(problem, plan, residencies=tuple(rs), events=events, traffic=2)
    assert any("no earlier store" in v for v in bad)
    events += (TransferEvent(1, "store", "a", 2, False),)
    assert broken(problem, plan, residencies=tuple(rs), events=events, traffic=4) == []


def test_traffic_must_match_events(problem, plan):
    assert any("reported traffic" in v for v in broken(problem, plan, traffic=plan.traffic + 1))
    assert any("compulsory" in v for v in broken(problem, plan, compulsory=0))
    events = tuple(dataclasses.replace(e, compulsory=not e.compulsory) for e in plan.events)
    assert any("marked compulsory" in v for v in broken(problem, plan, events=events))


def test_outputs_must_be_stored(problem, plan):
    events = tuple(e for e in plan.events if e.kind != "store")
    assert any("never stored" in v for v in broken(problem, plan, events=events))


def test_load_must_start_a_residency(problem, plan):
    events = plan.events + (TransferEvent(2, "load", "x", 2, False),)
    assert any("starts no residency" in v for v in broken(problem, plan, events=events, traffic=2))


def test_check_plan_raises_with_every_violation(problem, plan):
    with pytest.raises(PlanCheckError) as info:
        check_plan(problem, dataclasses.replace(plan, traffic=99, compulsory=0))
    assert len(info.value.violations) == 2


def test_checker_shares_no_code_with_the_solvers():
    import ast
    import pathlib

    import tilegraph.passes.memplan.checker as checker

    tree = ast.parse(pathlib.Path(checker.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert imported <= {"__future__", "collections"}
