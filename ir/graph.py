"""The SSA graph: Values defined once, Nodes that consume and produce them, and a Graph that owns both.

Use-def links (`Value.users`) are maintained by the Graph's mutation API only; passes call
`create_node`, `replace_all_uses`, `erase_node`, `move_before` and never edit lists directly.
"""
from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from .types import TensorType


class ValueKind(enum.Enum):
    INPUT = "input"
    PARAM = "param"
    RESULT = "result"


class Value:
    """A tensor defined exactly once: a graph input, a parameter (weight), or a node's result."""

    __slots__ = ("name", "type", "kind", "producer", "index", "data", "_users")

    def __init__(self, name: str, type: TensorType, kind: ValueKind, producer: Node | None = None,
                 index: int = 0, data: np.ndarray | None = None) -> None:
        self.name = name
        self.type = type
        self.kind = kind
        self.producer = producer
        self.index = index
        self.data = data
        self._users: dict[Node, None] = {}

    @property
    def users(self) -> list[Node]:
        """Nodes that read this value, each once, in the order they started using it."""
        return list(self._users)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self):
        return self.type.dtype

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


class Node:
    """One operation: an op name, input values, attributes and result values."""

    __slots__ = ("op", "inputs", "attrs", "results", "graph", "loc")

    def __init__(self, graph: Graph, op: str, inputs: tuple[Value, ...], attrs: Mapping[str, Any],
                 loc: Any = None) -> None:
        self.graph = graph
        self.op = op
        self.inputs = tuple(inputs)
        self.attrs = dict(attrs)
        self.results: tuple[Value, ...] = ()
        self.loc = loc

    @property
    def result(self) -> Value:
        """The single result; an error for nodes with several."""
        if len(self.results) != 1:
            raise ValueError(f"{self.op} has {len(self.results)} results, not one")
        return self.results[0]

    @property
    def users(self) -> list[Node]:
        seen: dict[Node, None] = {}
        for value in self.results:
            seen.update(value._users)
        return list(seen)

    @property
    def name(self) -> str:
        return self.results[0].name if self.results else f"<{self.op}>"

    @property
    def opdef(self):
        from .ops import get_op  # the op library builds on this module

        return get_op(self.op)

    @property
    def input_types(self) -> tuple[TensorType, ...]:
        return tuple(v.type for v in self.inputs)

    @property
    def result_types(self) -> tuple[TensorType, ...]:
        return tuple(v.type for v in self.results)

    def iteration_space(self):
        """The structured description (loops, maps, body), or None for layout/composite ops."""
        return self.opdef.space(self.input_types, self.attrs, self.result_types)

    def flops(self) -> int:
        return self.opdef.flops(self.input_types, self.attrs, self.result_types)

    def bytes(self) -> int:
        return self.opdef.bytes(self.input_types, self.result_types)

    def __repr__(self) -> str:
        ins = ", ".join(f"%{v.name}" for v in self.inputs)
        outs = ", ".join(f"%{v.name}" for v in self.results)
        return f"<Node {outs} = {self.op}({ins})>"


def sanitize_name(hint: str) -> str:
    """A printable value name from any hint: runs of unsafe characters become one underscore."""
    cleaned = re.sub(r"[^A-Za-z0-9_.]+", "_", hint).strip("_.") or "v"
    if cleaned[0].isdigit() and not cleaned.isdigit():
        cleaned = "v" + cleaned
    return cleaned


