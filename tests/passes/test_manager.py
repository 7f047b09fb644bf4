"""The pass manager and pipelines: parsing, the property contract, verify-each, dumps, reports, reproducers."""
from __future__ import annotations

import io
import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tilegraph.ir import GraphBuilder, TensorType, TilegraphError, VerifyError
from tilegraph.ir.program import Kernel, Program
from tilegraph.ir.program_text import parse_program, print_program
from tilegraph.passes import manager as manager_module
from tilegraph.passes import registry
from tilegraph.passes import (PassContext, PassError, PassManager, Pipeline, PipelineError, PipelineStep,
                              find_program_problems, get_pass, parse_pipeline, register_pass,
                              register_property_check, run_pipeline, step, verify_program)


# ----- passes made for these tests ---------------------------------------------------------------
@dataclass(frozen=True)
class KnobOptions:
    count: int = 1
    ratio: float = 0.5
    enabled: bool = False
    target: str = "accel-small"
    solver: str | None = None
    mode: Literal["fast", "exact"] = "fast"


_TEST_PASSES: list[tuple] = []


# what the test passes keep of their input unless they say otherwise (they change no decision)
KEEPS = frozenset({"canonical", "decomposed", "fused", "tiled", "memplanned", "placed", "t_marked"})


def _register(name, options=None, **contract):
    """Collect a pass for this module; the fixture below registers it only while these tests run."""
    contract.setdefault("preserves", KEEPS)

    def decorate(fn):
        _TEST_PASSES.append((name, options, contract, fn))
        return fn
    return decorate


@pytest.fixture(autouse=True, scope="module")
def test_passes():
    for name, options, contract, fn in _TEST_PASSES:
        register_pass(name, *([options] if options else []), **contract)(fn)
    yield
    for name, *_ in _TEST_PASSES:  # leave the registry as other test modules expect it
        registry._PASSES.pop(name, None)
    manager_module._PROPERTY_CHECKS.pop("t_single_kernel", None)


@_register("t_knobs", KnobOptions)
def knobs(program, options, ctx):
    ctx.stat("t_knobs", "count", options.count)
    return program


@_register("t_forgets", preserves=())
def forgets(program, options, ctx):
    """Declares that it preserves nothing."""
    return program


@_register("t_noop")
def noop(program, options, ctx):
    return program


@_register("t_mark", ensures={"t_marked"})
def mark(program, options, ctx):
    return program


@_register("t_needs_mark", requires={"t_marked"})
def needs_mark(program, options, ctx):
    return program


@_register("t_relu_to_exp")
def relu_to_exp(program, options, ctx):
    """Rewrites every relu into exp (a real change, on a clone)."""
    graph = program.graph.clone()
    for node in graph.nodes:
        if node.op == "relu":
            new = graph.create_node("exp", node.inputs, before=node).result
            graph.replace_all_uses(node.result, new)
            graph.erase_node(node)
    return Program.unfused(graph)


@_register("t_corrupt_uses")
def corrupt_uses(program, options, ctx):
    """Broken: points an operand elsewhere by editing the list directly, so the use lists lie."""
    graph = program.graph.clone()
    node = graph.nodes[-1]
    node.inputs = (graph.inputs[0],) * len(node.inputs)
    return Program.unfused(graph)


@_register("t_retype")
def retype(program, options, ctx):
    """Broken: changes a result type behind type inference's back."""
    graph = program.graph.clone()
    value = graph.nodes[0].result
    value.type = TensorType(value.shape + (1,), value.dtype)
    return Program.unfused(graph)


@_register("t_reverse_kernels")
def reverse_kernels(program, options, ctx):
    """Broken: runs the kernels backwards."""
    return program.with_kernels(reversed(program.kernels))


@_register("t_crash")
def crash(program, options, ctx):
    return 1 // 0


@_register("t_mutate")
def mutate(program, options, ctx):
    """Broken: edits its input in place."""
    program.graph.create_node("exp", [program.graph.inputs[0]])
    program.graph.dead_code_elimination()
    program.graph.set_outputs([program.graph.create_node("neg", [program.graph.outputs[0]]).result])
    return Program.unfused(program.graph)


@_register("t_user_error")
def user_error(program, options, ctx):
    raise TilegraphError("target too small for this model")


@_register("t_returns_graph")
def returns_graph(program, options, ctx):
    return program.graph


def mlp():
    b = GraphBuilder("mlp")
    x = b.input("x", "f32[4, 8]")
    w = b.param("w", "f32[8, 16]")
    return b.output(b.relu(b.add(b.matmul(x, w), 0.0)))


