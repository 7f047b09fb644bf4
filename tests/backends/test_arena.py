"""The arena shared by the cpp and triton backends: live tensors never share bytes, dead ones do."""
from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from strategies import graphs

from tilegraph.backends.arena import ALIGN, first_fit, lifetimes, natural_size, plan_arena, view_sources
from tilegraph.frontends.dsl import parse, parse_file
from tilegraph.ir.types import DType
from tilegraph.passes import PassManager

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def wide_bf16(value_type) -> int:
    """The cpp backend's storage: bf16 held in a 4-byte float."""
    return value_type.numel * (4 if value_type.dtype is DType.bf16 else value_type.dtype.itemsize)


def assert_live_tensors_apart(program, arena, size_of) -> None:
    life = lifetimes(program.kernels, list(arena.offsets), arena.views)
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
    """Also with reshapes made views: a view's source stays live until the view's last reader."""
    program = PassManager("canonicalize,fuse,tile{target=cpu}").run(graph)
    for size_of, views in ((natural_size, False), (wide_bf16, False), (natural_size, True)):
        arena = plan_arena(program, program.kernels, size_of=size_of, views=views)
        outputs = set(program.graph.outputs)
        assert arena.views == (view_sources(program, program.kernels) if views else {})
        assert set(arena.offsets) == {v for k in program.kernels for v in k.outputs if v not in outputs} - \
            set(arena.views)
        assert_live_tensors_apart(program, arena, size_of)


def test_a_reshape_made_a_view_keeps_its_source_live_until_its_readers():
    graph = parse("""def f(x: f32[16, 32], w: f32[32, 32]) -> f32[16, 32] {
        a = x @ w
        b = reshape(a, shape=[32, 16])
        return reshape(b * 2.0, shape=[16, 32]) @ w
    }""")
    program = PassManager("canonicalize,fuse,tile{target=cpu}").run(graph)
    views = view_sources(program, program.kernels)
    assert len(views) == 2 and ("b", "a") in {(v.name, s.name) for v, s in views.items()}
    (source,) = [s for v, s in views.items() if v.name == "b"]
    step = {node: t for t, k in enumerate(program.kernels) for node in k.nodes}
    last = max(step[u] for v, s in views.items() if s is source for u in v.users)
    assert lifetimes(program.kernels, [source])[source][1] < last
    assert lifetimes(program.kernels, [source], views)[source][1] == last


def test_offsets_come_from_a_memory_plan_that_keeps_tensors_in_place():
    pipeline = "canonicalize,fuse,tile{target=cpu},memplan{capacity=16MiB,time_limit=2}"
    program = PassManager(pipeline).run(parse_file(str(EXAMPLES / "lenet.tg")))
    arena = plan_arena(program, program.kernels)
    assert arena.source == "memory plan"
    for value, offset in arena.offsets.items():
        (stay,) = program.memory_plan.residencies_of(value.name)
        assert stay.offset == offset
    assert_live_tensors_apart(program, arena, natural_size)
