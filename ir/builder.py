"""GraphBuilder: write graphs in Python as calls, `b.relu(b.add(b.matmul(x, w), bias))`.

Every op in the library is a method (`b.softmax(x, axis=-1)`); plain numbers become scalar
constants of the other operands' dtype, so `b.mul(x, 0.5)` just works.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .graph import Graph, Node, Value
from .ops import get_op
from .types import DType, TensorType, parse_type


def as_type(spec: TensorType | str | Sequence[int], dtype: DType | str = DType.f32) -> TensorType:
    """Accept a TensorType, a string `f32[2, 3]`, or a shape with a separate dtype."""
    if isinstance(spec, TensorType):
        return spec
    if isinstance(spec, str):
        return parse_type(spec)
    return TensorType(tuple(spec), DType.parse(dtype) if isinstance(dtype, str) else dtype)


class GraphBuilder:
    """Appends nodes to a graph (at the end, or before an anchor node when rewriting)."""

    def __init__(self, graph: Graph | str = "main", *, before: Node | None = None, loc: Any = None) -> None:
        self.graph = Graph(graph) if isinstance(graph, str) else graph
        self.before = before
        self.loc = loc

    def input(self, name: str, type: TensorType | str | Sequence[int], dtype: DType | str = DType.f32) -> Value:
        return self.graph.add_input(name, as_type(type, dtype))

    def param(self, name: str, type: TensorType | str | Sequence[int], data: np.ndarray | None = None,
              dtype: DType | str = DType.f32) -> Value:
        return self.graph.add_param(name, as_type(type, dtype), data)

    def constant(self, value: float | int | bool, dtype: DType = DType.f32, shape: Sequence[int] = ()) -> Value:
        return self.op("constant", value=value, dtype=dtype, shape=tuple(shape))

    def op(self, op: str, *operands: Value | float | int | bool, name: str | None = None,
           **attrs: Any) -> Value | tuple[Value, ...]:
        """Create one node; returns its result (or the tuple of results for multi-result ops)."""
        get_op(op)  # unknown op names fail here with a suggestion
        dtype = next((v.dtype for v in operands if isinstance(v, Value) and v.dtype is not DType.bool),
                     next((v.dtype for v in operands if isinstance(v, Value)), DType.f32))
        values = [v if isinstance(v, Value) else self.constant(v, dtype) for v in operands]
        node = self.graph.create_node(op, values, attrs, name=name, before=self.before, loc=self.loc)
        return node.results[0] if len(node.results) == 1 else node.results

    def output(self, *values: Value) -> Graph:
        self.graph.set_outputs(values)
        return self.graph

    def __getattr__(self, op: str):
        if op.startswith("_"):
            raise AttributeError(op)
        try:
            get_op(op)
        except ValueError as e:
            raise AttributeError(str(e)) from None

        def build(*operands, name: str | None = None, **attrs):
            return self.op(op, *operands, name=name, **attrs)

        build.__name__ = op
        return build
