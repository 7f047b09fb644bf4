"""The place pass on Programs: translation, the pass contract, reports, errors, determinism."""
import dataclasses

import pytest

from tilegraph.ir import GraphBuilder
from tilegraph.ir.placement import MemoryInfeasibleError, Placement, PlacementError, UnsupportedKernelError
from tilegraph.ir.program import Program
from tilegraph.ir.system import load_system
from tilegraph.passes.place import PlaceOptions, check_placement, format_report, place_program
from tilegraph.passes.place.problem import problem_from_program
from tilegraph.passes.registry import PassContext, get_pass


def mlp(layers: int = 3, width: int = 512, batch: int = 128) -> Program:
    b = GraphBuilder("mlp")
    h = b.input("x", f"f32[{batch}, {width}]")
    for i in range(layers):
        w = b.param(f"w{i}", f"f32[{width}, {width}]")
        h = b.relu(b.matmul(h, w))
        if i % 2:
            h = b.softmax(h)
    return Program.unfused(b.output(h))


def branchy() -> Program:
    """Two independent matmul branches joined by an add: room for two devices to work at once."""
    b = GraphBuilder("branchy")
    x = b.input("x", "f32[256, 1024]")
    outs = []
    for i in range(2):
        w = b.param(f"w{i}", "f32[1024, 1024]")
        outs.append(b.tanh(b.matmul(x, w)))
    return Program.unfused(b.output(b.add(*outs)))


def test_translation_kinds_and_tensors():
    prog = mlp()
    pb = problem_from_program(prog, load_system("cpu-gpu-npu"))
    assert pb.tasks == tuple(k.name for k in prog.kernels)
    npu = pb.devices.index("npu")
    for i, kinds in enumerate(pb.kinds):
        assert (pb.duration[i][npu] is None) == bool(kinds - {"contraction", "window", "elementwise"})
    params = {pb.tensors[k].name for k in pb.params}
    assert params == {"w0", "w1", "w2"}
    assert [t.name for t in pb.tensors if t.output] == [prog.graph.outputs[0].name]


@pytest.mark.parametrize("system", ["cpu-gpu-pcie", "cpu-gpu-npu", "4-core-npu"])
def test_place_program_is_valid(system):
    prog = branchy()
    placement = place_program(prog, system, time_limit=2)
    assert isinstance(placement, Placement)
    check_placement(prog, load_system(system), placement)
    assert placement.makespan >= placement.lower_bound > 0
    assert {k.kernel for k in placement.kernels} == {k.name for k in prog.kernels}
    text = str(placement)
    assert "makespan" in text and "lower bound" in text


def test_npu_never_gets_unsupported_kernels():
    prog = mlp(layers=4)
    placement = place_program(prog, "cpu-gpu-npu", time_limit=2)
    kinds = {k.name: {n.opdef.category for n in k.nodes} for k in prog.kernels}
    for kp in placement.kernels:
        if kp.device == "npu":
            assert kinds[kp.kernel] <= {"contraction", "window", "elementwise", "source"}


def test_report_names_method_bound_gap_and_devices():
    placement = place_program(branchy(), "cpu-gpu-npu", time_limit=2)
    report = format_report(placement)
    for word in ("makespan", "lower bound", "gap", "method", "HEFT", "cpu", "gpu", "npu"):
        assert word in report


def test_pass_registration_and_contract():
    spec = get_pass("place")
    assert spec.ensures == frozenset({"placed"})
    options = spec.make_options({"system": "cpu-gpu-pcie", "time_limit": "2", "deterministic": "true"})
    assert options.time_limit == 2.0 and options.deterministic is True
    ctx = PassContext()
    prog = branchy()
    out = spec.run(prog, options, ctx)
    assert "placed" in out.properties
    assert out.placement is not None and out.kernels == prog.kernels
    assert ctx.statistics["place"]["makespan_s"] > 0


def test_pass_uses_target_system_from_context():
    ctx = PassContext(target=load_system("4-core-npu"))
    out = get_pass("place").run(branchy(), PlaceOptions(time_limit=1), ctx)
    assert out.placement.system == "4-core-npu"


def test_bad_options():
    with pytest.raises(ValueError, match="unknown method"):
        PlaceOptions(method="magic")
    with pytest.raises(ValueError):
        get_pass("place").make_options({"colour": "red"})


def test_memory_infeasible_names_the_device():
    system = load_system("cpu-gpu-pcie").with_memory(cpu=2 ** 19)  # the 1 MiB input alone needs more
    with pytest.raises(MemoryInfeasibleError, match="cpu") as info:
        place_program(branchy(), system, time_limit=1)
    assert info.value.device == "cpu"


def test_kernel_too_big_for_every_device_names_it():
    system = load_system("cpu-gpu-pcie").with_memory(cpu=9 * 2 ** 20, gpu=2 ** 20)
    with pytest.raises(MemoryInfeasibleError, match="kernel") as info:
        place_program(branchy(), system, time_limit=1)
    assert info.value.device in ("cpu", "gpu")


def test_binding_gpu_memory_still_places():
    # each weight is 4 MiB: the GPU can hold one, not both, plus the activations
    system = load_system("cpu-gpu-pcie").with_memory(gpu=7 * 2 ** 20)
    prog = branchy()
    placement = place_program(prog, system, time_limit=2)
    check_placement(prog, system, placement)
    assert dict(placement.peak_memory)["gpu"] <= 7 * 2 ** 20


def test_unsupported_kernel_everywhere():
    system = load_system("cpu-gpu-npu")
    only_npu = dataclasses.replace(system, devices=(system.device("npu"),), links=(), home="npu")
    with pytest.raises(UnsupportedKernelError, match="softmax|composite|kinds"):
        place_program(mlp(layers=2), only_npu, time_limit=1)


def test_same_input_same_placement():
    prog = branchy()
    a = place_program(prog, "cpu-gpu-npu", time_limit=3)
    b = place_program(prog, "cpu-gpu-npu", time_limit=3)
    assert a.kernels == b.kernels and a.transfers == b.transfers and a.makespan == b.makespan


def test_empty_program_is_an_error():
    b = GraphBuilder("empty")
    x = b.input("x", "f32[4]")
    prog = Program.unfused(b.output(x))
    with pytest.raises(PlacementError):
        place_program(prog, "cpu-gpu-pcie")


def test_program_text_round_trip():
    from tilegraph.ir.program_text import parse_program, print_program

    prog = get_pass("place").run(branchy(), PlaceOptions(system="cpu-gpu-npu", time_limit=1), PassContext())
    text = print_program(prog)
    assert "placement {" in text and "not shown" not in text
    back = parse_program(text)
    timings = [k for k, _ in prog.placement.stats if k.startswith("seconds.")]
    assert timings and not any(k.startswith("seconds.") for k, _ in back.placement.stats)  # run-to-run noise is not printed
    assert back.placement == dataclasses.replace(prog.placement, stats=tuple(s for s in prog.placement.stats if s[0] not in timings))
    assert print_program(back) == text


def test_program_text_placement_errors_name_the_line():
    from tilegraph.ir.errors import ParseError
    from tilegraph.ir.program_text import parse_program, print_program

    prog = get_pass("place").run(branchy(), PlaceOptions(system="cpu-gpu-npu", time_limit=1), PassContext())
    text = print_program(prog).replace("lower_bound =", "lower_bnd =")
    with pytest.raises(ParseError, match="unknown placement field lower_bnd"):
        parse_program(text)
