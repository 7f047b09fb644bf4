"""plan_memory / memplan on real Programs: translation, the pass result, report, errors, determinism."""
from __future__ import annotations

import pytest

from tilegraph.ir import GraphBuilder
from tilegraph.ir.errors import TilegraphError
from tilegraph.ir.memory_plan import MemoryPlan
from tilegraph.ir.program import Program
from tilegraph.passes.memplan import (InfeasibleCapacityError, Options, SolverConfig, TensorKind, check_plan,
                                      format_report, from_program, memplan, parse_bytes, peak_live, plan_memory)


def branchy_graph():
    """A residual MLP with a side branch: real spills at tight capacities."""
    b = GraphBuilder("branchy")
    x = b.input("x", [32, 64])
    w1, w2, w3 = b.param("w1", [64, 64]), b.param("w2", [64, 64]), b.param("w3", [64, 64])
    h1 = b.relu(b.matmul(x, w1))
    h2 = b.relu(b.matmul(h1, w2))
    side = b.tanh(x)
    h3 = b.add(b.matmul(h2, w3), h1)
    return b.output(b.add(h3, side))


def test_from_program_tensors_and_weights():
    program = Program.unfused(branchy_graph())
    acts = from_program(program)
    assert acts.num_kernels == len(program.kernels)
    assert TensorKind.WEIGHT not in acts.kinds
    assert sum(acts.is_output) == 1
    both = from_program(program, weights=True)
    assert both.kinds.count(TensorKind.WEIGHT) == 3
    assert both.max_working_set()[0] > acts.max_working_set()[0]


@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("order", ["free", "fixed"])
def test_plan_memory_on_a_program(weights, order):
    program = Program.unfused(branchy_graph())
    problem = from_program(program, weights=weights)
    ws, _ = problem.max_working_set()
    plan = plan_memory(program, ws, order=order, weights=weights, time_limit=2)
    assert isinstance(plan, MemoryPlan)
    check_plan(problem, plan)
    assert plan.traffic <= plan.baseline_traffic
    assert plan.bounds.min_capacity == ws
    assert plan.bounds.traffic <= plan.traffic
    assert "memory_plan capacity=" in str(plan)
    if order == "fixed":
        assert plan.order == tuple(k.name for k in program.kernels)


def test_graph_is_taken_unfused():
    graph = branchy_graph()
    plan = plan_memory(graph, 1 << 20, time_limit=1)
    assert len(plan.order) == len(graph.nodes)
    assert plan.traffic == 0 and plan.status == "optimal"


def test_memplan_pass_attaches_the_plan_and_orders_kernels():
    program = Program.unfused(branchy_graph())
    problem = from_program(program)
    out = memplan(program, capacity=problem.max_working_set()[0], order="free", weights=False, time_limit=2)
    assert out.memory_plan is not None
    assert tuple(k.name for k in out.kernels) == out.memory_plan.order
    assert sorted(out.kernels, key=lambda k: k.name) == sorted(program.kernels, key=lambda k: k.name)
    assert out.graph is program.graph


def test_infeasible_capacity_names_the_kernel():
    program = Program.unfused(branchy_graph())
    problem = from_program(program)
    ws, k = problem.max_working_set()
    with pytest.raises(InfeasibleCapacityError) as info:
        plan_memory(program, ws - 1)
    assert isinstance(info.value, TilegraphError) and info.value.exit_code == 2
    assert problem.kernel_names[k] in str(info.value) and str(ws) in str(info.value)


def test_bad_options_are_clear_errors():
    program = Program.unfused(branchy_graph())
    with pytest.raises(TilegraphError, match="order"):
        plan_memory(program, 1 << 20, order="random")
    with pytest.raises(TilegraphError, match="solver"):
        plan_memory(program, 1 << 20, solver="gurobi")


def test_report_and_progress():
    program = Program.unfused(branchy_graph())
    problem = from_program(program, weights=True)
    seen = []
    plan = plan_memory(program, problem.max_working_set()[0], weights=True, time_limit=2, progress=seen.append)
    assert seen and seen[0].stage.startswith("heuristic")
    text = format_report(plan)
    for word in ("traffic", "lower bound", "gap", "solve time", "answered by", "baseline"):
        assert word in text
    assert all(str(p) for p in seen)


