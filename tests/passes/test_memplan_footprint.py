"""Minimum footprint (`memplan --min-footprint`): a spill-free plan the checker accepts, never larger
than the framework order's greedy arena, never below what any order needs."""
from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from tilegraph.passes.memplan import check_plan
from tilegraph.passes.memplan.footprint import greedy_by_size, min_footprint
from tilegraph.passes.memplan.generators import random_dag
from tilegraph.passes.memplan.problem import MemoryProblem, TensorKind, peak_live


def topological_orders(problem: MemoryProblem):
    for order in itertools.permutations(range(problem.num_kernels)):
        if problem.is_topological(order):
            yield order


@settings(max_examples=25)
@given(seed=st.integers(0, 10_000), kernels=st.integers(1, 7), weights=st.booleans())
def test_the_smallest_arena_is_valid_spill_free_and_between_its_bounds(seed, kernels, weights):
    problem = random_dag(seed, kernels, weights=weights)
    found = min_footprint(problem, time_limit=2.0)
    check_plan(problem, found.plan)
    assert found.plan.traffic == 0 and found.plan.capacity == found.arena
    assert found.arena <= found.framework_greedy
    orders = list(topological_orders(problem))
    # no placement beats the peak live bytes of its order, so none beats the least peak of all orders
    assert found.bound <= found.arena and min(peak_live(problem, o) for o in orders) <= found.arena
    if found.plan.status == "optimal":
        assert found.arena <= min(greedy_by_size(problem, o)[0] for o in orders)


def test_the_order_is_chosen_with_the_addresses():
    # two chains from one input; the framework runs both heads first, so both big tensors live at once
    names = ("x", "a1", "b1", "a2", "b2")
    sizes = (1024, 8192, 8192, 1024, 1024)
    kinds = (TensorKind.INPUT,) + (TensorKind.INTERMEDIATE,) * 4
    problem = MemoryProblem(names, sizes, kinds, (False, False, False, True, True), ("ka1", "kb1", "ka2", "kb2"),
                            ((0,), (0,), (1,), (2,)), ((1,), (2,), (3,), (4,)))
    found = min_footprint(problem, time_limit=2.0)
    check_plan(problem, found.plan)
    assert found.framework_peak == 1024 + 8192 + 8192
    assert found.arena == 1024 + 8192 + 1024 and found.plan.status == "optimal"
    assert found.plan.order in (("ka1", "ka2", "kb1", "kb2"), ("kb1", "kb2", "ka1", "ka2"))