class Graph:
    """A function in SSA form: inputs, parameters, nodes in a valid topological order, outputs."""

    def __init__(self, name: str = "main") -> None:
        self.name = sanitize_name(name)
        self.inputs: list[Value] = []
        self.params: list[Value] = []
        self._nodes: list[Node] = []
        self._outputs: list[Value] = []
        self._names: set[str] = set()
        self._counter = 0

    # ----- construction -------------------------------------------------------------------
    def unique_name(self, hint: str | None = None) -> str:
        """A fresh value name: the sanitized hint (suffixed if taken) or the next free number."""
        if hint is None:
            while str(self._counter) in self._names:
                self._counter += 1
            name = str(self._counter)
            self._counter += 1
        else:
            base = sanitize_name(hint)
            name, suffix = base, 1
            while name in self._names:
                name, suffix = f"{base}_{suffix}", suffix + 1
        self._names.add(name)
        return name

    def add_input(self, name: str, type: TensorType) -> Value:
        value = Value(self.unique_name(name), type, ValueKind.INPUT)
        self.inputs.append(value)
        return value

    def add_param(self, name: str, type: TensorType, data: np.ndarray | None = None) -> Value:
        """A weight: its data is carried with the graph or filled at run time (seed or .npz)."""
        if data is not None:
            data = np.asarray(data)
            if tuple(data.shape) != type.shape:
                raise ValueError(f"param {name}: data shape {list(data.shape)} != type {type}")
        value = Value(self.unique_name(name), type, ValueKind.PARAM, data=data)
        self.params.append(value)
        return value

    def create_node(self, op: str, inputs: Iterable[Value], attrs: Mapping[str, Any] | None = None, *,
                    name: str | None = None, result_types: Iterable[TensorType] | None = None,
                    before: Node | None = None, loc: Any = None) -> Node:
        """Add a node, inferring result types from the op library unless given.

        Attributes are completed with defaults and normalised by the op (so equal nodes compare
        equal). The node goes at the end, or just before `before`.
        """
        from .ops import get_op  # the op library builds on this module

        inputs = tuple(inputs)
        for value in inputs:
            if not isinstance(value, Value):
                raise TypeError(f"{op}: operand {value!r} is not a Value")
        opdef = get_op(op)
        in_types = tuple(v.type for v in inputs)
        attrs = opdef.normalize_attrs(in_types, dict(attrs or {}))
        types = tuple(result_types) if result_types is not None else opdef.infer(in_types, attrs)
        node = Node(self, op, inputs, attrs, loc)
        names = [name] if len(types) == 1 else [f"{name}.{i}" if name else None for i in range(len(types))]
        node.results = tuple(Value(self.unique_name(n), t, ValueKind.RESULT, node, i)
                             for i, (n, t) in enumerate(zip(names, types)))
        for value in inputs:
            value._users[node] = None
        if before is None:
            self._nodes.append(node)
        else:
            self._nodes.insert(self._index(before), node)
        return node

    def set_outputs(self, values: Iterable[Value]) -> None:
        self._outputs = list(values)

    # ----- queries ------------------------------------------------------------------------
    @property
    def nodes(self) -> list[Node]:
        """The nodes in program order (a copy: safe to mutate the graph while iterating)."""
        return list(self._nodes)

    @property
    def outputs(self) -> list[Value]:
        return list(self._outputs)

    def __iter__(self) -> Iterator[Node]:
        return iter(list(self._nodes))

    def __len__(self) -> int:
        return len(self._nodes)

    def values(self) -> Iterator[Value]:
        yield from self.inputs
        yield from self.params
        for node in self._nodes:
            yield from node.results

    def value(self, name: str) -> Value:
        for value in self.values():
            if value.name == name:
                return value
        raise KeyError(f"no value named %{name} in @{self.name}")

    def _index(self, node: Node) -> int:
        try:
            return self._nodes.index(node)
        except ValueError:
            raise ValueError(f"{node!r} is not in graph @{self.name}") from None

    # ----- mutation -----------------------------------------------------------------------
    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Make every reader of `old` (nodes and graph outputs) read `new` instead."""
        if old is new:
            return
        if old.type != new.type:
            raise TypeError(f"cannot replace %{old.name}: {old.type} with %{new.name}: {new.type}")
        for user in list(old._users):
            user.inputs = tuple(new if v is old else v for v in user.inputs)
            new._users[user] = None
        old._users.clear()
        self._outputs = [new if v is old else v for v in self._outputs]

    def set_input(self, node: Node, index: int, value: Value) -> None:
        """Replace one operand of `node`, keeping use lists right."""
        old = node.inputs[index]
        inputs = list(node.inputs)
        inputs[index] = value
        node.inputs = tuple(inputs)
        if old not in node.inputs:
            old._users.pop(node, None)
        value._users[node] = None

    def erase_node(self, node: Node) -> None:
        """Remove a node whose results are unused."""
        for value in node.results:
            if value._users or value in self._outputs:
                raise ValueError(f"cannot erase {node!r}: %{value.name} is still used")
        self._nodes.pop(self._index(node))
        for value in node.inputs:
            value._users.pop(node, None)
        for value in node.results:
            self._names.discard(value.name)
        node.graph = None

    def remove_param(self, value: Value) -> None:
        if value._users or value in self._outputs:
            raise ValueError(f"cannot remove param %{value.name}: still used")
        self.params.remove(value)
        self._names.discard(value.name)

    def rename_value(self, value: Value, hint: str) -> str:
        """Rename `value` after `hint`, sanitised and made unique as for new values; returns the name."""
        if value.name == hint:
            return hint
        self._names.discard(value.name)
        value.name = self.unique_name(hint)
        return value.name

    def move_before(self, node: Node, anchor: Node) -> None:
        self._nodes.pop(self._index(node))
        self._nodes.insert(self._index(anchor), node)

    def topological_sort(self) -> None:
        """Reorder nodes into a topological order, keeping the current order where it is valid.

        Raises ValueError naming a node on a cycle.
        """
        position = {node: i for i, node in enumerate(self._nodes)}
        pending = {node: sum(1 for v in set(node.inputs) if v.producer in position) for node in self._nodes}
        import heapq

        ready = [(position[n], n) for n, count in pending.items() if count == 0]
        heapq.heapify(ready)
        order: list[Node] = []
        while ready:
            _, node = heapq.heappop(ready)
            order.append(node)
            for user in node.users:
                if user in pending:
                    pending[user] -= sum(1 for v in set(user.inputs) if v.producer is node)
                    if pending[user] == 0:
                        heapq.heappush(ready, (position[user], user))
        if len(order) != len(self._nodes):
            stuck = next(n for n in self._nodes if n not in set(order))
            raise ValueError(f"graph @{self.name} has a cycle through {stuck!r}")
        self._nodes = order

    def dead_code_elimination(self) -> int:
        """Erase nodes whose results nobody reads; returns how many were erased."""
        erased = 0
        for node in reversed(self._nodes[:]):
            if not any(v._users or v in self._outputs for v in node.results):
                self.erase_node(node)
                erased += 1
        return erased

    def clone(self) -> Graph:
        """A deep copy of the structure (parameter data arrays are shared, not copied)."""
        copy = Graph(self.name)
        mapping: dict[Value, Value] = {}
        for value in self.inputs:
            mapping[value] = copy.add_input(value.name, value.type)
        for value in self.params:
            mapping[value] = copy.add_param(value.name, value.type, value.data)
        for node in self._nodes:
            new = Node(copy, node.op, tuple(mapping[v] for v in node.inputs), node.attrs, node.loc)
            new.results = tuple(Value(copy.unique_name(v.name), v.type, ValueKind.RESULT, new, v.index)
                                for v in node.results)
            for value in new.inputs:
                value._users[new] = None
            copy._nodes.append(new)
            mapping.update(zip(node.results, new.results))
        copy._counter = self._counter
        copy.set_outputs(mapping[v] for v in self._outputs)
        return copy

    def __str__(self) -> str:
        from .text import print_graph

        return print_graph(self)

    def __repr__(self) -> str:
        return f"<Graph @{self.name}: {len(self.inputs)} inputs, {len(self.params)} params, {len(self._nodes)} nodes>"