# ----- pipelines -------------------------------------------------------------------------------------
def test_pipeline_string_parses_to_the_python_api_objects():
    text = "canonicalize,t_knobs{count=3,ratio=2,enabled=true,target=accel-big,solver=cpsat,mode=exact},t_noop"
    built = Pipeline.of("canonicalize", step("t_knobs", count=3, ratio=2, enabled=True, target="accel-big",
                                             solver="cpsat", mode="exact"), ("t_noop", {}))
    parsed = parse_pipeline(text)
    assert parsed == built == Pipeline.parse(text)
    assert parsed.steps[1] == PipelineStep(get_pass("t_knobs"), KnobOptions(3, 2.0, True, "accel-big", "cpsat", "exact"))
    spec, options = parsed.steps[1]
    assert spec.name == "t_knobs" and isinstance(options.ratio, float)
    assert str(parsed) == "canonicalize,t_knobs{count=3,ratio=2.0,enabled=true,target=accel-big,solver=cpsat,mode=exact},t_noop"
    assert parse_pipeline(str(parsed)) == parsed


def test_pipeline_spellings():
    assert parse_pipeline("  canonicalize , t_knobs { count = 2 } ") == Pipeline.of(
        "canonicalize", step("t_knobs", count=2))
    assert parse_pipeline("t_knobs{}") == parse_pipeline("t_knobs") == Pipeline.of("t_knobs")
    assert parse_pipeline("") == Pipeline()
    assert parse_pipeline("t_knobs{solver=none}").steps[0].options.solver is None
    assert parse_pipeline('t_knobs{solver="none"}').steps[0].options.solver == "none"
    assert parse_pipeline("t_knobs{target='a b,{c}=d'}").steps[0].options.target == "a b,{c}=d"
    assert parse_pipeline(r't_knobs{target="say \"hi\""}').steps[0].options.target == 'say "hi"'
    assert parse_pipeline("t_knobs{enabled=false, count=-4, ratio=1e-3}").steps[0].options == KnobOptions(
        count=-4, ratio=1e-3)
    assert Pipeline.of("canonicalize").then("t_knobs", count=2) == parse_pipeline("canonicalize,t_knobs{count=2}")
    assert str(step("t_knobs", KnobOptions())) == "t_knobs"


@given(count=st.integers(-10**6, 10**6), ratio=st.floats(allow_nan=False), enabled=st.booleans(),
       target=st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
       solver=st.none() | st.text(max_size=6), mode=st.sampled_from(["fast", "exact"]))
def test_pipeline_strings_round_trip(count, ratio, enabled, target, solver, mode):
    pipeline = Pipeline.of("t_noop", step("t_knobs", count=count, ratio=ratio, enabled=enabled, target=target,
                                          solver=solver, mode=mode))
    assert parse_pipeline(str(pipeline)) == pipeline


@pytest.mark.parametrize("text, column, fragment", [
    ("canonicalize,fusee_x", 14, "unknown pass 'fusee_x'"),
    ("t_knobs{cont=1}", 9, "has no option 'cont'; did you mean count?"),
    ("t_knobs{count=1.5}", 15, "option count: expected an integer, got '1.5'"),
    ("t_knobs{ratio=fast}", 15, "expected a number"),
    ("t_knobs{enabled=maybe}", 17, "expected true or false"),
    ("t_knobs{mode=slow}", 14, "expected one of fast, exact"),
    ("t_knobs{count=1,count=2}", 17, "option count is given twice"),
    ("t_knobs{count 1}", 15, "expected '=' after option count"),
    ("t_knobs{count=1", 16, "expected ',' or '}' after option count"),
    ("t_knobs{target='abc}", 16, "unterminated string"),
    ("canonicalize,", 14, "expected a pass name"),
    ("canonicalize t_noop", 14, "expected ',' between passes"),
    ("t_knobs{count=}", 15, "expected an option value"),
])
def test_pipeline_errors_give_the_column(text, column, fragment):
    with pytest.raises(PipelineError) as info:
        parse_pipeline(text)
    message = str(info.value)
    assert message.startswith(f"<pipeline>:1:{column}: error:"), message
    assert fragment in message
    assert text in message and "^" in message  # the pipeline and a caret under the bad token


def test_python_api_checks_names_and_types():
    with pytest.raises(PipelineError, match="unknown pass"):
        step("no_such_pass")
    with pytest.raises(PipelineError, match="has no option 'cuont'"):
        step("t_knobs", cuont=1)
    with pytest.raises(PipelineError, match="option count: expected int"):
        step("t_knobs", count="3")
    with pytest.raises(PipelineError, match="option enabled: expected bool"):
        step("t_knobs", enabled=1)
    with pytest.raises(PipelineError, match="options must be a KnobOptions"):
        step("t_knobs", object())


