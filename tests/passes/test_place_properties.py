"""Properties of every placement method on random small problems (hypothesis)."""
from itertools import permutations, product

import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from tilegraph.ir.placement import MemoryInfeasibleError
from tilegraph.passes.place.bounds import fastest_path_bound, lower_bounds, path_bound
from tilegraph.passes.place.checker import check_schedule
from tilegraph.passes.place.cpsat import solve_cpsat
from tilegraph.passes.place.random_dags import tiny_problem
from tilegraph.passes.place.solve import METHODS, SolveOptions, solve

problems = st.builds(
    tiny_problem, seed=st.integers(0, 10 ** 6), n=st.integers(1, 8), m=st.integers(2, 3), bus=st.booleans(),
    memory=st.sampled_from([None, None, 3.0, 1.0, 0.6]), unsupported=st.sampled_from([0.0, 0.3, 0.6]))


@given(pb=problems, method=st.sampled_from(METHODS))
@settings(max_examples=60)
def test_every_method_passes_the_checker_and_respects_the_bound(pb, method):
    try:
        out = solve(pb, SolveOptions(time_limit=1.0, method=method))
    except MemoryInfeasibleError as e:
        assert e.device in pb.devices
        assert any(c < 10 ** 12 for c in pb.capacity), "only memory limits may make a problem infeasible"
        return
    sched = out.schedule
    check_schedule(pb, sched)
    assert sched.makespan >= out.lower_bound
    assert out.lower_bound >= max(path_bound(pb), fastest_path_bound(pb)) or out.optimal
    for i, p in enumerate(sched.device):
        assert pb.duration[i][p] is not None, "a device that cannot run a kernel got it"
    for name, value in out.makespans.items():
        if value is not None:
            assert sched.makespan <= value or name == "cpsat"


@given(pb=problems)
@settings(max_examples=25)
def test_auto_is_never_worse_than_any_heuristic(pb):
    try:
        out = solve(pb, SolveOptions(time_limit=1.0))
    except MemoryInfeasibleError:
        reject()
    heuristics = [v for k, v in out.makespans.items() if k in ("heft", "cpop", "metf", "mtopo", "lp") and v]
    assert all(out.schedule.makespan <= v for v in heuristics)


def brute_force(pb) -> int:
    """Optimal makespan without memory limits: every device assignment and parameter device, and
    every order of the tasks on each device and of the transfers on each channel, timed as early as
    the orders and dependences allow (an optimal schedule is one of these)."""
    m = pb.m
    best = None
    for assign in product(*pb.capable):
        for locs in product(range(m), repeat=len(pb.params)):
            where = dict(zip(pb.params, locs))
            origin = [assign[t.producer] if t.producer >= 0 else where.get(k, pb.home)
                      for k, t in enumerate(pb.tensors)]
            transfers = sorted({(k, assign[j]) for k, t in enumerate(pb.tensors) for j in t.consumers
                                if assign[j] != origin[k]})
            by_dev = [[i for i in range(pb.n) if assign[i] == p] for p in range(m)]
            by_chan = [[x for x in transfers if pb.route[origin[x[0]]][x[1]] == c] for c in range(len(pb.channels))]
            for orders in product(*[list(permutations(items)) for items in by_dev + by_chan]):
                value = _time(pb, assign, origin, transfers, orders)
                if value is not None and (best is None or value < best):
                    best = value
    return best


def _time(pb, assign, origin, transfers, orders):
    m = pb.m
    nodes = [("t", i) for i in range(pb.n)] + [("x",) + x for x in transfers]
    dur = {("t", i): pb.duration[i][assign[i]] for i in range(pb.n)}
    for k, q in transfers:
        dur[("x", k, q)] = pb.xfer[k][origin[k] * m + q]
    preds = {v: [] for v in nodes}
    for k, t in enumerate(pb.tensors):
        for j in t.consumers:
            if assign[j] == origin[k]:
                if t.producer >= 0:
                    preds[("t", j)].append(("t", t.producer))
            else:
                preds[("t", j)].append(("x", k, assign[j]))
                if t.producer >= 0:
                    preds[("x", k, assign[j])].append(("t", t.producer))
    for order in orders:
        seq = [("t", v) if isinstance(v, int) else ("x",) + v for v in order]
        for a, b in zip(seq, seq[1:]):
            preds[b].append(a)
    finish, state = {}, {}

    def visit(v):
        if state.get(v) == 1:
            return None
        if v in finish:
            return finish[v]
        state[v] = 1
        start = 0
        for u in preds[v]:
            f = visit(u)
            if f is None:
                return None
            start = max(start, f)
        state[v] = 2
        finish[v] = start + dur[v]
        return finish[v]

    span = 0
    for v in nodes:
        f = visit(v)
        if f is None:
            return None
        span = max(span, f) if v[0] == "t" else span
    return span


@given(seed=st.integers(0, 10 ** 6), n=st.integers(1, 4), bus=st.booleans())
@settings(max_examples=15)
def test_exact_answer_equals_brute_force_on_tiny_graphs(seed, n, bus):
    pb = tiny_problem(seed, n, 2, bus=bus, unsupported=0.3)
    res = solve_cpsat(pb, time_limit=10.0, workers=1)
    assert res.optimal
    check_schedule(pb, res.schedule)
    assert res.schedule.makespan == brute_force(pb)
    assert lower_bounds(pb).best <= res.schedule.makespan


@pytest.mark.parametrize("seed", range(4))
def test_lower_bound_never_exceeds_a_proven_optimum(seed):
    pb = tiny_problem(seed, 7, 3, unsupported=0.3)
    res = solve_cpsat(pb, time_limit=10.0, workers=1)
    assert res.optimal
    assert lower_bounds(pb).best <= res.schedule.makespan


@pytest.mark.parametrize("seed", range(6))
def test_memory_aware_lower_bound_never_exceeds_a_proven_optimum(seed):
    pb = tiny_problem(seed, 5, 3, memory=(1.0, 0.6)[seed % 2], unsupported=0.2)
    try:
        pb.check_memory_feasible()
    except MemoryInfeasibleError:
        return
    res = solve_cpsat(pb, time_limit=10.0, workers=1)
    if res.optimal:
        assert lower_bounds(pb).best <= res.schedule.makespan


def test_unsupported_kinds_are_never_assigned():
    pb = tiny_problem(7, 8, 3, unsupported=0.7)
    for method in METHODS:
        out = solve(pb, SolveOptions(time_limit=1.0, method=method))
        assert all(pb.duration[i][p] is not None for i, p in enumerate(out.schedule.device))


def test_memory_binding_gives_a_valid_schedule_or_names_a_device():
    for seed in range(6):
        pb = tiny_problem(seed, 8, 3, memory=0.5)
        try:
            out = solve(pb, SolveOptions(time_limit=1.0))
        except MemoryInfeasibleError as e:
            assert e.device in pb.devices and e.device in str(e)
            continue
        check_schedule(pb, out.schedule)
