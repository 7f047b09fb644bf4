"""Streaming a tensor drops it from the scratchpad problem, not the dependence it carries."""
from __future__ import annotations

from tilegraph.ir.memory_plan import MemoryPlan, PlanBounds
from tilegraph.passes.memplan import find_violations, solve_problem
from tilegraph.passes.memplan.problem import MemoryProblem, TensorKind, without_tensors

I, T = TensorKind.INPUT, TensorKind.INTERMEDIATE


def chain() -> MemoryProblem:
    """k0 makes the big tensor 1 from input 0; k1 reads only tensor 1; k2 reads input 0."""
    return MemoryProblem(("x", "big", "y", "z"), (64, 4096, 64, 64), (I, T, T, T), (False, False, True, True),
                         ("k0", "k1", "k2"), ((0,), (1,), (0,)), ((1,), (2,), (3,)))


def test_dropped_tensors_keep_their_producer_before_their_readers():
    problem = without_tensors(chain(), {1})
    assert problem.preds[1] == (0,) and problem.is_topological((0, 1, 2))
    assert not problem.is_topological((1, 0, 2))
    plan = solve_problem(problem, 256, order="free", time_limit=2)
    assert plan.order.index("k0") < plan.order.index("k1")


def test_the_checker_rejects_an_order_that_reads_a_streamed_tensor_before_it_is_made():
    plan = MemoryPlan(256, ("k1", "k0", "k2"), (), (), 0, 0, PlanBounds(0, "", 0, 0, "-"), "given", "feasible",
                      0.0, 0, streamed=("big",))
    assert any("before streamed %big is produced" in v for v in find_violations(chain(), plan))
