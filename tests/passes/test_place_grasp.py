"""The randomized list-scheduling portfolio: valid schedules, seeded determinism, never worse than its samples."""
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from tilegraph.ir.placement import MemoryInfeasibleError
from tilegraph.ir.system import load_system
from tilegraph.passes.place.checker import check_schedule
from tilegraph.passes.place.grasp import randomized_portfolio
from tilegraph.passes.place.heuristics import heft
from tilegraph.passes.place.random_dags import random_problem, tiny_problem


@given(seed=st.integers(0, 10 ** 6), n=st.integers(1, 8), memory=st.sampled_from([None, 3.0, 1.0, 0.6]))
@settings(max_examples=30, deadline=None)
def test_samples_pass_the_checker(seed, n, memory):
    pb = tiny_problem(seed, n, 3, memory=memory)
    try:
        pb.check_memory_feasible()  # solve() rejects these before any heuristic runs
    except MemoryInfeasibleError:
        reject()
    sched = randomized_portfolio(pb, 12, seed=seed)
    if sched is not None:
        check_schedule(pb, sched)


def test_same_seed_same_schedule_and_more_samples_never_worse():
    pb = random_problem(120, load_system("cpu-gpu-npu"), seed=3)
    a = randomized_portfolio(pb, 30, seed=5)
    b = randomized_portfolio(pb, 30, seed=5)
    assert a == b
    check_schedule(pb, a)
    assert randomized_portfolio(pb, 60, seed=5).makespan <= a.makespan


def test_beats_heft_on_a_busy_graph():
    pb = random_problem(200, load_system("cpu-gpu-npu"), seed=1)
    assert randomized_portfolio(pb, 40, seed=0).makespan < heft(pb).makespan
