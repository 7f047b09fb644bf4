"""The verifier accepts every generated graph and rejects broken ones with a message naming the node."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import ALL_DTYPES, graphs

from tilegraph.ir import DType, Graph, GraphBuilder, TensorType, TilegraphError, VerifyError
from tilegraph.ir.verifier import find_problems, verify


def describe(node) -> str:
    """How the verifier names a node: its results and op, `%3 = matmul`."""
    return f"{', '.join('%' + v.name for v in node.results)} = {node.op}"


def problems_of(graph: Graph) -> list[str]:
    return list(find_problems(graph))


def rejects(graph: Graph, *fragments: str) -> str:
    """verify() raises VerifyError whose message holds every fragment; returns the message."""
    with pytest.raises(VerifyError) as info:
        verify(graph)
    message = str(info.value)
    assert message.startswith(f"graph @{graph.name} is invalid (")
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in:\n{message}"
    return message


def readers(graph: Graph):
    return [n for n in graph.nodes if n.inputs]


@given(graph=graphs(dtypes=ALL_DTYPES, max_nodes=12))
def test_accepts_every_generated_graph(graph):
    assert problems_of(graph) == []
    verify(graph)


@given(graph=graphs())
def test_accepts_a_clone_and_a_rebuilt_order(graph):
    verify(graph.clone())
    graph.topological_sort()
    verify(graph)


# ----- each kind of breakage, on random graphs -------------------------------------------------------------
@given(data=st.data())
def test_rejects_a_dangling_value_from_another_graph(data):
    graph = data.draw(graphs())
    nodes = readers(graph)
    assume(nodes)
    node = data.draw(st.sampled_from(nodes))
    index = data.draw(st.integers(0, len(node.inputs) - 1))
    other = Graph("other")
    alien = other.add_input("alien", node.inputs[index].type)
    graph.set_input(node, index, alien)
    rejects(graph, f"({describe(node)}): operand {index} %alien is not defined in this graph")


@given(data=st.data())
def test_rejects_a_wrong_result_type(data):
    graph = data.draw(graphs())
    node = data.draw(st.sampled_from(graph.nodes))
    value = node.results[0]
    wrong = TensorType(value.shape + (7,), value.dtype) if data.draw(st.booleans()) else \
        value.type.with_dtype(DType.f16 if value.dtype is not DType.f16 else DType.f32)
    value.type = wrong
    rejects(graph, f"({describe(node)}): result type {wrong} does not match inferred")


@given(data=st.data())
def test_rejects_a_node_moved_before_its_producer(data):
    graph = data.draw(graphs())
    pairs = [(n, v) for n in graph.nodes for v in n.inputs if v.producer is not None]
    assume(pairs)
    node, value = data.draw(st.sampled_from(pairs))
    graph.move_before(node, value.producer)
    rejects(graph, f"({describe(node)}): operand", f"%{value.name} is used before it is defined (cycle or bad order)")


@given(data=st.data())
def test_rejects_an_unknown_attribute(data):
    graph = data.draw(graphs())
    node = data.draw(st.sampled_from(graph.nodes))
    node.attrs["bogus"] = 1
    rejects(graph, f"({describe(node)}): {node.op}: unknown attribute 'bogus'")


@given(data=st.data())
def test_rejects_a_use_list_missing_a_reader(data):
    graph = data.draw(graphs())
    nodes = readers(graph)
    assume(nodes)
    node = data.draw(st.sampled_from(nodes))
    value = data.draw(st.sampled_from(node.inputs))
    del value._users[node]  # what a pass poking lists directly would do
    rejects(graph, f"%{value.name} does not list {describe(node)} among its users")


@given(data=st.data())
def test_rejects_a_use_list_with_a_stranger(data):
    graph = data.draw(graphs())
    values = list(graph.values())
    value = data.draw(st.sampled_from(values))
    strangers = [n for n in graph.nodes if value not in n.inputs]
    assume(strangers)
    node = data.draw(st.sampled_from(strangers))
    value._users[node] = None
    rejects(graph, f"%{value.name} lists a user that does not read it ({describe(node)})")


# ----- the remaining invariants, one at a time ------------------------------------------------------------
def small_graph():
    b = GraphBuilder("small")
    x = b.input("x", "f32[2, 3]")
    w = b.param("w", "f32[3, 4]")
    y = b.matmul(x, w, name="y")
    z = b.sum(y, axes=1, name="z")
    return b.output(z), x, w, y, z


def test_small_graph_is_valid():
    graph, *_ = small_graph()
    verify(graph)


def test_rejects_non_canonical_attributes():
    graph, x, w, y, z = small_graph()
    z.producer.attrs["axes"] = (-1,)
    rejects(graph, "(%z = sum): attributes {'axes': (-1,), 'keepdims': False} are not in canonical form "
                   "{'axes': (1,), 'keepdims': False}")


def test_rejects_a_missing_attribute_and_bad_operands():
    graph, x, w, y, z = small_graph()
    del z.producer.attrs["keepdims"]
    rejects(graph, "(%z = sum): attributes")
    graph, x, w, y, z = small_graph()
    y.producer.inputs = (x, x)  # poked directly: now an invalid matmul, and w's use list is stale
    rejects(graph, "(%y = matmul): matmul: inner dims differ: f32[2,3] @ f32[2,3]",
            "%w lists a user that does not read it (%y = matmul)")


def test_rejects_an_unknown_op():
    graph, x, w, y, z = small_graph()
    z.producer.op = "frobnicate"
    rejects(graph, "(%z = frobnicate): unknown op 'frobnicate'")


def test_rejects_undefined_and_missing_outputs():
    graph, x, w, y, z = small_graph()
    graph.set_outputs([Graph("other").add_input("ghost", TensorType((2,)))])
    rejects(graph, "output %ghost is not defined in the graph")
    graph.set_outputs([])
    rejects(graph, "graph has no outputs")


def test_rejects_a_duplicate_name():
    graph, x, w, y, z = small_graph()
    y.name = "x"
    rejects(graph, "name %x is defined twice")


def test_rejects_nodes_and_values_that_do_not_point_back():
    graph, x, w, y, z = small_graph()
    y.producer.graph = Graph("elsewhere")
    rejects(graph, "(%y = matmul): node belongs to another graph")
    graph, x, w, y, z = small_graph()
    y.index = 3
    rejects(graph, "(%y = matmul): result 0 %y does not point back at its node")
    graph, x, w, y, z = small_graph()
    z.producer.results = (y,)
    rejects(graph, "does not point back at its node")


def test_rejects_misfiled_inputs_and_params():
    graph, x, w, y, z = small_graph()
    graph.params.append(graph.inputs.pop())
    rejects(graph, "param %x is not marked as a parameter")
    graph, x, w, y, z = small_graph()
    w.data = np.zeros((4, 3), np.float32)
    rejects(graph, "param %w: data shape [4, 3] does not match f32[3, 4]")


def test_lists_every_problem_and_is_a_user_error():
    graph, x, w, y, z = small_graph()
    z.producer.attrs["bogus"] = True
    y.type = TensorType((9,))
    message = rejects(graph, "(2 problem(s))", "%y = matmul", "%z = sum")
    assert message.count("\n  - ") == 2
    with pytest.raises(TilegraphError):
        verify(graph)
