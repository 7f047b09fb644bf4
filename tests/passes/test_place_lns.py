"""Windowed LNS: every step's schedule passes the checker and is never worse than where it started."""
from hypothesis import assume, given, reject, settings
from hypothesis import strategies as st

from tilegraph.ir.placement import MemoryInfeasibleError
from tilegraph.passes.place.checker import check_schedule
from tilegraph.passes.place.heuristics import heft, mtopo
from tilegraph.passes.place.lns import windowed_lns
from tilegraph.passes.place.random_dags import tiny_problem


@given(seed=st.integers(0, 10 ** 6), n=st.integers(6, 14), memory=st.sampled_from([None, 1.0, 0.6]),
       window=st.integers(2, 5))
@settings(max_examples=15, deadline=None)
def test_windows_smaller_than_the_graph_keep_the_schedule_valid(seed, n, memory, window):
    # Tasks outside the window keep their device: their device literal is a constant in the model,
    # and the warm start has to hint around it (this crashed on memory-limited devices).
    pb = tiny_problem(seed, n, 3, memory=memory)
    try:
        pb.check_memory_feasible()
    except MemoryInfeasibleError:
        reject()
    start = heft(pb) or mtopo(pb)
    assume(start is not None)
    out = windowed_lns(pb, start, 1.0, window=window, step_limit=0.2, dtime_per_second=0.5)
    check_schedule(pb, out)
    assert out.makespan <= start.makespan
