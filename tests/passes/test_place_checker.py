"""The independent checker: accepts valid schedules and names every broken rule."""
from dataclasses import replace

import pytest

from tilegraph.passes.place.checker import ScheduleError, check_schedule, violations
from tilegraph.passes.place.problem import PlacementProblem, Tensor, make_schedule


def problem(capacity=(1000, 1000)) -> PlacementProblem:
    """a -> b, a -> c; device 1 cannot run c; one duplex channel pair; input x on home d0."""
    tensors = (Tensor("x", 10, -1, (0,)), Tensor("ta", 20, 0, (1, 2)), Tensor("tb", 5, 1, (), output=True),
               Tensor("tc", 5, 2, (), output=True), Tensor("w", 8, -1, (1,), movable=True))
    return PlacementProblem(
        "p", ("a", "b", "c"), ("d0", "d1"), ((4, 2), (3, 3), (5, None)), tensors, capacity, 0,
        ("d0>d1", "d1>d0"), ((-1, 0), (1, -1)), ((0, 1), (1, 0)), ((1.0, 10.0), (10.0, 1.0)))


def valid():
    pb = problem()
    # a on d1 (x must travel: 1 + 10/10 = 2 ticks), b on d1, c on d0 (ta travels back: 1 + 2 = 3)
    sched = make_schedule(pb, (1, 1, 0), (2, 4, 9), [(0, 0, 1, 0), (1, 1, 0, 4)], "test", {4: 1})
    return pb, sched


def test_valid_schedule_passes():
    pb, sched = valid()
    assert violations(pb, sched) == []
    check_schedule(pb, sched)
    assert sched.makespan == 14


def test_unsupported_device():
    pb, sched = valid()
    bad = replace(sched, device=(1, 1, 1))
    assert any("cannot run" in v for v in violations(pb, bad))


def test_overlap_on_device():
    pb, sched = valid()
    bad = make_schedule(pb, (1, 1, 0), (2, 3, 9), [(0, 0, 1, 0), (1, 1, 0, 4)], "t", {4: 1})
    assert any("overlap on d1" in v for v in violations(pb, bad))


def test_start_before_transfer_arrives():
    pb, sched = valid()
    bad = make_schedule(pb, (1, 1, 0), (1, 4, 9), [(0, 0, 1, 0), (1, 1, 0, 4)], "t", {4: 1})
    assert any("before x arrives" in v for v in violations(pb, bad))


def test_missing_transfer():
    pb, sched = valid()
    bad = make_schedule(pb, (1, 1, 0), (2, 4, 9), [(0, 0, 1, 0)], "t", {4: 1})
    assert any("never sent" in v for v in violations(pb, bad))


def test_transfer_before_ready_and_from_wrong_device():
    pb, sched = valid()
    early = make_schedule(pb, (1, 1, 0), (2, 4, 9), [(0, 0, 1, 0), (1, 1, 0, 3)], "t", {4: 1})
    assert any("before it is ready" in v for v in violations(pb, early))
    wrong = make_schedule(pb, (1, 1, 0), (2, 4, 9), [(0, 1, 0, 0), (1, 1, 0, 4)], "t", {4: 1})
    assert any("made on d0" in v for v in violations(pb, wrong))


def test_channel_overlap():
    pb = problem()
    # a and c on d0, b on d1: ta and the parameter w both travel d0 -> d1 at the same time
    sched = make_schedule(pb, (0, 1, 0), (0, 6, 4), [(1, 0, 1, 4), (4, 0, 1, 4)], "t", {4: 0})
    found = violations(pb, sched)
    assert any("overlap on channel d0>d1" in v for v in found)


def test_memory_over_capacity_names_device():
    pb = problem(capacity=(1000, 30))
    _, sched = valid()
    found = violations(pb, sched)
    assert any("device d1 holds" in v and "capacity of 30" in v for v in found)


def test_useless_transfer_and_missing_parameter():
    pb, sched = valid()
    extra = make_schedule(pb, (1, 1, 0), (2, 4, 9), [(0, 0, 1, 0), (1, 1, 0, 4), (3, 0, 1, 14)], "t", {4: 1})
    assert any("no kernel reads it" in v for v in violations(pb, extra))
    no_param = replace(sched, param_device=())
    assert any("parameter w has no device" in v for v in violations(pb, no_param))


def test_wrong_makespan_and_duration():
    pb, sched = valid()
    assert any("makespan says" in v for v in violations(pb, replace(sched, makespan=99)))
    assert any("lasts" in v for v in violations(pb, replace(sched, finish=(5, 7, 14))))


def test_check_schedule_raises_with_method_name():
    pb, sched = valid()
    with pytest.raises(ScheduleError, match="from test"):
        check_schedule(pb, replace(sched, device=(1, 1, 1)))
