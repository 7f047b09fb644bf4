"""Local search over orders: a topological order, never worse than its start, reproducible, and
worth having (it beats the program order on a wide random DAG)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tilegraph.passes.memplan.api import Options, solve_problem
from tilegraph.passes.memplan.checker import check_plan
from tilegraph.passes.memplan.generators import random_dag
from tilegraph.passes.memplan.order_search import order_cost, search_order
from tilegraph.passes.memplan.orders import candidate_orders, program_order


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), kernels=st.integers(2, 25), weights=st.booleans(), extra=st.integers(0, 8),
       evaluations=st.integers(0, 300))
def test_search_returns_a_topological_order_no_worse_than_its_start(seed, kernels, weights, extra, evaluations):
    problem = random_dag(seed, kernels, weights=weights)
    capacity = problem.max_working_set()[0] + extra * 1024
    for start in candidate_orders(problem).values():
        found, cost = search_order(problem, capacity, start, evaluations, seed=seed)
        assert sorted(found) == list(range(problem.num_kernels))
        pos = {k: t for t, k in enumerate(found)}
        assert all(pos[p] < pos[k] for k in range(problem.num_kernels) for p in problem.preds[k])
        assert cost == order_cost(problem, found, capacity)
        assert cost <= order_cost(problem, start, capacity)


def test_search_is_reproducible_and_stops_at_the_target():
    problem = random_dag(1, 30)
    capacity = problem.max_working_set()[0]
    start = program_order(problem)
    assert search_order(problem, capacity, start, 500) == search_order(problem, capacity, start, 500)
    assert search_order(problem, capacity, start, 10_000, stop_at=10 ** 9)[0] == start


def test_search_beats_the_program_order_on_a_wide_random_dag():
    problem = random_dag(0, 30)
    capacity = problem.max_working_set()[0]
    start = program_order(problem)
    assert search_order(problem, capacity, start, 2000)[1] < 0.6 * order_cost(problem, start, capacity)


def test_plans_from_the_searched_order_pass_the_checker():
    problem = random_dag(2, 30, weights=True)
    capacity = problem.max_working_set()[0]
    plan = solve_problem(problem, capacity, time_limit=1.0, options=Options(order_search_share=0.5))
    check_plan(problem, plan)
    assert dict(plan.stats)["order_search"] <= min(order_cost(problem, o, capacity)
                                                  for o in candidate_orders(problem).values())
