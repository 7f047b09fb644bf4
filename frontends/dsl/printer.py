"""to_dsl: print a Graph as DSL source that parses back to the same graph.

One statement per node in graph order, infix for the arithmetic and comparison ops, a call with
keyword attributes for everything else, and only the attributes that differ from what the op
would infer by default. Value names are kept: a name that is not a plain DSL identifier (`0`, or a
keyword such as `def`) is written with a leading underscore (`_0`), which the graph's name
sanitizer strips again on the way back in. Parameter data is not printed: the text carries the
declaration only (weights come from a seed or an .npz at run time).
"""
from __future__ import annotations

import json
import math
import re

from tilegraph.ir.graph import Graph, Node, Value
from tilegraph.ir.ops import all_ops
from tilegraph.ir.types import DType, TensorType

from .lower import KEYWORDS

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "matmul": "@", "pow": "**",
          "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def to_dsl(graph: Graph) -> str:
    """DSL text for `graph`: `parse(to_dsl(g))` rebuilds g's inputs, params, nodes and outputs."""
    names = _Names()
    args = ", ".join(f"{names.of(v)}: {_type(v.type)}" for v in graph.inputs)
    results = [_type(v.type) for v in graph.outputs]
    result_text = results[0] if len(results) == 1 else f"({', '.join(results)})"
    function = names.ident(graph.name)
    if function in all_ops():  # a function may not take an op's name; `_relu` comes back as @relu
        function = "_" + function
    lines = [f"def {function}({args}) -> {result_text} {{"]
    for value in graph.params:
        lines.append(f"    param {names.of(value)}: {_type(value.type)}")
    for node in graph.nodes:
        targets = ", ".join(names.of(v) for v in node.results)
        lines.append(f"    {targets} = {_node_expr(node, names)}")
    lines.append(f"    return {', '.join(names.of(v) for v in graph.outputs)}")
    lines.append("}")
    return "\n".join(lines) + "\n"


class _Names:
    """DSL identifiers for graph values: the value's own name where possible, always unique."""

    def __init__(self) -> None:
        self.by_value: dict[Value, str] = {}
        self.taken: set[str] = set()

    @staticmethod
    def ident(name: str) -> str:
        if _IDENT.fullmatch(name) and name not in KEYWORDS and not name.startswith("_"):
            return name
        return "_" + name if _IDENT.fullmatch("_" + name) else "_" + re.sub(r"[^A-Za-z0-9_.]", "_", name)

    def of(self, value: Value) -> str:
        if value not in self.by_value:
            base = text = self.ident(value.name)
            suffix = 1
            while text in self.taken:
                text, suffix = f"{base}_{suffix}", suffix + 1
            self.taken.add(text)
            self.by_value[value] = text
        return self.by_value[value]


def _type(t: TensorType) -> str:
    return f"{t.dtype}[{', '.join(map(str, t.shape))}]"


def _node_expr(node: Node, names: _Names) -> str:
    operands = [names.of(v) for v in node.inputs]
    attrs = _needed_attrs(node)
    if not attrs and node.op in _INFIX and len(operands) == 2:
        return f"{operands[0]} {_INFIX[node.op]} {operands[1]}"
    if not attrs and node.op == "neg" and len(operands) == 1:
        return f"-{operands[0]}"
    args = operands + [f"{key}={format_attr(value)}" for key, value in attrs.items()]
    return f"{node.op}({', '.join(args)})"


def _needed_attrs(node: Node) -> dict:
    """The node's attributes minus those the op fills in to the same value when left out."""
    attrs = dict(node.attrs)
    try:
        opdef = node.opdef
    except Exception:
        return attrs
    for key in list(attrs):
        trial = {k: v for k, v in attrs.items() if k != key}
        try:
            same = opdef.normalize_attrs(node.input_types, trial) == node.attrs
        except Exception:
            same = False
        if same:
            attrs = trial
    return {k: v for k, v in attrs.items() if v is not None}


def format_attr(value) -> str:
    """An attribute value in DSL syntax: 3, -1.5, inf, nan, true, [1, 2], f32, "tanh"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, DType):
        return value.value
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    raise ValueError(f"no DSL syntax for attribute value {value!r}")
