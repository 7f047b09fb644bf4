"""The Graph mutation API keeps use-def links right; property-tested over random graphs."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from strategies import ALL_DTYPES, graph_inputs, graphs

from tilegraph.backends.reference import run
from tilegraph.ir import DType, Graph, GraphBuilder, TensorType, ValueKind, all_ops
from tilegraph.ir.verifier import verify


# ----- independent checks (they do not use the verifier) ------------------------------------------
def check_links(graph: Graph) -> None:
    """Every use-def and def-use link agrees, and the order is topological."""
    nodes = graph.nodes
    assert len(set(nodes)) == len(nodes), "a node is listed twice"
    node_set = set(nodes)
    defined = list(graph.inputs) + list(graph.params) + [r for n in nodes for r in n.results]
    assert len({v.name for v in defined}) == len(defined), "two values share a name"
    for v in graph.inputs:
        assert v.kind is ValueKind.INPUT and v.producer is None
    for v in graph.params:
        assert v.kind is ValueKind.PARAM and v.producer is None
    seen = set(graph.inputs) | set(graph.params)
    for node in nodes:
        assert node.graph is graph
        for i, value in enumerate(node.results):
            assert value.producer is node and value.index == i and value.kind is ValueKind.RESULT
        for value in node.inputs:
            assert value in seen, f"{node} reads %{value.name} before it is defined"
            assert node in value.users, f"%{value.name} does not list {node}"
        seen.update(node.results)
    for value in defined:
        users = value.users
        assert len(users) == len(set(users)), f"%{value.name} lists a user twice"
        for user in users:
            assert user in node_set, f"%{value.name} lists {user}, which is not in the graph"
            assert value in user.inputs, f"%{value.name} lists {user}, which does not read it"
    for value in graph.outputs:
        assert value in seen, f"output %{value.name} is not defined"


def structure(graph: Graph):
    """Everything that makes two graphs the same program, by names (not object identity)."""
    return (
        graph.name,
        [(v.name, v.type) for v in graph.inputs],
        [(v.name, v.type, None if v.data is None else v.data.tobytes()) for v in graph.params],
        [(n.op, tuple(v.name for v in n.inputs), repr(sorted(n.attrs.items(), key=lambda kv: kv[0])),
          tuple((r.name, r.type) for r in n.results)) for n in graph.nodes],
        [v.name for v in graph.outputs],
    )


def outputs_of(graph: Graph, inputs) -> list[np.ndarray]:
    return run(graph, inputs, seed=3)


def same_arrays(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def results_of(graph: Graph):
    return [v for n in graph.nodes for v in n.results]


# ----- the generator itself --------------------------------------------------------------------------
@given(graph=graphs(dtypes=ALL_DTYPES, max_nodes=12))
def test_generated_graphs_are_consistent_and_have_no_dead_code(graph):
    check_links(graph)
    verify(graph)
    assert graph.outputs
    for node in graph.nodes:
        assert any(v.users or v in graph.outputs for v in node.results), f"{node} is dead"
    assert {v.dtype for v in graph.values()} <= set(ALL_DTYPES)


@pytest.mark.parametrize("op", sorted(all_ops()))
@settings(max_examples=4)
@given(data=st.data())
def test_graphs_can_hold_every_op(op, data):
    graph = data.draw(graphs(max_nodes=3, ops=[op], dtypes=ALL_DTYPES))
    assert op in {n.op for n in graph.nodes}
    assert {n.op for n in graph.nodes} <= {op}
    verify(graph)


@given(graph=graphs(ops=["matmul", "add", "relu", "softmax", "log", "div"], dtypes=[DType.f32]))
def test_graphs_respect_ops_and_dtypes(graph):
    assert {n.op for n in graph.nodes} <= {"matmul", "add", "relu", "softmax", "log", "div"}  # no guard ops sneak in
    assert {v.dtype for v in graph.values()} == {DType.f32}


@pytest.mark.parametrize("dtypes", [[DType.f32], [DType.f16, DType.bool], [DType.bf16, DType.i32],
                                    [DType.i64], [DType.i32, DType.bool]])
@settings(max_examples=15)
@given(data=st.data())
def test_graphs_keep_every_value_in_the_given_dtypes(dtypes, data):
    graph = data.draw(graphs(dtypes=dtypes, max_nodes=10))
    assert {v.dtype for v in graph.values()} <= set(dtypes)
    verify(graph)


@pytest.mark.parametrize("kwargs, message", [
    ({"ops": ["frobnicate"]}, r"no generator for op\(s\) \['frobnicate'\]"),
    ({"ops": ["exp"], "dtypes": [DType.i32]}, r"none of the ops \['exp'\] can be typed with"),
])
def test_graphs_reject_unknown_ops_and_impossible_dtypes(kwargs, message):
    @settings(max_examples=1)
    @given(graphs(**kwargs))
    def draw(graph):
        pass

    with pytest.raises(ValueError, match=message):
        draw()



# ----- replace_all_uses -------------------------------------------------------------------------------
@given(data=st.data())
def test_replace_all_uses_moves_every_reader(data):
    graph = data.draw(graphs())
    inputs = data.draw(graph_inputs(graph))
    before = run(graph, inputs, seed=3, return_all=True)
    expected = [before[v.name] for v in graph.outputs]
    old = data.draw(st.sampled_from(results_of(graph)))
    readers = set(old.users)
    was_output = [v is old for v in graph.outputs]
    new = graph.add_input("fresh", old.type)
    graph.replace_all_uses(old, new)
    assert old.users == [] and old not in graph.outputs
    assert set(new.users) == readers
    assert [v is new for v in graph.outputs] == was_output
    for reader in readers:
        assert old not in reader.inputs and new in reader.inputs
    check_links(graph)
    verify(graph)
    # the rewired graph computes the same thing when the new input carries the old value
    same_arrays(outputs_of(graph, list(inputs) + [before[old.name]]), expected)
    erased = graph.dead_code_elimination()
    assert erased >= 1 and old.producer not in graph.nodes
    check_links(graph)
    verify(graph)
    same_arrays(outputs_of(graph, list(inputs) + [before[old.name]]), expected)


def test_replace_all_uses_checks_types_and_ignores_self():
    b = GraphBuilder()
    x, y = b.input("x", "f32[2]"), b.input("y", "f32[3]")
    r = b.neg(x)
    g = b.output(r)
    with pytest.raises(TypeError, match=r"cannot replace %x: f32\[2\] with %y: f32\[3\]"):
        g.replace_all_uses(x, y)
    g.replace_all_uses(x, x)
    assert x.users == [g.nodes[0]]
    check_links(g)


# ----- set_input ---------------------------------------------------------------------------------------
@given(data=st.data())
def test_set_input_keeps_use_lists(data):
    graph = data.draw(graphs())
    readers = [n for n in graph.nodes if n.inputs]
    assume(readers)
    node = data.draw(st.sampled_from(readers))
    index = data.draw(st.integers(0, len(node.inputs) - 1))
    old = node.inputs[index]
    inputs = data.draw(graph_inputs(graph))
    before = run(graph, inputs, seed=3, return_all=True)
    new = graph.add_input("other", old.type)
    graph.set_input(node, index, new)
    assert node.inputs[index] is new and node in new.users
    assert (node in old.users) == (old in node.inputs)
    check_links(graph)
    verify(graph)
    same_arrays(outputs_of(graph, list(inputs) + [before[old.name]]), [before[v.name] for v in graph.outputs])


def test_set_input_on_a_value_read_twice():
    b = GraphBuilder()
    x, y = b.input("x", "f32[2]"), b.input("y", "f32[2]")
    s = b.add(x, x)
    g = b.output(s)
    node = g.nodes[0]
    g.set_input(node, 0, y)
    assert node.inputs == (y, x) and x.users == [node] and y.users == [node]
    g.set_input(node, 1, y)
    assert node.inputs == (y, y) and x.users == [] and y.users == [node]
    check_links(g)
    verify(g)


# ----- erase_node, remove_param --------------------------------------------------------------------------
@given(data=st.data())
def test_erase_node_refuses_used_nodes_and_removes_unused_ones(data):
    graph = data.draw(graphs())
    shape = structure(graph)
    node = data.draw(st.sampled_from(graph.nodes))
    with pytest.raises(ValueError, match="still used"):
        graph.erase_node(node)
    assert structure(graph) == shape
    value = data.draw(st.sampled_from(list(graph.values())))
    b = GraphBuilder(graph, before=data.draw(st.sampled_from(graph.nodes)))
    dead = b.cast(value, dtype=DType.f32, name="dead")
    assert value.users[-1] is dead.producer
    graph.erase_node(dead.producer)
    assert dead.producer not in graph.nodes and dead.producer.graph is None
    assert dead.producer not in value.users
    assert structure(graph) == shape
    assert graph.unique_name("dead") == "dead"  # the erased name is free again
    check_links(graph)


def test_remove_param():
    b = GraphBuilder()
    w, unused = b.param("w", "f32[2]"), b.param("unused", "f32[2]")
    g = b.output(b.neg(w))
    with pytest.raises(ValueError, match="cannot remove param %w: still used"):
        g.remove_param(w)
    g.remove_param(unused)
    assert g.params == [w]
    verify(g)


# ----- move_before, topological_sort ---------------------------------------------------------------------
@given(data=st.data())
def test_topological_sort_repairs_any_order(data):
    graph = data.draw(graphs(max_nodes=10))
    inputs = data.draw(graph_inputs(graph))
    expected = outputs_of(graph, inputs)
    ops_before = sorted(n.op for n in graph.nodes)
    nodes = graph.nodes
    if len(nodes) > 1:
        for _ in range(data.draw(st.integers(1, 2 * len(nodes)))):
            node, anchor = data.draw(st.permutations(nodes))[:2]
            graph.move_before(node, anchor)
            assert graph.nodes.index(node) == graph.nodes.index(anchor) - 1
    graph.topological_sort()
    assert sorted(n.op for n in graph.nodes) == ops_before
    check_links(graph)
    verify(graph)
    same_arrays(outputs_of(graph, inputs), expected)


@given(graph=graphs(max_nodes=10))
def test_topological_sort_keeps_a_valid_order(graph):
    order = graph.nodes
    graph.topological_sort()
    assert graph.nodes == order


def test_topological_sort_names_a_node_on_a_cycle():
    b = GraphBuilder("loop")
    x = b.input("x", "f32[2]")
    a = b.neg(x, name="a")
    c = b.relu(a, name="c")
    g = b.output(c)
    g.set_input(a.producer, 0, c)  # a reads c, c reads a
    with pytest.raises(ValueError, match=r"graph @loop has a cycle through <Node %(a|c) = "):
        g.topological_sort()


def test_create_node_before_an_anchor_and_unique_names():
    b = GraphBuilder("g")
    x = b.input("x", "f32[2]")
    last = b.exp(x, name="h")
    first = GraphBuilder(b.graph, before=last.producer).neg(x, name="h")
    assert first.name == "h_1" and [n.op for n in b.graph.nodes] == ["neg", "exp"]
    odd = b.relu(x, name="9 odd name!")
    assert odd.name == "v9_odd_name"
    assert b.graph.value("h_1") is first
    with pytest.raises(KeyError, match="no value named %nope in @g"):
        b.graph.value("nope")
    assert x.users == [last.producer, first.producer, odd.producer]  # in the order they started reading


def test_node_result_needs_exactly_one():
    g = Graph()
    x = g.add_input("x", TensorType((2,)))
    node = g.create_node("add", [x, x], result_types=[TensorType((2,)), TensorType((2,))], name="pair")
    assert [v.name for v in node.results] == ["pair.0", "pair.1"]
    with pytest.raises(ValueError, match="add has 2 results, not one"):
        node.result  # noqa: B018


# ----- dead_code_elimination ------------------------------------------------------------------------------
@given(data=st.data())
def test_dead_code_elimination_removes_exactly_the_dead_nodes(data):
    graph = data.draw(graphs())
    assert graph.dead_code_elimination() == 0
    shape = structure(graph)
    added = 0
    for _ in range(data.draw(st.integers(1, 4))):
        nodes = graph.nodes
        anchor = data.draw(st.sampled_from(nodes + [None]))
        b = GraphBuilder(graph, before=anchor)
        position = nodes.index(anchor) if anchor is not None else len(nodes)
        visible = list(graph.inputs) + list(graph.params) + [v for n in nodes[:position] for v in n.results]
        if not visible:
            continue
        value = data.draw(st.sampled_from(visible))
        chain = b.abs(value)
        added += 1
        if data.draw(st.booleans()):
            b.cast(chain, dtype=DType.f32)
            added += 1
    check_links(graph)
    verify(graph)
    assert graph.dead_code_elimination() == added
    assert structure(graph) == shape
    check_links(graph)


# ----- clone -----------------------------------------------------------------------------------------------
@given(data=st.data())
def test_clone_is_equal_and_independent(data):
    graph = data.draw(graphs())
    inputs = data.draw(graph_inputs(graph))
    copy = graph.clone()
    assert structure(copy) == structure(graph)
    check_links(copy)
    verify(copy)
    originals = set(map(id, graph.values())) | set(map(id, graph.nodes))
    assert not originals & (set(map(id, copy.values())) | set(map(id, copy.nodes)))
    for a, b in zip(graph.params, copy.params):
        assert a.data is b.data  # parameter data is shared, not copied
    same_arrays(outputs_of(copy, inputs), outputs_of(graph, inputs))
    # mutating the copy leaves the original alone
    shape = structure(graph)
    target = data.draw(st.sampled_from(copy.outputs))
    extra = GraphBuilder(copy).abs(target)
    copy.set_outputs([extra])
    copy.dead_code_elimination()
    assert structure(graph) == shape
    check_links(graph)
    check_links(copy)
    verify(copy)
    fresh = copy.clone().unique_name(None)
    assert fresh not in {v.name for v in copy.values()}
