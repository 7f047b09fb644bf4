"""The C++ backend executes the memory plan: kernels in its order, tensors at its offsets, its
spills and reloads as copies to a far pool, streamed tensors in that pool. A debug build logs what
the library did (`plan_trace`); the log must match the plan and, replayed as a plan of its own,
pass the independent checker."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from native_checks import FAST_FLAGS, assert_close

import tilegraph
from tilegraph.backends import reference
from tilegraph.backends.cpp.build import find_compiler
from tilegraph.driver import compile_program
from tilegraph.frontends.dsl import parse, parse_file
from tilegraph.ir import GraphBuilder, TilegraphError
from tilegraph.ir.units import parse_bytes
from tilegraph.ir.memory_plan import MemoryPlan, PlanBounds, Residency, TransferEvent
from tilegraph.passes.memplan import check_plan
from tilegraph.passes.memplan.problem import from_program, peak_live, without_tensors

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Three feature maps (a, b, c: 8 KiB each) wait across a chain of convolutions: below 40 KiB some
# must leave the scratchpad while the chain runs, though every kernel alone needs at most 24 KiB.
SKIPS = """
def skips(x: f32[1, 8, 16, 16]) -> f32[1, 8, 16, 16] {
    param w1: f32[8, 8, 3, 3]
    param w2: f32[8, 8, 3, 3]
    param w3: f32[8, 8, 3, 3]
    param w4: f32[8, 8, 3, 3]
    param w5: f32[8, 8, 3, 3]
    param w6: f32[8, 8, 3, 3]
    param w7: f32[8, 8, 3, 3]
    a = relu(conv2d(x, w1, stride=1, padding=1))
    b = relu(conv2d(a, w2, stride=1, padding=1))
    c = relu(conv2d(b, w3, stride=1, padding=1))
    d = relu(conv2d(c, w4, stride=1, padding=1))
    f = relu(conv2d(d, w5, stride=1, padding=1)) + a
    g = relu(conv2d(f, w6, stride=1, padding=1)) + b
    return relu(conv2d(g, w7, stride=1, padding=1)) + c
}
"""

try:
    find_compiler(None)
    HAVE_CXX = True
except Exception:  # noqa: BLE001  (no compiler: the build tests skip)
    HAVE_CXX = False
pytestmark = pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler")


def limited(graph, limit, inputs=None):
    """The debug build of `graph` within `limit`, called once (on `inputs` or random ones) so that
    its trace holds a call; returns it and its outputs."""
    fn = tilegraph.compile(graph, target="cpp", memory_limit=limit, trace=True, cxxflags=FAST_FLAGS)
    return fn, fn(*(reference.random_inputs(graph) if inputs is None else inputs))


def plan_steps(fn) -> list[int]:
    """The plan step of each kernel the library runs (kernels folded at load time are not run)."""
    step = {name: t for t, name in enumerate(fn.program.memory_plan.order)}
    return [step[k.name] for k in fn.generated.order]


def assert_trace_follows_plan(fn) -> MemoryPlan:
    """Every kernel found its arena tensors at the plan's offsets, streamed ones in the far pool, and
    the copies the library made, replayed as a plan over the arena tensors, pass the checker with the
    plan's own traffic for them. Returns that replayed plan."""
    plan, arena = fn.program.memory_plan, fn.generated.arena
    steps = plan_steps(fn)
    stays: dict[str, list[list[int]]] = {}  # tensor -> [start, end, offset] residencies from the log
    events = []
    for record in fn.plan_trace():
        name, step = record.value.name, steps[record.position]
        if record.value in arena.streamed:
            assert record.offset == arena.far_base + arena.far[record.value], record
            continue
        if record.kind == "use":
            (stay,) = [r for r in plan.residencies_of(name) if r.start <= step <= r.end]
            assert record.offset == stay.offset, (record, stay)
        runs = stays.setdefault(name, [])
        if record.kind == "reload" or not runs:
            runs.append([step, step, record.offset])
            if record.kind == "reload":
                events.append(("load", step, name))
        runs[-1][1] = step
        if record.kind == "spill":
            events.append(("store", step, name))
    kept = set(stays)
    problem = from_program(fn.program, weights=plan.weights, align=plan.align)
    problem = without_tensors(problem, {i for i, n in enumerate(problem.tensor_names) if n not in kept})
    size = dict(zip(problem.tensor_names, problem.sizes))
    transfers = tuple(TransferEvent(step, kind, name, size[name], False) for kind, step, name in events)
    traffic = sum(e.bytes for e in transfers)
    replay = MemoryPlan(plan.capacity, plan.order,
                        tuple(Residency(n, a, b, o, size[n]) for n, runs in stays.items() for a, b, o in runs),
                        transfers, traffic, 0, PlanBounds(0, "", 0, 0, "trace"), "trace", "feasible", 0.0, traffic)
    check_plan(problem, replay)
    planned = sum(e.bytes for e in plan.events if e.tensor in kept and not e.compulsory)
    assert traffic == planned
    return replay


