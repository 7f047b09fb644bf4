"""The partition bound: never above the exact optimum over all orders, and stronger than the cover bound."""
from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tilegraph.passes.memplan.bounds import cover_bound
from tilegraph.passes.memplan.cpsat import SolverConfig
from tilegraph.passes.memplan.free_order import solve_free_order
from tilegraph.passes.memplan.generators import random_dag
from tilegraph.passes.memplan.partition import joint_partition_bound, parts_of, subproblem

from .test_memplan_exact import brute_force, tiny

CONFIG = SolverConfig(num_workers=1, seed=0, deterministic=True)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), kernels=st.integers(3, 5), weights=st.booleans(), extra=st.integers(0, 2),
       part_size=st.integers(1, 3))
def test_partition_bound_never_exceeds_brute_force(seed, kernels, weights, extra, part_size):
    problem = tiny(seed, kernels, weights and kernels <= 3)
    capacity = problem.max_working_set()[0] + extra
    expected = brute_force(problem, capacity, True)
    assert joint_partition_bound(problem, capacity, part_size=part_size, time_limit=5, config=CONFIG) <= expected


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), kernels=st.integers(5, 9), weights=st.booleans(), extra=st.integers(0, 3),
       part_size=st.integers(2, 4), shuffle=st.booleans())
def test_partition_bound_never_exceeds_capacity_only_optimum(seed, kernels, weights, extra, part_size, shuffle):
    """The relaxation only uses the capacity per step, so it is below the capacity-only optimum over all
    orders (itself below the true optimum), for parts cut from any topological order."""
    problem = tiny(seed, kernels, weights)
    capacity = problem.max_working_set()[0] + extra
    exact = solve_free_order(problem, capacity, time_limit=10, config=CONFIG)
    assume(exact.status == "optimal")
    order = exact.order if shuffle else None
    joint = joint_partition_bound(problem, capacity, part_size=part_size, time_limit=5, config=CONFIG, order=order)
    assert joint <= exact.objective


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), kernels=st.integers(3, 8), weights=st.booleans(), extra=st.integers(0, 3))
def test_one_part_is_the_free_order_model(seed, kernels, weights, extra):
    """With every kernel in one part nothing is external: the model is the free-order model (with the
    cover rows, which every plan meets), so both optima agree."""
    problem = tiny(seed, kernels, weights)
    capacity = problem.max_working_set()[0] + extra
    exact = solve_free_order(problem, capacity, time_limit=10, config=CONFIG)
    joint = joint_partition_bound(problem, capacity, part_size=kernels, time_limit=10, config=CONFIG)
    if exact.status == "optimal":
        assert joint == exact.objective


def test_subproblem_external_tensors_are_free_and_order_follows_the_graph():
    problem = random_dag(3, 30)
    parts = parts_of(range(30), 10)
    assert [len(p) for p in parts] == [10, 10, 10]
    sub, internal = subproblem(problem, parts[1])
    assert sub.num_kernels == 10
    for j, i in enumerate(internal):  # internal tensors first, as they were
        assert sub.sizes[j] == problem.sizes[i] and sub.kinds[j] is problem.kinds[i]
        assert all(10 <= u < 20 for u in problem.users[i])
    for j in range(len(internal), sub.num_tensors):  # externals: one use each, so no gap to pay
        assert len(sub.users[j]) == 1
    assert sub.working_sets == tuple(problem.working_sets[k] for k in parts[1])
    # precedence through kernels outside the part is kept
    from tilegraph.passes.memplan.bounds import _bitsets
    desc = _bitsets(problem)[1]
    sub_desc = _bitsets(sub)[1]
    for a in range(10):
        for b in range(10):
            assert bool(desc[10 + a] >> (10 + b) & 1) == bool(sub_desc[a] >> b & 1)


def test_partition_bound_beats_the_cover_bound():
    """Fixed instances where cutting into parts proves more than the forced-live cover."""
    problem = random_dag(0, 30)
    capacity = problem.max_working_set()[0]
    cover = cover_bound(problem, capacity, config=CONFIG)
    assert joint_partition_bound(problem, capacity, part_size=10, time_limit=10, config=CONFIG) > cover
    problem = random_dag(80, 80)
    capacity = 33024  # the benchmark's rand80 at step 0.25
    cover = cover_bound(problem, capacity, config=CONFIG)
    joint = joint_partition_bound(problem, capacity, part_size=20, time_limit=20, config=CONFIG)
    assert joint > cover  # 12288 against 6144 B


def test_plan_memory_uses_the_partition_bound_when_free_order_is_too_big():
    from tilegraph.passes.memplan import check_plan, solve_problem
    from tilegraph.passes.memplan.api import Options

    problem = random_dag(80, 80)
    capacity = 33024
    options = Options(free_order_limit=20, free_order_cells=0, config=CONFIG)  # as if 80 kernels were many
    plan = solve_problem(problem, capacity, time_limit=8, options=options)
    check_plan(problem, plan)
    stats = dict(plan.stats)
    assert "partition_bound" in stats
    assert stats["cover_bound"] <= plan.bounds.traffic <= plan.traffic
    assert plan.bounds.traffic >= min(plan.traffic, stats["partition_bound"])
