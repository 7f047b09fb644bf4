"""The verifier: checks every IR invariant and names the node at fault."""
from __future__ import annotations

from .errors import ShapeError, VerifyError
from .graph import Graph, Node, Value, ValueKind


def verify(graph: Graph) -> None:
    """Raise VerifyError listing every broken invariant; return None for a valid graph."""
    problems = list(find_problems(graph))
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise VerifyError(f"graph @{graph.name} is invalid ({len(problems)} problem(s)):\n{listed}")


def find_problems(graph: Graph):
    """Yield one message per broken invariant."""
    defined: set[Value] = set()
    names: dict[str, Value] = {}

    def define(value: Value, where: str):
        if value.name in names and names[value.name] is not value:
            yield f"{where}: name %{value.name} is defined twice"
        names[value.name] = value
        defined.add(value)

    for value in graph.inputs:
        if value.kind is not ValueKind.INPUT or value.producer is not None:
            yield f"input %{value.name} is not marked as a graph input"
        yield from define(value, f"input %{value.name}")
    for value in graph.params:
        if value.kind is not ValueKind.PARAM or value.producer is not None:
            yield f"param %{value.name} is not marked as a parameter"
        if value.data is not None and tuple(value.data.shape) != value.type.shape:
            yield f"param %{value.name}: data shape {list(value.data.shape)} does not match {value.type}"
        yield from define(value, f"param %{value.name}")

    for position, node in enumerate(graph.nodes):
        where = f"node {position} ({_describe(node)})"
        yield from _check_node(graph, node, defined, where)
        for value in node.results:
            yield from define(value, where)

    if not graph.outputs:
        yield "graph has no outputs"
    for value in graph.outputs:
        if value not in defined:
            yield f"output %{value.name} is not defined in the graph"

    yield from _check_use_lists(graph, defined)


def _describe(node: Node) -> str:
    outs = ", ".join(f"%{v.name}" for v in node.results) or "<no results>"
    return f"{outs} = {node.op}"


def _check_node(graph: Graph, node: Node, defined: set[Value], where: str):
    if node.graph is not graph:
        yield f"{where}: node belongs to another graph"
    for index, value in enumerate(node.inputs):
        if value not in defined:
            later = value.producer is not None and value.producer.graph is graph and value.producer in graph.nodes
            reason = "is used before it is defined (cycle or bad order)" if later else "is not defined in this graph"
            yield f"{where}: operand {index} %{value.name} {reason}"
    for index, value in enumerate(node.results):
        if value.producer is not node or value.index != index or value.kind is not ValueKind.RESULT:
            yield f"{where}: result {index} %{value.name} does not point back at its node"
    try:
        opdef = node.opdef
    except ShapeError as e:
        yield f"{where}: {e.message}"
        return
    try:
        attrs = opdef.normalize_attrs(node.input_types, node.attrs)
        if attrs != node.attrs:
            yield f"{where}: attributes {node.attrs} are not in canonical form {attrs}"
        inferred = opdef.infer(node.input_types, attrs)
    except ShapeError as e:
        yield f"{where}: {e.message}"
        return
    if inferred != node.result_types:
        expected = ", ".join(map(str, inferred))
        found = ", ".join(map(str, node.result_types))
        yield f"{where}: result type {found} does not match inferred {expected}"


def _check_use_lists(graph: Graph, defined: set[Value]):
    for node in graph.nodes:
        for value in node.inputs:
            if node not in value._users:
                yield f"%{value.name} does not list {_describe(node)} among its users"
    for value in defined:
        for user in value._users:
            if value not in user.inputs or user.graph is not graph:
                yield f"%{value.name} lists a user that does not read it ({_describe(user)})"
