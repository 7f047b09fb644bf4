"""Program text: kernels, tiles and properties after the function; exact round trips and located errors."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import graphs

from tilegraph.ir import GraphBuilder, ParseError
from tilegraph.ir.program import Kernel, Program
from tilegraph.ir import program_text
from tilegraph.ir.program_text import (AnnotationSection, parse_program, parse_program_file, print_program,
                                       register_section)
from tilegraph.ir.text import print_graph


def small_program() -> Program:
    b = GraphBuilder("main")
    x = b.input("x", "f32[4, 8]")
    g = b.output(b.add(b.relu(b.exp(x)), 1.0))
    return Program.unfused(g)


def fused(program: Program) -> Program:
    n = program.graph.nodes
    kernels = (Kernel("k0", tuple(n[:2]), (("d0", 4), ("d1", 8))), Kernel("k1", tuple(n[2:])))
    return replace(program.with_kernels(kernels), properties=frozenset({"fused", "canonical"}))


EXPECTED = """\
func @main(%x: f32[4, 8]) -> f32[4, 8] {
  %0 = exp(%x) : f32[4, 8]
  %1 = relu(%0) : f32[4, 8]
  %2 = constant() {value = 1.0} : f32[]
  %3 = add(%1, %2) : f32[4, 8]
  return %3
}
kernels {
  k0 = [%0, %1] tiles {d0 = 4, d1 = 8}
  k1 = [%2, %3]
}
properties [canonical, fused]"""


def assert_round_trip(program: Program) -> Program:
    text = print_program(program)
    parsed = parse_program(text)
    assert print_program(parsed) == text
    assert [k.name for k in parsed.kernels] == [k.name for k in program.kernels]
    assert [[n.name for n in k.nodes] for k in parsed.kernels] == [[n.name for n in k.nodes] for k in program.kernels]
    assert [k.tiles for k in parsed.kernels] == [k.tiles for k in program.kernels]
    assert parsed.properties == program.properties
    return parsed


def test_documented_form():
    program = fused(small_program())
    assert print_program(program) == EXPECTED
    assert_round_trip(program)


def test_unfused_program_prints_as_a_plain_graph_and_a_graph_parses_to_unfused():
    program = small_program()
    assert print_program(program) == print_graph(program.graph)
    parsed = parse_program(print_graph(program.graph))
    assert [[n.name for n in k.nodes] for k in parsed.kernels] == [["0"], ["1"], ["2"], ["3"]]
    assert [k.name for k in parsed.kernels] == ["k0", "k1", "k2", "k3"]
    assert parsed.properties == frozenset()


def test_properties_without_kernels_and_odd_names_are_quoted():
    program = small_program()
    nodes = program.graph.nodes
    odd = replace(program.with_kernels([Kernel("first kernel", tuple(nodes[:1]), (("loop-1", 2),)),
                                        Kernel("k.2", tuple(nodes[1:]))]), properties=frozenset({"my prop"}))
    text = print_program(odd)
    assert '"first kernel" = [%0] tiles {"loop-1" = 2}' in text and 'properties ["my prop"]' in text
    assert_round_trip(odd)
    only_props = replace(program, properties=frozenset({"canonical"}))
    assert print_program(only_props).endswith("}\nproperties [canonical]")
    assert_round_trip(only_props)


def test_lenient_layout_and_comments_parse_to_the_canonical_text():
    text = EXPECTED.replace("kernels {\n", "# decisions\nkernels {  # fused\n").replace(
        "k1 = [%2, %3]", "k1=[%2,%3]   # epilogue").replace("properties [canonical, fused]",
                                                         "properties [fused,\n  canonical]\n")
    assert print_program(parse_program(text)) == EXPECTED


def test_a_brace_in_a_comment_does_not_end_the_function():
    b = GraphBuilder("main")
    x = b.input("x", "f32[2]")
    g = b.output(b.gelu(x, approximate="tanh"))
    text = print_graph(g).replace("  return", "  # } not the end {\n  return")
    assert "# }" in text
    assert print_program(parse_program(text)) == print_graph(g)


def test_parse_program_file_names_the_file(tmp_path):
    path = tmp_path / "p.tgir"
    path.write_text(EXPECTED.replace("k1 =", "k1 = oops"), encoding="utf-8")
    with pytest.raises(ParseError) as info:
        parse_program_file(path)
    assert str(info.value).startswith(f"{path}:10:8: error: unexpected 'oops'")


@pytest.mark.parametrize("old, new, line, column, fragment", [
    ("k1 = [%2, %3]", "k1 = [%2, %9]", 10, 13, "undefined value %9"),
    ("k1 = [%2, %3]", "k1 = [%2, %x]", 10, 13, "not the first result of a node"),
    ("k1 = [%2, %3]", "k1 = [%1, %2, %3]", 10, 9, "already in kernel k0"),
    ("k1 = [%2, %3]", "k0 = [%2, %3]", 10, 3, "kernel k0 is defined twice"),
    ("k1 = [%2, %3]", "k1 = [%2]", 11, 1, "%3 are in no kernel"),
    ("d1 = 8", "d1 = 0", 9, 37, "tile size must be positive"),
    ("d1 = 8", "d0 = 8", 9, 32, "loop d0 is given twice"),
    ("d1 = 8", "d1 = x", 9, 37, "expected an integer"),
    ("properties", "propertiez", 12, 1, "unknown annotation section 'propertiez'"),
    ("[canonical, fused]", "[canonical fused]", 12, 23, "expected ',' or ']'"),
    ("k1 = [%2, %3]\n}", "k1 = [%2, %3]\n", 12, 1, "expected '}' to close the kernels"),
    ("fused]", "fused] $", 12, 31, "unexpected character '$'"),
])
def test_errors_name_line_and_column(old, new, line, column, fragment):
    text = EXPECTED.replace(old, new)
    assert text != EXPECTED
    with pytest.raises(ParseError) as info:
        parse_program(text, "f.tgir")
    message = str(info.value)
    assert message.startswith(f"f.tgir:{line}:{column}: error:"), message
    assert fragment in message


def test_a_target_written_before_matrix_block_still_loads():
    """Programs saved before gpu-h100 gained `matrix_block` load with its default; other fields stay required."""
    from tilegraph.ir.target import load_target

    program = replace(fused(small_program()), target=load_target("gpu-h100"))
    text = print_program(program)
    older = "\n".join(line for line in text.splitlines() if "matrix_block" not in line)
    assert parse_program(older).target == replace(program.target, matrix_block=0)
    with pytest.raises(ParseError, match="lacks matrix_unit"):
        parse_program("\n".join(line for line in text.splitlines() if "matrix_unit" not in line))


def test_section_given_twice_and_graph_errors_keep_their_lines():
    with pytest.raises(ParseError, match="section properties is given twice"):
        parse_program(EXPECTED + "\nproperties []")
    with pytest.raises(ParseError) as info:
        parse_program(EXPECTED.replace("relu(%0)", "relu(%7)"), "f.tgir")
    assert str(info.value).startswith("f.tgir:3:13: error: undefined value %7")
    with pytest.raises(ParseError):
        parse_program("func @main(", "f.tgir")


def test_registered_sections_extend_the_format():
    """A later stage adds its own section; here one that carries a label in Program.notes."""
    def show(program):
        label = program.notes.get("test_label")
        return None if label is None else f"test_label {{ text = {label!r} }}".replace("'", '"')

    def read(reader, program):
        reader.expect("{")
        reader.expect("text")
        reader.expect("=")
        value = reader.value()
        reader.expect("}")
        return replace(program, notes={**program.notes, "test_label": value})

    register_section(AnnotationSection("test_label", show, read, order=95))
    try:
        check_label_section()
    finally:
        program_text._SECTIONS.pop("test_label")


def check_label_section():
    program = fused(small_program())
    labelled = replace(program, notes={"test_label": "hello"})
    text = print_program(labelled)
    assert text.endswith('properties [canonical, fused]\ntest_label { text = "hello" }')
    assert parse_program(text).notes["test_label"] == "hello"
    assert print_program(parse_program(text)) == text
    assert print_program(program) == EXPECTED  # silent when it has nothing to say


def test_every_decision_of_a_program_has_a_section():
    from dataclasses import fields

    from tilegraph.ir.program_text import sections

    covered = {s.field for s in sections()}
    decisions = {f.name for f in fields(Program)} - {"graph", "notes"}  # notes are report-only
    assert decisions <= covered, f"no .tgir section for {sorted(decisions - covered)}"


@st.composite
def programs(draw):
    """Random graphs cut into contiguous kernels (some tiled), with some properties."""
    graph = draw(graphs(max_nodes=8))
    nodes = graph.nodes
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(nodes) - 1)), max_size=len(nodes)))) if nodes else []
    bounds = [0] + [c for c in cuts if c < len(nodes)] + [len(nodes)]
    kernels = []
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        if lo < hi:
            loops = draw(st.lists(st.sampled_from(["d0", "d1", "d2", "i", "j"]), unique=True, max_size=3))
            tiles = tuple((loop, draw(st.integers(1, 512))) for loop in loops)
            kernels.append(Kernel(draw(st.sampled_from([f"k{i}", f"fused_{i}"])), tuple(nodes[lo:hi]), tiles))
    properties = draw(st.frozensets(st.sampled_from(["canonical", "decomposed", "fused", "tiled"])))
    return replace(Program(graph, tuple(kernels)), properties=properties)


@given(programs())
def test_random_programs_round_trip(program):
    assert_round_trip(program)
