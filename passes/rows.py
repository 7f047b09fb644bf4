"""Row flattening (a canonicalize rewrite): a matmul over rows [*lead, K] by a [K, N] weight (a linear on
[batch, tokens, K]) becomes one [rows, K] matmul between two reshapes, and the reshape back to [*lead, ...]
sinks through the row-wise ops after it (elementwise ops, reductions over the trailing axes), so the chain
of matmuls and epilogues between a model's first linear and its last runs over one row axis. Only lead
axes wider than 1 count: [1, tokens] is one row axis already, and is left as it is.

Why: a GPU kernel tiles one loop per dot side, so rows split as [batch, tokens] were tiled per image: ViT's
197 tokens ran as 256-row blocks, 23% of the tensor-core work on padding, where 32 x 197 = 6304 rows in
128-row tiles pad 1.5%. A reshape that only splits or merges leading axes moves no data between kernels;
it stops where an op needs the split axes (a head split reads the flat rows through an affine map).
"""
from __future__ import annotations

import math

from tilegraph.ir.graph import Graph, Node, Value
from tilegraph.ir.ops.registry import ELEMENTWISE

REDUCTIONS = ("sum", "max", "min", "mean")


def split_rows(value: Value) -> tuple[Value, tuple[int, ...]] | None:
    """(y, lead) when `value` is reshape(y) splitting y's first axis into `lead` (two axes or more wider than
    1), the other axes unchanged; else None."""
    node = value.producer
    if node is None or node.op != "reshape" or not node.inputs[0].type.shape:
        return None
    y = node.inputs[0]
    source, shape = y.type.shape, value.type.shape
    split = len(shape) - len(source) + 1
    if shape[split:] != source[1:] or math.prod(shape[:split]) != source[0] or _rows(shape[:split]) < 2:
        return None
    return y, shape[:split]


def _rows(lead: tuple[int, ...]) -> int:
    """How many of the lead axes are wider than 1: flattening one of them gains nothing."""
    return sum(n > 1 for n in lead)


def flatten_rows(graph: Graph) -> int:
    """One sweep of the rewrites over the graph; returns how many nodes were replaced."""
    count = 0
    feeding = _feeding_matmuls(graph)
    for node in graph.nodes:
        if node.graph is None:
            continue
        if _row_matmul(node) and (_users_take_rows(node, feeding) or _last_of_flat_rows(graph, node, feeding)):
            new = _matmul(graph, node)
        elif node.op in REDUCTIONS and node.result in feeding:
            new = _reduction(graph, node)
        elif node.opdef.category == ELEMENTWISE and len(node.results) == 1 and node.result in feeding:
            new = _elementwise(graph, node)
        else:
            new = None
        if new is not None:
            graph.replace_all_uses(node.result, new)
            graph.erase_node(node)
            count += 1
    return count


def _row_matmul(node: Node) -> bool:
    return node.op == "matmul" and node.inputs[1].type.rank == 2


def _last_of_flat_rows(graph: Graph, node: Node, feeding: set[Value]) -> bool:
    """The last matmul, reading rows flattened before it, runs flat too (read as split rows, it fused with a
    final layer norm into one kernel without tl.dot), unless its result is an output (the reshape back
    would copy it)."""
    return split_rows(node.inputs[0]) is not None and node.result not in feeding and node.result not in graph.outputs


def _feeding_matmuls(graph: Graph) -> set[Value]:
    """Values from which some path of users reaches a matmul by a 2-D weight. Flattening stays between
    matmuls: after the last one, the reshape back to the output's shape would be a copy (a language
    model's logits), where a tail left as it is reads flat rows through an affine map."""
    feeding: set[Value] = set()
    for node in reversed(graph.nodes):
        if any(_row_matmul(user) or not feeding.isdisjoint(user.results) for v in node.results for user in v.users):
            feeding.update(node.results)
    return feeding


def _computed(value: Value) -> bool:
    """Whether `value` comes out of a kernel of its own, which writes it as flat rows as cheaply as split
    ones: a structured op that is no elementwise op (a reduction, a matmul), an elementwise op of such a
    value, or one a reduction also reads (ViT's embeddings plus positions, which its first layer norm's
    kernel writes). Read as rows, a graph input (or a concat's, a gather's result) would be copied by a
    kernel of its own, and an elementwise op of inputs alone (fused into the matmul that reads it) would
    become one."""
    node = value.producer
    if node is not None and node.op == "reshape":  # two reshapes are one (canonicalize folds them)
        return _computed(node.inputs[0])
    if node is None or not node.opdef.is_structured:
        return False
    return (node.opdef.category != ELEMENTWISE or any(_computed(v) for v in node.inputs)
            or any(user.op in REDUCTIONS for user in value.users))  # written by a reduction's kernel (a norm's)


def _build(graph: Graph, anchor: Node, op: str, *operands: Value, **attrs) -> Value:
    return graph.create_node(op, operands, attrs, before=anchor, loc=anchor.loc).result