# ----- running and the property contract ------------------------------------------------------------
def test_run_from_a_string_or_objects_gives_the_same_program():
    graph = mlp()
    a = PassManager("canonicalize,t_relu_to_exp").run(graph)
    b = run_pipeline(graph, Pipeline.of("canonicalize", "t_relu_to_exp"))
    assert print_program(a) == print_program(b)
    assert [n.op for n in a.graph.nodes] == ["matmul", "exp"]


def test_requires_and_ensures():
    graph = mlp()
    with pytest.raises(PipelineError) as info:
        PassManager("t_noop,t_needs_mark").run(graph)
    message = str(info.value)
    assert "pass t_needs_mark (step 2) requires t_marked" in message and "ensured by t_mark" in message
    program = PassManager("t_mark,t_needs_mark").run(graph)
    assert "t_marked" in program.properties
    # canonicalize re-derives the program, so what an earlier pass established must be established again
    with pytest.raises(PipelineError, match="requires t_marked"):
        PassManager("t_mark,canonicalize,t_needs_mark").run(graph)


def test_user_errors_inside_a_pass_pass_through_unchanged():
    with pytest.raises(TilegraphError, match="target too small") as info:
        PassManager("t_user_error").run(mlp())
    assert not isinstance(info.value, PassError)


def test_invalid_input_is_reported_before_any_pass():
    graph = mlp()
    program = Program(graph, ())
    with pytest.raises(VerifyError, match="input program is invalid"):
        PassManager("t_noop").run(program)
    assert PassManager("t_noop", verify_each=False).run(program) is not None


# ----- verify-each catches broken passes --------------------------------------------------------------
@pytest.mark.parametrize("name, fragment", [
    ("t_corrupt_uses", "does not list"),
    ("t_retype", "does not match inferred"),
    ("t_reverse_kernels", "before it is computed"),
    ("t_mutate", "changed its input program"),
    ("t_returns_graph", "returned Graph, not a Program"),
])
def test_verify_each_names_the_broken_pass(name, fragment, tmp_path):
    with pytest.raises(PassError) as info:
        PassManager(f"canonicalize,{name}", dump_dir=tmp_path).run(mlp())
    error = info.value
    assert error.pass_name == name
    assert str(error).startswith(f"pass {name} (step 2 of 2)")
    assert fragment in str(error)
    assert error.reproducer == tmp_path / f"reproducer_02_{name}"
    assert (error.reproducer / "pipeline.txt").read_text().strip() == name


def test_without_verify_each_broken_output_goes_through():
    program = PassManager("t_retype", verify_each=False).run(mlp())
    assert find_program_problems(program)


def test_crash_writes_a_reproducer_that_re_runs(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    graph = mlp()
    with pytest.raises(PassError) as info:
        PassManager("canonicalize,t_knobs{count=2},t_crash").run(graph)
    error = info.value
    message = str(error)
    assert error.pass_name == "t_crash" and "crashed: ZeroDivisionError" in message
    folder = error.reproducer
    assert folder.parent == tmp_path and folder.is_dir()
    assert f"reproducer written to {folder}" in message
    command = re.search(r"re-run with: (.*)", message).group(1)
    args = shlex.split(command)
    assert args[:2] == ["tilegraph", "compile"] and args[3] == "--pipeline"
    # the input is the IR just before the failing pass, and it parses back exactly
    text = Path(args[2]).read_text()
    assert parse_program(text).properties == {"canonical", "decomposed"}
    assert print_program(parse_program(text)) + "\n" == text
    assert parse_pipeline(args[4]) == Pipeline.of("t_crash")
    assert "ZeroDivisionError" in (folder / "error.txt").read_text()
    assert "t_knobs{count=2}" in (folder / "error.txt").read_text()
    with pytest.raises(PassError, match="crashed"):  # re-running the reproducer crashes the same way
        PassManager(args[4]).run(parse_program(text))
    assert isinstance(error.__cause__, ZeroDivisionError)


# ----- printing, dumps, timing, statistics ------------------------------------------------------------
def test_print_ir_after_selected_passes_and_all():
    out = io.StringIO()
    PassManager("canonicalize,t_relu_to_exp", print_ir_after={"t_relu_to_exp"}, stream=out).run(mlp())
    text = out.getvalue()
    assert text.startswith("# ----- IR after t_relu_to_exp (step 2) -----\nfunc @mlp")
    assert "IR after canonicalize" not in text and "= exp(" in text
    out = io.StringIO()
    PassManager("canonicalize,t_relu_to_exp", print_ir_after="all", stream=out).run(mlp())
    assert out.getvalue().count("# ----- IR after") == 2
    with pytest.raises(PipelineError, match="print_ir_after names fuse, not in the pipeline"):
        PassManager("canonicalize", print_ir_after={"fuse"})


def test_print_ir_goes_to_stderr_by_default(capsys):
    PassManager("t_noop", print_ir_after="all").run(mlp())
    assert "IR after t_noop" in capsys.readouterr().err


def test_dump_dir_writes_only_changed_ir(tmp_path):
    manager = PassManager("t_noop,canonicalize,canonicalize,t_relu_to_exp,t_noop", dump_dir=tmp_path)
    result = manager.run(mlp())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00_input.tgir", "02_canonicalize.tgir",
                                                          "04_t_relu_to_exp.tgir"]
    assert (tmp_path / "04_t_relu_to_exp.tgir").read_text() == print_program(result) + "\n"
    assert [r.changed for r in manager.records] == [False, True, False, True, False]


