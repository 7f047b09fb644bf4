"""Properties of every memplan path on random DAGs: valid plans, warm start kept, capacity monotone."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tilegraph.passes.memplan import check_plan, peak_live, plan_from_solution, solve_problem
from tilegraph.passes.memplan.api import Options
from tilegraph.passes.memplan.cpsat import SolverConfig, solve_fixed
from tilegraph.passes.memplan.free_order import solve_free_order
from tilegraph.passes.memplan.generators import random_dag
from tilegraph.passes.memplan.heuristics import heuristic_plans
from tilegraph.passes.memplan.orders import candidate_orders, program_order
from tilegraph.passes.memplan.solution import traffic
from tilegraph.passes.memplan.windowed import improve_windowed

CFG = SolverConfig(num_workers=1, seed=0, deterministic=True)
FAST = Options(config=CFG, window=6, window_time=0.3, full_model_limit=10)


@st.composite
def instances(draw, min_kernels=4, max_kernels=14):
    seed = draw(st.integers(0, 100_000))
    kernels = draw(st.integers(min_kernels, max_kernels))
    weights = draw(st.booleans())
    problem = random_dag(seed, kernels, inputs=draw(st.integers(1, 3)), max_fan_in=3, locality=5,
                         weights=weights, size_choices=(1, 2, 3, 4), unit=draw(st.sampled_from([1, 64])))
    ws, _ = problem.max_working_set()
    peak = peak_live(problem, program_order(problem))
    frac = draw(st.sampled_from([0.0, 0.1, 0.3, 0.6]))
    return problem, int(ws + frac * max(0, peak - ws))


@settings(max_examples=30)
@given(instances())
def test_every_heuristic_plan_is_valid(instance):
    problem, capacity = instance
    for h in heuristic_plans(problem, capacity, candidate_orders(problem)):
        plan = plan_from_solution(problem, h.solution, capacity, solver=h.name)
        check_plan(problem, plan)
        assert plan.traffic == h.traffic


@settings(max_examples=20)
@given(instances())
def test_every_model_path_is_valid(instance):
    problem, capacity = instance
    order = program_order(problem)
    incumbent = heuristic_plans(problem, capacity, {"program": order})[0]
    cap_only = solve_fixed(problem, order, capacity, addresses=False, time_limit=1, config=CFG)
    assert cap_only.keep is not None
    assert cap_only.bound <= incumbent.traffic  # a lower bound for this order
    placed = solve_fixed(problem, order, capacity, fixed_keep=cap_only.keep, time_limit=1, config=CFG)
    if placed.solution is not None:
        check_plan(problem, plan_from_solution(problem, placed.solution, capacity))
        assert traffic(problem, placed.solution.keep) == cap_only.objective
    joint = solve_fixed(problem, order, capacity, incumbent=incumbent.solution, lower_bound=cap_only.bound,
                        time_limit=1, config=CFG)
    assert joint.solution is not None
    check_plan(problem, plan_from_solution(problem, joint.solution, capacity))
    assert joint.objective == traffic(problem, joint.solution.keep) <= incumbent.traffic
    assert joint.objective >= cap_only.bound
    window = solve_fixed(problem, order, capacity, incumbent=incumbent.solution, window=(1, 4), time_limit=1,
                         config=CFG)
    assert window.solution is not None
    check_plan(problem, plan_from_solution(problem, window.solution, capacity))
    assert traffic(problem, window.solution.keep) <= incumbent.traffic
    import time

    sol, cost, _ = improve_windowed(problem, incumbent.solution, capacity, deadline=time.perf_counter() + 1.5,
                                    window=5, window_time=0.2, config=CFG)
    check_plan(problem, plan_from_solution(problem, sol, capacity))
    assert cost == traffic(problem, sol.keep) <= incumbent.traffic


@settings(max_examples=15)
@given(instances(max_kernels=9))
def test_free_order_model_is_valid_and_bounds_the_plan(instance):
    problem, capacity = instance
    best = heuristic_plans(problem, capacity, candidate_orders(problem))[0]
    result = solve_free_order(problem, capacity, hint=best.solution, time_limit=1, config=CFG)
    assert result.bound <= best.traffic
    if result.order is not None:
        assert problem.is_topological(result.order)
        assert traffic(problem, result.keep) <= result.objective
        placed = solve_fixed(problem, result.order, capacity, fixed_keep=result.keep, time_limit=1, config=CFG)
        if placed.solution is not None:
            check_plan(problem, plan_from_solution(problem, placed.solution, capacity))


@settings(max_examples=20)
@given(instances(max_kernels=24), st.sampled_from(["free", "fixed"]))
def test_plan_is_valid_and_never_worse_than_its_warm_start(instance, order):
    problem, capacity = instance
    orders = candidate_orders(problem) if order == "free" else {"program": program_order(problem)}
    warm = heuristic_plans(problem, capacity, orders)[0].traffic
    plan = solve_problem(problem, capacity, order=order, time_limit=1.5, options=FAST)
    check_plan(problem, plan)
    assert plan.traffic <= warm
    assert plan.bounds.traffic <= plan.traffic
    assert plan.traffic <= plan.baseline_traffic
    if order == "fixed":
        assert plan.order == problem.kernel_names


@settings(max_examples=15)
@given(instances(max_kernels=24), st.sampled_from(["free", "fixed"]))
def test_no_traffic_with_room_to_spare(instance, order):
    problem, _ = instance
    capacity = 2 * max(peak_live(problem, program_order(problem)), problem.max_working_set()[0])
    plan = solve_problem(problem, capacity, order=order, time_limit=1.5, options=FAST)
    check_plan(problem, plan)
    assert plan.traffic == 0
    assert plan.status == "optimal"


@settings(max_examples=12)
@given(instances(max_kernels=12))
def test_fixed_order_traffic_never_increases_with_capacity(instance):
    problem, _ = instance
    ws, _ = problem.max_working_set()
    peak = peak_live(problem, program_order(problem))
    previous = None
    for step in range(5):
        capacity = ws + step * max(1, (peak - ws) // 4)
        plan = solve_problem(problem, capacity, order="fixed", time_limit=2, options=FAST)
        check_plan(problem, plan)
        if plan.status == "optimal":
            if previous is not None:
                assert plan.traffic <= previous
            previous = plan.traffic


@settings(max_examples=15)
@given(instances(max_kernels=16), st.integers(1, 4))
def test_banded_search_stays_in_its_band_and_plans_are_valid(instance, width):
    problem, capacity = instance
    best = heuristic_plans(problem, capacity, candidate_orders(problem))[0]
    result = solve_free_order(problem, capacity, hint=best.solution, lower_bound=0, time_limit=1, config=CFG,
                              band=(best.solution.order, width))
    assert result.bound == 0  # a neighbourhood gives no bound over all orders
    if result.order is not None:
        assert problem.is_topological(result.order)
        where = {k: t for t, k in enumerate(best.solution.order)}
        assert all(abs(where[k] - t) <= width for t, k in enumerate(result.order))
    banded = Options(config=CFG, free_order_limit=0, band_limit=100, band=width, window=6, window_time=0.3,
                     full_model_limit=10)
    plan = solve_problem(problem, capacity, order="free", time_limit=1.5, options=banded)
    check_plan(problem, plan)
    assert plan.traffic <= best.traffic
    assert plan.bounds.traffic <= plan.traffic


@settings(max_examples=10)
@given(instances(max_kernels=16))
def test_free_order_chosen_by_model_size_gives_valid_plans(instance):
    from tilegraph.passes.memplan.free_order import model_cells

    problem, capacity = instance
    assert model_cells(problem) >= sum(1 for users in problem.users if users)
    by_size = Options(config=CFG, free_order_limit=0, free_order_cells=10**9, window=6, window_time=0.3,
                      full_model_limit=10)
    plan = solve_problem(problem, capacity, order="free", time_limit=1.5, options=by_size)
    check_plan(problem, plan)
    assert plan.bounds.traffic <= plan.traffic <= plan.baseline_traffic
