"""Streamed tensors in the memory plan: their tile traffic recorded, totalled, printed, checked, and
the smallest capacity a kernel runs in with every tensor streamed."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from strategies import graphs

from tilegraph.ir import GraphBuilder
from tilegraph.ir.memory_plan import TransferEvent
from tilegraph.ir.program_text import parse_program, print_program
from tilegraph.ir.stream_traffic import min_tile_working_set, read_at_least, stream_traffic
from tilegraph.passes import run_pipeline
from tilegraph.passes.memplan import InfeasibleCapacityError, format_report
from tilegraph.passes.memplan.pass_ import MemplanOptions, plan_program, plan_violations
from tilegraph.passes.memplan.streaming import stream_tiling_target
from tilegraph.passes.tiling import TilingError

TILE = "canonicalize,fuse,tile{target=accel-small}"


def matmul_graph(m: int, k: int, n: int):
    b = GraphBuilder("mm")
    x = b.input("x", (m, k))
    w = b.param("w", (k, n))
    return b.output(b.relu(b.matmul(x, w)))


def chain_graph():
    """x -> matmul -> relu -> matmul: the middle tensor (256 KiB) is produced and read by kernels."""
    b = GraphBuilder("chain")
    x = b.input("x", (256, 64))
    w1, w2 = b.param("w1", (64, 256)), b.param("w2", (256, 64))
    h = b.relu(b.matmul(x, w1))
    return b.output(b.matmul(h, w2))


def streamed_program(graph, capacity: str = "64KiB", weights: bool = True):
    tiled = run_pipeline(graph, TILE)
    plan = plan_program(tiled, MemplanOptions(capacity=capacity, weights=weights, stream=True, solver="heuristic"))
    return tiled, plan


def test_the_plan_records_the_streamed_tensors_tile_traffic():
    tiled, plan = streamed_program(matmul_graph(256, 256, 256), "256KiB")
    assert plan.streamed == ("w", "x") and plan.stream_events
    assert {e.tensor for e in plan.stream_events} == {"w", "x"}
    # the inputs' first reads are compulsory (their whole size), the re-reads are not
    for name in ("w", "x"):
        assert sum(e.bytes for e in plan.stream_events if e.tensor == name and e.compulsory) == 256 * 256 * 4
    assert plan.streamed_traffic == sum(e.bytes for e in plan.stream_events if not e.compulsory) > 0
    assert plan.streamed_compulsory == 2 * 256 * 256 * 4
    assert plan.total_traffic == plan.traffic + plan.compulsory + plan.streamed_traffic + plan.streamed_compulsory
    # one implementation: the events are the tile model's for the plan's order and capacity
    target = stream_tiling_target(tiled, 256 * 1024)
    assert plan.stream_events == stream_traffic(tiled, plan.order, frozenset(plan.streamed), target)
    assert plan_violations(tiled, plan) == []
    assert f"streamed_traffic={plan.streamed_traffic}" in str(plan) and "stream-load %x" in str(plan)
    report = format_report(plan)
    assert "streamed by tiles: 2 tensor(s)" in report and f"{plan.streamed_traffic} B" in report


def test_a_plan_that_streams_nothing_records_nothing():
    tiled, plan = streamed_program(matmul_graph(16, 16, 16), "1MiB")
    assert plan.streamed == () and plan.stream_events is None and plan.streamed_traffic == 0


def test_stream_events_round_trip_through_the_program_text_and_old_texts_still_parse():
    graph = chain_graph()
    program = run_pipeline(graph, TILE + ",memplan{capacity=64KiB,weights=true,stream=true,solver=heuristic}")
    plan = program.memory_plan
    assert plan.streamed and plan.stream_events
    text = print_program(program)
    assert "stream_events" in text and "streamed_traffic" in text
    parsed = parse_program(text)
    assert parsed.memory_plan == plan and print_program(parsed) == text
    # a text from before stream events: the fields absent, the plan's streams not recorded
    unrecorded = dataclasses.replace(plan, stream_events=None, streamed_traffic=0, streamed_compulsory=0)
    old = print_program(dataclasses.replace(program, memory_plan=unrecorded))
    assert "stream_events" not in old and "streamed_traffic" not in old
    before = parse_program(old).memory_plan
    assert before.stream_events is None and before.streamed == plan.streamed and before.streamed_traffic == 0
    assert plan_violations(program, before) == []  # not recorded: nothing to check of the streams


def _tampered(plan, **changes):
    return dataclasses.replace(plan, **changes)


def test_tampered_stream_records_are_rejected():
    tiled, plan = streamed_program(chain_graph())
    events = plan.stream_events
    loads = [e for e in events if e.kind == "load"]
    stores = [e for e in events if e.kind == "store"]
    assert loads and stores, "the chain's middle tensor is streamed: stored by one kernel, loaded by another"
    assert "x" in plan.streamed
    reads_w2 = next(k.name for k in tiled.kernels if "w2" in {v.name for v in k.inputs})  # not x
    cases = {
        "no stream events": _tampered(plan, stream_events=(), streamed_traffic=0, streamed_compulsory=0),
        "a reader's loads missing": _tampered(plan, stream_events=tuple(e for e in events if e != loads[0])),
        "the producer's store missing": _tampered(plan, stream_events=tuple(e for e in events if e != stores[0])),
        "wrong streamed total": _tampered(plan, streamed_traffic=plan.streamed_traffic + 4),
        "wrong compulsory total": _tampered(plan, streamed_compulsory=plan.streamed_compulsory + 4),
        "a load at a kernel that does not read it": _tampered(plan, stream_events=events + (
            TransferEvent(plan.order.index(reads_w2), "load", "x", 4, False),),
            streamed_traffic=plan.streamed_traffic + 4),
        "an event on a resident tensor": _tampered(plan, stream_events=events + (
            TransferEvent(0, "load", next(r.tensor for r in plan.residencies), 4, False),),
            streamed_traffic=plan.streamed_traffic + 4),
        "a shrunk load": _tampered(plan, stream_events=tuple(
            dataclasses.replace(e, bytes=1) if e == loads[0] else e for e in events),
            streamed_traffic=plan.streamed_traffic - (loads[0].bytes - 1) * (not loads[0].compulsory),
            streamed_compulsory=plan.streamed_compulsory - (loads[0].bytes - 1) * loads[0].compulsory),
    }
    assert plan_violations(tiled, plan) == []
    for what, bad in cases.items():
        assert plan_violations(tiled, bad), what


def test_only_the_first_read_of_an_input_is_compulsory():
    b = GraphBuilder("two_readers")
    x = b.input("x", (256, 256))
    w1, w2 = b.param("w1", (256, 16)), b.param("w2", (256, 16))
    graph = b.output(b.add(b.matmul(x, w1), b.matmul(x, w2)))
    tiled, plan = streamed_program(graph, "128KiB")
    assert "x" in plan.streamed
    steps = sorted({e.step for e in plan.stream_events if e.tensor == "x"})
    assert len(steps) == 2
    first_comp = next(e for e in plan.stream_events if e.tensor == "x" and e.compulsory)
    assert first_comp.step == steps[0]
    # the compulsory bytes moved to the second reader: totals unchanged, still wrong
    moved = tuple(dataclasses.replace(e, step=steps[1]) if e == first_comp else e for e in plan.stream_events)
    assert any("compulsory" in v for v in plan_violations(tiled, _tampered(plan, stream_events=moved)))
    # the first read not counted as compulsory at all
    uncounted = tuple(dataclasses.replace(e, compulsory=False) if e == first_comp else e for e in plan.stream_events)
    bad = _tampered(plan, stream_events=uncounted, streamed_traffic=plan.streamed_traffic + first_comp.bytes,
                    streamed_compulsory=plan.streamed_compulsory - first_comp.bytes)
    assert any("compulsory" in v for v in plan_violations(tiled, bad))


# ----- a plan exists at any capacity at or above the largest smallest tile working set ----------------
def test_below_the_smallest_tile_working_set_the_error_names_the_kernel_and_bytes():
    tiled = run_pipeline(matmul_graph(256, 256, 256), TILE)
    (kernel,) = tiled.kernels
    target = stream_tiling_target(tiled, 256)
    need = min_tile_working_set(kernel, target)
    assert 0 < need < 256 * 256 * 4
    with pytest.raises(InfeasibleCapacityError, match=rf"kernel {kernel.name}.*{need} B"):
        plan_program(tiled, MemplanOptions(capacity=str(need - 1), weights=True, stream=True, solver="heuristic"))
    plan = plan_program(tiled, MemplanOptions(capacity=str(need), weights=True, stream=True, solver="heuristic"))
    assert plan.streamed and plan.stream_events
    assert plan_violations(tiled, plan) == []


def _tiled(graph):
    try:
        return run_pipeline(graph, TILE)
    except TilingError:
        return None


@settings(max_examples=80, deadline=None)
@given(graphs(max_nodes=8, max_side=8), st.sampled_from([0.0, 0.0, 0.02, 0.1, 0.3, 1.0]), st.booleans())
def test_streamed_plans_check_and_exist_at_the_smallest_tile_capacity(graph, where, weights):
    """Contract: at any capacity from the largest smallest-tile working set up, stream=true plans;
    the plan passes the checker; every reader loads at least the bytes it reads of a streamed tensor,
    every producer stores at least its size; the totals are the events' sums."""
    tiled = _tiled(graph)
    assume(tiled is not None and tiled.kernels)
    floor = max(min_tile_working_set(k, stream_tiling_target(tiled, 1)) for k in tiled.kernels)
    whole = sum(v.type.nbytes for v in tiled.tensors())
    capacity = int(floor + where * max(0, whole - floor))
    plan = plan_program(tiled, MemplanOptions(capacity=str(capacity), weights=weights, stream=True,
                                              solver="heuristic"))
    assert plan_violations(tiled, plan) == []
    events = plan.stream_events or ()
    event("streams" if plan.streamed else "streams nothing")
    assert plan.streamed_traffic + plan.streamed_compulsory == sum(e.bytes for e in events)
    values = {v.name: v for v in tiled.tensors()}
    for name in plan.streamed:
        for step, kname in enumerate(plan.order):
            kernel = next(k for k in tiled.kernels if k.name == kname)
            if name in {v.name for v in kernel.inputs}:
                got = sum(e.bytes for e in events if e.tensor == name and e.step == step and e.kind == "load")
                assert got >= read_at_least(kernel).get(name, 0)
            if name in {v.name for v in kernel.outputs}:
                got = sum(e.bytes for e in events if e.tensor == name and e.step == step and e.kind == "store")
                assert got >= values[name].type.nbytes
