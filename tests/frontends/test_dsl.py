"""The DSL: examples parse, verify and run; mlp.tg is the graph one would build by hand; the
language features lower as documented; to_dsl round-trips (hand-built and hypothesis graphs)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tilegraph.backends.reference import random_inputs, run
from tilegraph.frontends.dsl import parse, parse_file, to_dsl
from tilegraph.ir import DType, GraphBuilder, ParseError, ShapeError, SourceLocation, TensorType, TilegraphError
from tilegraph.ir.verifier import verify

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_NAMES = ["mlp", "transformer_block", "resnet_block", "lenet"]


# ----- structural comparison ---------------------------------------------------------------------
def _attr(value):
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, (tuple, list)):
        return tuple(_attr(v) for v in value)
    return value


def structure(graph):
    """Everything that makes two graphs 'the same': inputs and params (names, types), nodes in
    order (op, operands, attributes, result names and types), outputs."""
    ref = {}
    for value in graph.inputs:
        ref[value] = ("input", value.name)
    for value in graph.params:
        ref[value] = ("param", value.name)
    nodes = []
    for index, node in enumerate(graph.nodes):
        operands = tuple(ref[v] for v in node.inputs)
        attrs = {k: _attr(v) for k, v in node.attrs.items()}
        results = tuple((v.name, v.type) for v in node.results)
        nodes.append((node.op, operands, attrs, results))
        for value in node.results:
            ref[value] = ("node", index, value.index)
    return {
        "name": graph.name,
        "inputs": [(v.name, v.type) for v in graph.inputs],
        "params": [(v.name, v.type) for v in graph.params],
        "nodes": nodes,
        "outputs": [ref[v] for v in graph.outputs],
    }


def assert_same_graph(a, b) -> None:
    sa, sb = structure(a), structure(b)
    for key in sa:
        assert sa[key] == sb[key], key
    try:
        from tilegraph.ir.text import print_graph
    except ImportError:
        return
    assert print_graph(a) == print_graph(b)


# ----- the examples ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_parses_verifies_and_runs(name):
    graph = parse_file(EXAMPLES / f"{name}.tg")
    verify(graph)
    outputs = run(graph, random_inputs(graph))
    assert [o.shape for o in outputs] == [v.type.shape for v in graph.outputs]
    assert all(np.isfinite(o).all() for o in outputs)


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_round_trips_through_to_dsl(name):
    graph = parse_file(EXAMPLES / f"{name}.tg")
    text = to_dsl(graph)
    again = parse(text, filename=f"{name}.printed.tg")
    assert_same_graph(graph, again)
    assert to_dsl(again) == text


def test_every_example_is_checked_in():
    assert {p.stem for p in EXAMPLES.glob("*.tg")} >= set(EXAMPLE_NAMES)


def test_mlp_matches_hand_built_graph():
    b = GraphBuilder("mlp")
    x = b.input("x", "f32[128, 256]")
    w1 = b.param("w1", "f32[256, 1024]")
    b1 = b.param("b1", "f32[1024]")
    w2 = b.param("w2", "f32[1024, 256]")
    h = b.gelu(b.add(b.matmul(x, w1), b1), name="h")
    expected = b.output(b.add(x, b.matmul(h, w2)))
    assert_same_graph(parse_file(EXAMPLES / "mlp.tg"), expected)
    inputs = random_inputs(expected)
    np.testing.assert_array_equal(run(parse_file(EXAMPLES / "mlp.tg"), inputs)[0], run(expected, inputs)[0])


def test_transformer_block_has_the_promised_parts():
    graph = parse_file(EXAMPLES / "transformer_block.tg")
    ops = [n.op for n in graph.nodes]
    assert {"attention", "layer_norm", "gelu", "matmul", "transpose", "reshape"} <= set(ops)
    assert ops.count("layer_norm") == 2
    attention = next(n for n in graph.nodes if n.op == "attention")
    assert attention.inputs[0].type == TensorType((4, 64, 32))  # 4 heads
    names = [p.name for p in graph.params]
    assert "norm.scale" in names and "norm_1.scale" in names  # one set of weights per call
    assert graph.inputs[0].type == graph.outputs[0].type


def test_resnet_block_and_lenet_have_the_promised_parts():
    resnet = [n.op for n in parse_file(EXAMPLES / "resnet_block.tg").nodes]
    assert resnet.count("conv2d") == 2 and resnet.count("batch_norm") == 2 and "relu" in resnet
    lenet = parse_file(EXAMPLES / "lenet.tg")
    ops = {n.op for n in lenet.nodes}
    assert {"conv2d", "max_pool2d", "matmul", "log_softmax", "reshape"} <= ops
    assert lenet.outputs[0].type == TensorType((8, 10))


# ----- the language --------------------------------------------------------------------------------
def ops_of(graph):
    return [n.op for n in graph.nodes]


def test_operators_lower_to_library_ops():
    graph = parse("""
    def f(a: f32[4, 4], b: f32[4, 4]) -> (f32[4, 4], bool[4, 4], bool[4, 4], bool[4, 4], bool[4, 4], bool[4, 4],
                                          bool[4, 4]) {
        y = -(a + b - a * b / a) @ b ** a
        return y, a < b, a <= b, a > b, a >= b, a == b, a != b
    }""")
    assert ops_of(graph) == ["add", "mul", "div", "sub", "neg", "pow", "matmul",
                             "lt", "le", "gt", "ge", "eq", "ne"]
    verify(graph)


def test_precedence_follows_python():
    graph = parse("def f(a: f32[3], b: f32[3]) -> f32[3] { return -a ** b + a * b }")
    # (-(a ** b)) + (a * b)
    assert ops_of(graph) == ["pow", "neg", "mul", "add"]
    a, b = np.array([1.0, 2.0, 3.0], np.float32), np.array([2.0, 0.5, 1.0], np.float32)
    np.testing.assert_allclose(run(graph, [a, b])[0], -a ** b + a * b, rtol=1e-6)
    right = parse("def f(a: f32[3], b: f32[3]) -> f32[3] { return a ** b ** a }")
    assert right.nodes[0].inputs == (right.inputs[1], right.inputs[0])  # b ** a first


def test_literals_take_the_dtype_of_their_context():
    graph = parse("""
    def f(x: f16[2, 3], i: i32[2]) -> (f16[2, 3], i32[2], f32[2, 2], f16[2, 3]) {
        half = 0.5
        return x * half, i + 1, 0.0, where(x > 0, x, -inf)
    }""")
    constants = [n for n in graph.nodes if n.op == "constant"]
    assert [(c.attrs["value"], c.attrs["dtype"], c.attrs["shape"]) for c in constants] == [
        (0.5, DType.f16, ()), (1, DType.i32, ()), (0.0, DType.f32, (2, 2)), (0.0, DType.f16, ()),
        (-math.inf, DType.f16, ())]
    verify(graph)


def test_keyword_attributes_and_bare_names():
    graph = parse("""
    def f(x: f32[1, 4, 8, 8], w: f32[4, 4, 3, 3], i: i64[3]) -> (f32[1, 4, 4, 4], f16[3], f32[1, 4, 8, 8]) {
        y = conv2d(x, w, stride=2, padding=[1, 1])
        let z = cast(i, dtype=f16)
        g = gelu(x, approximate=tanh)
        return y, z, softmax(g, axis=-1)
    }""")
    conv, cast, gelu, softmax = graph.nodes
    assert conv.attrs["stride"] == (2, 2) and conv.attrs["padding"] == (1, 1)
    assert cast.attrs["dtype"] is DType.f16
    assert gelu.attrs["approximate"] == "tanh"
    assert softmax.attrs["axis"] == 3
    assert [v.name for v in graph.nodes[0].results] == ["y"]


def test_functions_are_inlined_with_a_param_copy_per_call():
    graph = parse("""
    def dense(x: f32[2, 4]) -> f32[2, 4] {
        param w: f32[4, 4]
        h = x @ w
        return relu(h)
    }
    def pair(x: f32[2, 4]) -> (f32[2, 4], f32[2, 4]) {
        return dense(x), dense(x)
    }
    def main(x: f32[2, 4]) -> f32[2, 4] {
        a, b = pair(x)
        c = dense(b)
        return a + c
    }
    """)
    assert graph.name == "main"
    assert [p.name for p in graph.params] == ["pair.dense.w", "pair.dense_1.w", "dense.w"]
    assert ops_of(graph) == ["matmul", "relu", "matmul", "relu", "matmul", "relu", "add"]
    # values named in a callee get its prefix; a call's result takes the caller's binding name
    assert [n.results[0].name for n in graph.nodes] == ["pair.dense.h", "a", "pair.dense_1.h", "b", "dense.h",
                                                        "c", "0"]
    verify(graph)


def test_entry_defaults_to_main_then_last_and_can_be_chosen():
    text = """
    def first(x: f32[2]) -> f32[2] { return relu(x) }
    def second(x: f32[2]) -> f32[2] { return exp(x) }
    """
    assert parse(text).name == "second"
    assert parse(text, entry="first").name == "first"
    assert parse(text.replace("second", "main")).name == "main"
    with pytest.raises(ParseError, match="no function named 'frist'; did you mean first"):
        parse(text, entry="frist")


def test_functions_not_called_are_still_checked():
    with pytest.raises(ShapeError, match="inner dims differ"):
        parse("""
        def unused(x: f32[2, 3]) -> f32[2, 3] { return x @ x }
        def main(x: f32[2]) -> f32[2] { return x }
        """)


def test_nodes_carry_source_locations():
    graph = parse("def f(x: f32[2, 2]) -> f32[2, 2] {\n  y = relu(x)\n  return y @ y\n}\n", filename="m.tg")
    relu, matmul = graph.nodes
    assert isinstance(relu.loc, SourceLocation)
    assert (relu.loc.file, relu.loc.line, relu.loc.column, relu.loc.end_column) == ("m.tg", 2, 7, 14)
    assert (matmul.loc.line, matmul.loc.column, matmul.loc.end_column) == (3, 10, 15)


def test_multi_line_statements_and_comments():
    graph = parse("""
    # leading comment
    def f(x: f32[2, 3],   # trailing comment
          y: f32[2, 3],) -> f32[2, 3] {
        z = x +
            y  # newlines mean nothing
        return softmax(
            z,
            axis=0,
        )
    }""")
    assert ops_of(graph) == ["add", "softmax"]


def test_parse_file_reports_unreadable_files(tmp_path):
    with pytest.raises(TilegraphError, match="cannot read"):
        parse_file(tmp_path / "missing.tg")
    bad = tmp_path / "bad.tg"
    bad.write_bytes(b"def \xff")
    with pytest.raises(TilegraphError, match="not UTF-8"):
        parse_file(bad)


def test_parse_file_names_the_file_in_errors(tmp_path):
    path = tmp_path / "model.tg"
    path.write_text("def f(x: f32[2]) -> f32[2] {\n    return hx\n}\n")
    with pytest.raises(ParseError) as info:
        parse_file(path)
    assert str(info.value).startswith(f"{path}:2:12: error: unknown name 'hx'")


# ----- the printer ---------------------------------------------------------------------------------
def hand_built_graphs():
    """Graphs with the awkward corners: names that are keywords or numbers, a graph named like an
    op, nan/inf constants, strings, dtypes, bools, several outputs, an input as an output."""
    b = GraphBuilder("relu")
    x = b.input("def", "f32[2, 3]")
    i = b.input("0", "i64[4]")
    y = b.add(x, 2.0)
    z = b.where(b.lt(y, -1e-5), y, -math.inf)
    nan = b.constant(math.nan, shape=(2, 3))
    q = b.op("gelu", z, approximate="tanh", name="inf")
    yield b.output(b.softmax(q, axis=0), b.cast(i, dtype="f16"), nan, x)

    b = GraphBuilder("attn")
    q = b.input("q", "f32[2, 8, 4]")
    w = b.param("w.q", "f32[4, 4]")
    mask = b.input("mask", "bool[8, 8]")
    proj = b.matmul(q, w)
    out = b.attention(proj, proj, proj, mask, scale=0.25)
    causal = b.attention(proj, proj, proj, causal=True)
    m = b.mean(out, axes=(1, 2), keepdims=True)
    s = b.slice(causal, start=(0, 1, 0), stop=(2, 8, 4), step=(1, 2, 1))
    g = b.gather(b.reshape(s, shape=(-1, 4)), b.iota(shape=(3,), dtype=DType.i32))
    yield b.output(m, g, b.max_pool2d(b.reshape(out, shape=(1, 2, 8, 4)), kernel=(2, 1), padding=(1, 0)))


@pytest.mark.parametrize("graph", list(hand_built_graphs()), ids=lambda g: g.name)
def test_to_dsl_round_trips_hand_built_graphs(graph):
    verify(graph)
    text = to_dsl(graph)
    again = parse(text)
    assert_same_graph(graph, again)
    assert to_dsl(again) == text


def test_to_dsl_is_readable():
    text = to_dsl(parse_file(EXAMPLES / "mlp.tg"))
    assert text.splitlines()[0] == "def mlp(x: f32[128, 256]) -> f32[128, 256] {"
    assert "    param w1: f32[256, 1024]" in text
    assert "    h = gelu(_1)" in text  # default attributes are left out
    assert "x @ w1" in text


@given(st.data())
def test_to_dsl_round_trips_random_graphs(data):
    strategies = pytest.importorskip("strategies")
    graph = data.draw(strategies.graphs(max_nodes=8))
    text = to_dsl(graph)
    again = parse(text, filename="printed.tg")
    assert_same_graph(graph, again)
    assert to_dsl(again) == text