def test_heuristic_solver_only():
    program = Program.unfused(branchy_graph())
    problem = from_program(program)
    plan = plan_memory(program, problem.max_working_set()[0], solver="heuristic")
    check_plan(problem, plan)
    assert plan.solver.startswith("heuristic")


def test_deterministic_mode_repeats_the_plan():
    from tilegraph.passes.memplan import solve_problem
    from tilegraph.passes.memplan.generators import random_dag

    problem = random_dag(7, 30, weights=True)
    ws, _ = problem.max_working_set()
    cap = (ws + peak_live(problem, tuple(range(30)))) // 2
    options = Options(config=SolverConfig(num_workers=2, deterministic=True))
    first = solve_problem(problem, cap, time_limit=0.5, options=options)
    second = solve_problem(problem, cap, time_limit=0.5, options=options)
    assert (first.order, first.residencies, first.events) == (second.order, second.residencies, second.events)


@pytest.mark.parametrize("text,value", [("256KiB", 262144), ("1.5MiB", 1572864), ("4096", 4096), ("64kB", 64000),
                                        ("2 GiB", 2 << 30)])
def test_parse_bytes(text, value):
    assert parse_bytes(text) == value


def test_parse_bytes_rejects_junk():
    with pytest.raises(ValueError):
        parse_bytes("lots")
    with pytest.raises(ValueError):
        parse_bytes("-3KiB")


def test_plot_memory_map(tmp_path):
    pytest.importorskip("matplotlib")
    from tilegraph.passes.memplan import plot_memory_map

    program = Program.unfused(branchy_graph())
    plan = plan_memory(program, from_program(program).max_working_set()[0], time_limit=1)
    path = tmp_path / "map.png"
    plot_memory_map(plan, str(path))
    assert path.stat().st_size > 0


def test_an_orders_proven_capacity_optimum_is_solved_once(monkeypatch):
    """A second visit of an order (stage 4 revisits the best one) reuses the proven capacity-only
    optimum instead of solving its model again."""
    from tilegraph.passes.memplan import api
    from tilegraph.passes.memplan.generators import random_dag
    from tilegraph.passes.memplan.orders import program_order

    problem = random_dag(0, 12)
    capacity = problem.max_working_set()[0]
    capacity_only_solves = []
    real = api.solve_fixed

    def counting(*args, **kwargs):
        if kwargs.get("addresses") is False:
            capacity_only_solves.append(args[1])
        return real(*args, **kwargs)
    monkeypatch.setattr(api, "solve_fixed", counting)
    search = api._Search(problem, 20.0, None)
    order = program_order(problem)
    search.offer(api.heuristic_plans(problem, capacity, {"program": order})[0].solution, "heuristic")
    options = Options(config=SolverConfig(num_workers=1, deterministic=True))
    api._improve_order(search, capacity, order, options, free=True, share=0.5, joint=False)
    assert order in search.order_optima
    api._improve_order(search, capacity, order, options, free=True, share=0.5, joint=False)
    assert capacity_only_solves == [order]


def test_light_weights_are_bounded_through_the_problem_without_them():
    """Where weights cause little of the traffic, the problem without them is planned first: its bound
    holds for the weighted problem (a relaxation) and is reported."""
    import dataclasses

    from tilegraph.passes.memplan import solve_problem
    from tilegraph.passes.memplan.generators import random_dag

    heavy = random_dag(3, 24, weights=True)
    sizes = tuple(1 if kind is TensorKind.WEIGHT else size for kind, size in zip(heavy.kinds, heavy.sizes))
    problem = dataclasses.replace(heavy, sizes=sizes)
    ws, _ = problem.max_working_set()
    capacity = ws + (peak_live(problem, tuple(range(24))) - ws) // 10
    options = Options(config=SolverConfig(num_workers=1, deterministic=True))
    plan = solve_problem(problem, capacity, time_limit=4, options=options, weights=True)
    check_plan(problem, plan)
    stats = dict(plan.stats)
    assert plan.traffic > 0
    assert 0 < stats["weightless_bound"] <= plan.bounds.traffic <= plan.traffic
    never = solve_problem(problem, capacity, time_limit=4, options=dataclasses.replace(options, weightless_trigger=2.0),
                          weights=True)
    assert "weightless_bound" not in dict(never.stats)