def test_timing_table_and_statistics(capsys):
    ctx = PassContext()
    manager = PassManager("canonicalize,t_knobs{count=7}", time_passes=True)
    manager.run(mlp(), ctx)
    table = manager.format_timing()
    assert capsys.readouterr().err == table + "\n"
    lines = table.splitlines()
    assert "time (ms)" in lines[0]
    assert re.match(r"\s*1\s+canonicalize\s+[0-9.]+\s+[0-9.]+%", lines[1])
    assert re.match(r"\s*2\s+t_knobs\s", lines[2])
    assert "total" in lines[-1]
    assert [r.name for r in manager.records] == ["canonicalize", "t_knobs"]
    assert ctx.statistics["t_knobs"] == {"count": 7, "nodes": 2, "kernels": 2}
    assert ctx.statistics["canonicalize"]["simplified"] == 1
    stats = manager.format_statistics()
    assert re.search(r"t_knobs\s+count\s+7", stats) and re.search(r"canonicalize\s+simplified\s+1", stats)


# ----- Program-level verification ---------------------------------------------------------------------
def chain():
    b = GraphBuilder("chain")
    return b.output(b.relu(b.exp(b.neg(b.input("x", "f32[4]")))))


def test_verify_program_checks_kernels():
    graph = chain()
    a, b, c = graph.nodes
    good = Program(graph, (Kernel("k0", (a, b)), Kernel("k1", (c,), (("d0", 4),))))
    verify_program(good)
    cases = {
        "is in no kernel": Program(graph, (Kernel("k0", (a, b)),)),
        "is in kernels k0 and k1": Program(graph, (Kernel("k0", (a, b)), Kernel("k1", (b, c)))),
        "before it is computed": Program(graph, (Kernel("k0", (b, a)), Kernel("k1", (c,)))),
        "name k0 is used twice": Program(graph, (Kernel("k0", (a, b)), Kernel("k0", (c,)))),
        "has no nodes": Program(graph, (Kernel("k0", (a, b, c)), Kernel("k1", ()))),
        "must be a positive integer": Program(graph, (Kernel("k0", (a, b, c), (("d0", 0),)),)),
        "has two tile sizes": Program(graph, (Kernel("k0", (a, b, c), (("d0", 2), ("d0", 4))),)),
    }
    for fragment, program in cases.items():
        with pytest.raises(VerifyError, match=re.escape(fragment)):
            verify_program(program)


def test_property_checks_are_registered_by_name():
    def check(program):
        if len(program.kernels) > 1:
            yield f"{len(program.kernels)} kernels, expected one"

    register_property_check("t_single_kernel", check)
    program = replace(Program.unfused(chain()), properties=frozenset({"t_single_kernel"}))
    assert find_program_problems(program) == ["property t_single_kernel: 3 kernels, expected one"]
    with pytest.raises(ValueError):
        register_property_check("t_single_kernel", check)


def test_properties_a_pass_does_not_preserve_are_dropped_with_their_decisions():
    program = PassManager("canonicalize,fuse,tile{target=accel-small},t_mark,t_forgets").run(mlp())
    assert program.properties == frozenset()
    assert program.target is None and not any(kernel.tiles for kernel in program.kernels)
    kept = PassManager("canonicalize,fuse,tile{target=accel-small},t_mark,t_noop").run(mlp())
    assert {"canonical", "fused", "tiled", "t_marked"} <= kept.properties and kept.target is not None