def _reshape(graph: Graph, anchor: Node, value: Value, shape: tuple[int, ...]) -> Value:
    return value if value.type.shape == shape else _build(graph, anchor, "reshape", value, shape=shape)


def _matmul(graph: Graph, node: Node) -> Value | None:
    """x [*lead, K] @ w [K, N], two lead axes or more wider than 1 (batch and tokens; [1, tokens] is one
    row axis already): reshape(reshape(x, [rows, K]) @ w, [*lead, N])."""
    x, w = node.inputs
    if _rows(x.type.shape[:-1]) < 2 or not (split_rows(x) or _computed(x)):
        return None
    rows = _reshape(graph, node, x, (math.prod(x.type.shape[:-1]), x.type.shape[-1]))
    return _reshape(graph, node, _build(graph, node, "matmul", rows, w), node.result.type.shape)


def _elementwise(graph: Graph, node: Node) -> Value | None:
    """op(reshape(y), z...) over [*lead, *rest]: reshape(op(y, z'...)), each other operand z' read as rows
    (its own flat rows, a reshape of it, or as it is where it broadcasts over the lead axes); None when an
    operand broadcasts over some lead axes only (a position embedding [1, tokens, d])."""
    shape = node.result.type.shape
    found = next((s for v in node.inputs if (s := split_rows(v)) is not None and v.type.shape == shape), None)
    shapes = _row_shapes(node, found[1], set()) if found is not None else None
    if shapes is None:  # decided before any node is built: a refusal leaves the graph as it was
        return None
    operands = [s if isinstance(s, Value) else _reshape(graph, node, v, s) for v, s in zip(node.inputs, shapes)]
    flat = graph.create_node(node.op, operands, dict(node.attrs), before=node, loc=node.loc).result
    return _reshape(graph, node, flat, shape)


def _row_shapes(node: Node, lead: tuple[int, ...], rows: set[Value]) -> list[tuple[int, ...] | Value] | None:
    """Per operand of an elementwise `node` over [*lead, *rest]: its flat rows (a split reshape's source, or
    itself if in `rows`, values about to be flattened), or the shape to read it at; None if one cannot be."""
    shape = node.result.type.shape
    if shape[:len(lead)] != lead:
        return None
    rest = shape[len(lead):]
    shapes: list[tuple[int, ...] | Value] = []
    for value in node.inputs:
        split = split_rows(value)
        padded = (1,) * (len(shape) - value.type.rank) + value.type.shape
        if split is not None and split[1] == lead and value.type.rank == len(shape):
            shapes.append(split[0])
        elif value in rows:
            shapes.append(value)
        elif all(n == 1 for n in padded[:len(lead)]):
            shapes.append(padded[len(lead):] if value.type.rank > len(rest) else value.type.shape)
        elif padded[:len(lead)] == lead and value.type.rank == len(shape) and _computed(value):
            shapes.append((math.prod(lead),) + padded[len(lead):])
        else:
            return None
    return shapes


def _users_take_rows(node: Node, feeding: set[Value]) -> bool:
    """Whether a matmul's result would be read as flat rows all the way to the next matmuls: by matmuls,
    reshapes, and row-wise ops between matmuls that flatten too. One that stays split (an add of a position
    embedding [1, tokens, d]) would read split rows of a flat value inside the matmul's epilogue, which
    would then split off into a kernel of its own."""
    value = node.result
    if value not in feeding:
        return False
    lead = value.type.shape[:-1]
    seen: dict[Value, bool] = {}

    def takes(value: Value) -> bool:
        if value not in seen:  # a tail after the last matmul reads split rows as its kernel starts
            seen[value] = True  # a value met again on another path is judged once
            seen[value] = value not in feeding or all(reads(user, value) for user in value.users)
        return seen[value]

    def reads(user: Node, value: Value) -> bool:
        if _row_matmul(user) and user.inputs[0] is value or user.op == "reshape":
            return True
        if user.result not in feeding:
            return True
        if user.op in REDUCTIONS:
            axes = user.attrs["axes"]
            return bool(axes) and min(axes) >= len(lead) and takes(user.result)
        return (user.opdef.category == ELEMENTWISE and len(user.results) == 1
                and _row_shapes(user, lead, set(seen)) is not None and takes(user.result))

    return takes(value)


def _reduction(graph: Graph, node: Node) -> Value | None:
    """A reduction of reshape(y) over trailing axes only: reshape of the same reduction of y."""
    (x,) = node.inputs
    split = split_rows(x)
    if split is None:
        return None
    y, lead = split
    axes = node.attrs["axes"]
    if not axes or min(axes) < len(lead):
        return None
    flat = _build(graph, node, node.op, y, axes=tuple(a - len(lead) + 1 for a in axes),
                  keepdims=node.attrs["keepdims"])
    return _reshape(graph, node, flat, node.result.type.shape)


__all__ = ["flatten_rows", "split_rows"]
