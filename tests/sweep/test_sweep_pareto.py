"""Pareto fronts: a hand-made table, the across-models totals, and hypothesis properties of the front."""
from hypothesis import given
from hypothesis import strategies as st

from tilegraph.sweep.pareto import across_models, dominates, pareto_front


def test_front_of_a_hand_made_table():
    # (latency, energy, area)
    table = [(1, 9, 5),   # 0 fastest
             (2, 2, 5),   # 1
             (3, 3, 5),   # 2 dominated by 1
             (9, 1, 5),   # 3 least energy
             (5, 5, 1),   # 4 smallest
             (5, 5, 2),   # 5 dominated by 4
             (2, 2, 5),   # 6 equal to 1: neither dominates, both kept
             (9, 9, 9)]   # 7 dominated by everything but nothing dominates nothing
    assert pareto_front(table) == [0, 1, 3, 4, 6]
    assert pareto_front([]) == []
    assert pareto_front([(1.0, 2.0, 3.0)]) == [0]


def test_across_models_sums_latency_and_energy_and_skips_points_that_failed_anywhere():
    rows = [{"model": m, "point": p, "status": s, "latency_s": lat, "energy_pj": e, "area_mm2": a}
            for m, p, s, lat, e, a in [("a", 0, "ok", 1.0, 4.0, 2.0), ("b", 0, "ok", 1.0, 4.0, 2.0),
                                       ("a", 1, "ok", 3.0, 1.0, 2.0), ("b", 1, "ok", 3.0, 1.0, 2.0),
                                       ("a", 2, "ok", 0.1, 0.1, 0.1), ("b", 2, "error", None, None, None),
                                       ("a", 3, "ok", 4.0, 5.0, 2.0), ("b", 3, "ok", 4.0, 5.0, 2.0)]]
    totals = across_models(rows, ("latency_s", "energy_pj", "area_mm2"), ("latency_s", "energy_pj"))
    assert [(t["point"], t["latency_s"], t["energy_pj"], t["area_mm2"], t["pareto"]) for t in totals] == [
        (0, 2.0, 8.0, 2.0, True), (1, 6.0, 2.0, 2.0, True), (3, 8.0, 10.0, 2.0, False)]


points = st.lists(st.tuples(*[st.integers(0, 6)] * 3), max_size=40)


@given(points)
def test_no_returned_point_is_dominated_and_every_dropped_point_is(table):
    front = pareto_front(table)
    assert front == sorted(set(front))
    for i in front:
        assert not any(dominates(other, table[i]) for other in table)
    for i in set(range(len(table))) - set(front):
        assert any(dominates(table[j], table[i]) for j in front)


@given(st.lists(st.tuples(st.floats(0, 1e9, allow_nan=False), st.floats(0, 1e9, allow_nan=False)), max_size=30))
def test_front_of_two_objectives_is_a_staircase(table):
    front = sorted({table[i] for i in pareto_front(table)})
    assert all(a[1] > b[1] for a, b in zip(front, front[1:]))  # faster costs more energy along the front