@pytest.mark.parametrize("limit, spills", [("24KiB", 2), ("32KiB", 1), ("40KiB", 0)])
def test_spills_run_as_copies_to_the_far_pool_and_match_the_reference(limit, spills):
    graph = parse(SKIPS)
    x = reference.random_inputs(graph)
    fn, got = limited(graph, limit, x)
    arena = fn.generated.arena
    assert arena.source.startswith("memory plan")
    replay = assert_trace_follows_plan(fn)
    assert sum(e.kind == "store" for e in replay.events) == spills  # the plan's spills, and the library's
    assert arena.size <= parse_bytes(limit) and (arena.far_size > 0) == (spills > 0)
    assert_close(got, tilegraph.compile(graph, "reference")(*x), [v.type for v in graph.outputs])
    assert ("far pool" in fn.report()) == (spills > 0)


def test_streamed_tensors_live_in_the_far_pool():
    graph = parse_file(str(EXAMPLES / "transformer_block.tg"))
    x = reference.random_inputs(graph)
    fn, got = limited(graph, "64KiB", x)
    assert fn.generated.arena.streamed and fn.program.memory_plan.streamed
    assert_trace_follows_plan(fn)
    assert_close(got, tilegraph.compile(graph, "reference")(*x), [v.type for v in graph.outputs])


def test_a_library_that_ignored_the_plan_would_fail_the_trace_check():
    fn, _ = limited(parse(SKIPS), "24KiB")
    plan = fn.program.memory_plan
    moved = tuple(dataclasses.replace(r, offset=r.offset + 64) if r.offset == 0 else r for r in plan.residencies)
    fn.program = dataclasses.replace(fn.program, memory_plan=dataclasses.replace(plan, residencies=moved))
    with pytest.raises(AssertionError):
        assert_trace_follows_plan(fn)


def test_the_memory_limit_is_checked_and_explained():
    graph = parse_file(str(EXAMPLES / "mlp.tg"))
    with pytest.raises(TilegraphError, match="memory_limit applies to target cpp"):
        tilegraph.compile(graph, target="reference", memory_limit="64KiB")
    with pytest.raises(TilegraphError, match="cannot read"):
        tilegraph.compile(graph, target="cpp", memory_limit="lots")
    with pytest.raises(TilegraphError, match="kernel .* needs even with every tensor streamed"):
        tilegraph.compile(graph, target="cpp", memory_limit=64)


def test_a_plan_the_backend_cannot_keep_is_refused_with_the_reason():
    b = GraphBuilder("wide")
    x, w = b.input("x", "bf16[64, 64]"), b.param("w", "bf16[64, 64]")
    graph = b.output(b.relu(b.matmul(b.relu(b.matmul(x, w)), w)))
    with pytest.raises(TilegraphError, match=r"gives %\S+ 8192 B; this backend stores it in 16384 B \(bf16"):
        tilegraph.compile(graph, target="cpp", memory_limit="64KiB")


def test_the_library_allocates_nothing_on_the_call_path():
    graph = parse_file(str(EXAMPLES / "lenet.tg"))
    fn, _ = limited(graph, "64KiB")
    for call in ("malloc", "aligned_alloc", "new ", "free("):
        assert call not in fn.source
    assert fn.generated.scratch > 0 and "tg_scratch + " in fn.source


@st.composite
def skip_dags(draw):
    """Random DAGs of matrix products (which never fuse with each other, so each is a kernel) whose
    operands are sums of earlier results: long-lived tensors that compete for the scratchpad."""
    rows, cols = draw(st.sampled_from([(8, 16), (16, 16), (4, 32)]))
    b = GraphBuilder("dag")
    states = [b.input("x", [rows, cols])]
    for n in range(draw(st.integers(3, 8))):
        picks = draw(st.lists(st.integers(0, len(states) - 1), min_size=1, max_size=2, unique=True))
        operand = states[picks[0]] if len(picks) == 1 else b.add(states[picks[0]], states[picks[1]])
        states.append(b.relu(b.matmul(operand, b.param(f"w{n}", [cols, cols]))))
    return b.output(*states[-draw(st.integers(1, 2)):])


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(skip_dags(), st.floats(-0.5, 1.0))
def test_random_graphs_run_their_plans_at_random_capacities(graph, fraction):
    """Capacities between the largest kernel's working set and the peak live bytes (spills), and
    below that working set (streamed tensors)."""
    program = compile_program(graph, None, "cpu")[0]
    problem = from_program(program, align=64)
    peak, (largest, _) = peak_live(problem, tuple(range(problem.num_kernels))), problem.max_working_set()
    capacity = largest + fraction * (peak - largest) if fraction >= 0 else largest * (1 + fraction)
    capacity = max(64, int(capacity) // 64 * 64)
    inputs = reference.random_inputs(graph)
    try:
        fn, got = limited(graph, capacity, inputs)
    except TilegraphError as error:  # below even the tile working set of some kernel: said so
        assert "needs even with every tensor streamed" in str(error)
        return
    assert_trace_follows_plan(fn)
    params = {v.name: a for v, a in reference.random_params(graph).items()}
    assert_close(got, reference.run(graph, inputs, params=params), [v.type for v in graph.outputs])
