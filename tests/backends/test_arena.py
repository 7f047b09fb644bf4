"""The arena shared by the cpp and triton backends: live tensors never share bytes, dead ones do."""
from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from strategies import graphs

from tilegraph.backends.arena import ALIGN, first_fit, lifetimes, natural_size, plan_arena
from tilegraph.frontends.dsl import parse_file
from tilegraph.ir.types import DType
from tilegraph.passes import PassManager

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def wide_bf16(value_type) -> int:
    """The cpp backend's storage: bf16 held in a 4-byte float."""
    return value_type.numel * (4 if value_type.dtype is DType.bf16 else value_type.dtype.itemsize)


def assert_live_tensors_apart(program, arena, size_of) -> None:
    life = lifetimes(program.kernels, list(arena.offsets))
    items = list(arena.offsets.items())
    for a, offset in items:
        assert offset % ALIGN == 0 and offset + size_of(a.type) <= arena.size
    for n, (a, oa) in enumerate(items):
        for b, ob in items[n + 1:]:
            if life[a][0] <= life[b][1] and life[b][0] <= life[a][1]:
                assert oa + size_of(a.type) <= ob or ob + size_of(b.type) <= oa, (a, b)


def test_lenet_reuses_bytes_of_dead_tensors():
    program = PassManager("canonicalize,fuse,tile{target=cpu}").run(parse_file(str(EXAMPLES / "lenet.tg")))
    arena = plan_arena(program, program.kernels)
    assert arena.source == "liveness"
    assert_live_tensors_apart(program, arena, natural_size)
    assert arena.size < sum(v.type.nbytes for v in arena.offsets)  # something was shared
    assert first_fit([], {}, natural_size) == {}


@given(graphs(max_nodes=8))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_live_tensors_never_share_bytes(graph):
    program = PassManager("canonicalize,fuse,tile{target=cpu}").run(graph)
    for size_of in (natural_size, wide_bf16):
        arena = plan_arena(program, program.kernels, size_of=size_of)
        outputs = set(program.graph.outputs)
        assert set(arena.offsets) == {v for k in program.kernels for v in k.outputs if v not in outputs}
        assert_live_tensors_apart(program, arena, size_of)


def test_offsets_come_from_a_memory_plan_that_keeps_tensors_in_place():
    pipeline = "canonicalize,fuse,tile{target=cpu},memplan{capacity=16MiB,time_limit=2}"
    program = PassManager(pipeline).run(parse_file(str(EXAMPLES / "lenet.tg")))
    arena = plan_arena(program, program.kernels)
    assert arena.source == "memory plan"
    for value, offset in arena.offsets.items():
        (stay,) = program.memory_plan.residencies_of(value.name)
        assert stay.offset == offset
    assert_live_tensors_apart(program, arena, natural_size)
