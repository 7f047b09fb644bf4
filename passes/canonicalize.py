"""canonicalize: decompose composites, then fold constants, simplify algebra, CSE and DCE to a fixpoint.

Runs on a clone of `program.graph` and returns `Program.unfused(new graph)`: kernels and later
decisions are re-derived by the passes that follow (so running it after fusion drops the fusion).
Properties: "canonical" (always) and "decomposed" (when no composite op is left).
Running it twice gives the same text as running it once.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tilegraph.ir.builder import GraphBuilder
from tilegraph.ir.graph import Graph, Node, Value, ValueKind
from tilegraph.ir.index_values import index_only
from tilegraph.ir.ops.layout import concat_windows
from tilegraph.ir.ops.linalg import conv_padding_end
from tilegraph.ir.program import Program
from tilegraph.ir.types import DType, to_dtype

from .manager import register_property_check
from .registry import PassContext, register_pass
from .rows import flatten_rows

__all__ = ["CanonicalizeOptions", "canonicalize", "canonicalize_graph", "SIMPLIFICATIONS"]

MAX_ROUNDS = 64


@dataclass(frozen=True)
class CanonicalizeOptions:
    decompose: bool = True  # replace composite ops (softmax, layer_norm, ...) by structured ops
    fold: bool = True  # evaluate nodes whose operands are all constants or params with data
    fold_limit: int = 65536  # largest tensor (elements) folding reads or creates
    simplify: bool = True  # x*1, x+0, double transposes, reshape chains, no-op casts/reshapes, zero pads into convs,
    # head splits before slices, where() on a uniform known condition
    cse: bool = True  # merge nodes with the same op, operands and attributes
    private_index_values: bool = True  # each reader its own copy of a value made of constants and indices alone
    flatten_rows: bool = True  # matmuls over [*lead, K] rows as one [rows, K] matmul, row-wise ops after it too


# canonicalize never creates a composite op, so a decomposed graph stays decomposed; kernels and
# every decision are re-derived from scratch.
@register_pass("canonicalize", CanonicalizeOptions, ensures={"canonical"}, preserves={"decomposed"})
def canonicalize(program: Program, options: CanonicalizeOptions, ctx: PassContext) -> Program:
    """Decompose composites, fold constants, simplify, CSE, DCE (to a fixpoint)."""
    graph = program.graph.clone()
    counts = canonicalize_graph(graph, options)
    stats = ctx.statistics.setdefault("canonicalize", {})
    for key, value in counts.items():
        stats[key] = stats.get(key, 0) + value
    if program.kernels != Program.unfused(program.graph).kernels:
        ctx.note(f"canonicalize: re-derived kernels ({len(program.kernels)} kernels dropped; run fuse again)")
    properties = {"canonical"}
    if not any(node.opdef.is_composite for node in graph.nodes):
        properties.add("decomposed")
    return replace(Program.unfused(graph), properties=frozenset(properties))


def _dead_nodes(program: Program):
    """Property "canonical": no node whose results nobody reads."""
    outputs = set(program.graph.outputs)
    for node in program.graph.nodes:
        if not any(v.users or v in outputs for v in node.results):
            yield f"%{node.name} ({node.op}) is dead code"


def _composites(program: Program):
    """Property "decomposed": no composite op is left."""
    for node in program.graph.nodes:
        if node.opdef.is_composite:
            yield f"%{node.name} is a composite ({node.op})"


register_property_check("canonical", _dead_nodes)
register_property_check("decomposed", _composites)


def canonicalize_graph(graph: Graph, options: CanonicalizeOptions = CanonicalizeOptions()) -> dict[str, int]:
    """Canonicalize `graph` in place; returns how many rewrites of each kind were made."""
    counts = {"decomposed": 0, "folded": 0, "simplified": 0, "flattened": 0, "merged": 0, "erased": 0}
    counts["erased"] += eliminate_dead_code(graph)
    if options.decompose:
        counts["decomposed"] += decompose(graph)
    for _ in range(MAX_ROUNDS):
        changed = 0
        if options.fold:
            changed += _add(counts, "folded", fold_constants(graph, options.fold_limit))
        if options.simplify:
            changed += _add(counts, "simplified", simplify(graph))
        if options.flatten_rows:
            changed += _add(counts, "flattened", flatten_rows(graph))
        if options.cse:
            changed += _add(counts, "merged", eliminate_common_subexpressions(graph))
        changed += _add(counts, "erased", eliminate_dead_code(graph))
        if not changed:
            break
    if options.private_index_values:  # after CSE, which would merge the copies again
        counts["copied"] = private_index_values(graph)
    return counts


def _add(counts: dict[str, int], key: str, value: int) -> int:
    counts[key] += value
    return value


# ----- dead code ---------------------------------------------------------------------------------
def eliminate_dead_code(graph: Graph) -> int:
    """Erase unused nodes and unused params that carry data (data-less params are run-time arguments)."""
    erased = graph.dead_code_elimination()
    outputs = set(graph.outputs)
    for param in list(graph.params):
        if param.data is not None and not param.users and param not in outputs:
            graph.remove_param(param)
            erased += 1
    return erased


# ----- values of constants and indices -----------------------------------------------------------
def private_index_values(graph: Graph) -> int:
    """Give each node reading a value computed from constants and loop indices alone (`index_only`: a
    scale, a -inf fill, a causal mask) its own copy of the nodes computing it. CSE shares such values
    between a model's layers, and a shared one became a kernel of its own (a one-element kernel for a
    scale) whose result the layers read from memory; a private copy fuses into its reader, computed in
    registers. Returns the nodes added."""
    memo: dict[Value, bool] = {}
    outputs = set(graph.outputs)
    added = 0
    for node in reversed(list(graph.nodes)):  # readers first: a copy's own operands are split in turn
        if len(node.results) != 1 or not index_only(node.result, memo):
            continue
        value = node.result
        if len(value.users) < 2 and value not in outputs:
            continue
        position = {n: i for i, n in enumerate(graph.nodes)}  # readers in graph order: names are deterministic
        readers = sorted(value.users, key=position.__getitem__)
        for reader in readers if value in outputs else readers[1:]:
            # named after the value, or its op: names CSE frees when it merges the copies again (a second
            # canonicalize) are taken again in the same order, so canonicalize stays idempotent
            hint = value.name if value.name[:1].isalpha() else node.op
            copy = graph.create_node(node.op, node.inputs, node.attrs, name=hint, result_types=node.result_types,
                                     before=reader, loc=node.loc)
            for i, operand in enumerate(reader.inputs):
                if operand is value:
                    graph.set_input(reader, i, copy.result)
            added += 1
    return added


# ----- composites --------------------------------------------------------------------------------
def decompose(graph: Graph) -> int:
    """Replace every composite node by its decomposition (repeatedly: attention yields a softmax)."""
    count = 0
    while True:
        composites = [node for node in graph.nodes if node.opdef.is_composite]
        if not composites:
            return count
        for node in composites:
            builder = GraphBuilder(graph, before=node, loc=node.loc)
            results = node.opdef.decompose_fn(builder, list(node.inputs), dict(node.attrs))
            _replace(graph, node, list(results))
            count += 1


def _replace(graph: Graph, node: Node, values: list[Value]) -> None:
    """Make readers of `node`'s results read `values` instead, and erase the node."""
    if len(values) != len(node.results):
        raise ValueError(f"{node!r}: replacement has {len(values)} values for {len(node.results)} results")
    for old, new in zip(node.results, values):
        graph.replace_all_uses(old, new)
    graph.erase_node(node)


# ----- constant folding --------------------------------------------------------------------------
def _known(value: Value) -> np.ndarray | None:
    """The value's contents when they are known at compile time (a constant op or a param with data)."""
    if value.kind is ValueKind.PARAM and value.data is not None:
        return to_dtype(value.data, value.dtype)
    producer = value.producer
    if producer is not None and producer.op == "constant":
        return np.full(value.shape, producer.attrs["value"], dtype=value.dtype.numpy)
    return None


def _is_uniform(array: np.ndarray) -> bool:
    if array.size == 0:
        return False
    if array.flat[0].tobytes() != array.flat[-1].tobytes():  # most folded weights: decided at once
        return False
    first = np.full_like(array, array.flat[0])
    return array.tobytes() == first.tobytes()  # bitwise: keeps -0.0 apart from 0.0, NaNs alike


def _scalar(array: np.ndarray, dtype: DType) -> Any:
    item = array.flat[0]
    return bool(item) if dtype is DType.bool else int(item) if dtype.is_int else float(item)


def _relayout_of_a_parameter(node: Node) -> bool:
    """A transpose that is its parameter's only reader: folding it stores the parameter in the order
    its reader wants (nn.Linear's [out, in] weight as [in, out]) and grows nothing, at any size."""
    (x, *_) = node.inputs
    return node.op == "transpose" and x.kind is ValueKind.PARAM and x.data is not None and len(x.users) == 1


def fold_constants(graph: Graph, limit: int) -> int:
    """Evaluate nodes whose operands are all known; uniform results become `constant` nodes, others
    new params carrying the data. Nodes without operands (constant, iota) are left as they are, and
    tensors over `limit` elements only when the node just reorders a parameter."""
    folded = 0
    for node in graph.nodes:
        if node.graph is None or not node.inputs or node.opdef.is_composite:
            continue
        relayout = _relayout_of_a_parameter(node)
        if not relayout and any(v.type.numel > limit for v in node.inputs + node.results):
            continue
        arrays = [_known(v) for v in node.inputs]
        if any(a is None for a in arrays):
            continue
        try:
            outs = node.opdef.reference(arrays, node.attrs, node.result_types)
        except Exception:  # e.g. a gather index out of range: leave it for run time to report
            continue
        values = []
        for result, array in zip(node.results, outs):
            if _is_uniform(array):
                attrs = {"value": _scalar(array, result.dtype), "shape": result.shape, "dtype": result.dtype}
                values.append(graph.create_node("constant", (), attrs, before=node, loc=node.loc).result)
            else:
                # a relayout keeps numpy's view: a backend copies the data into its own order once, when
                # it binds the parameter, instead of a copy here and another there
                name = f"{node.inputs[0].name}_t" if relayout else "folded"
                values.append(graph.add_param(name, result.type, array if relayout else np.array(array)))
        _replace(graph, node, values)
        folded += 1
    return folded


# ----- algebraic simplification ------------------------------------------------------------------
def _constant_value(value: Value) -> Any:
    producer = value.producer
    return producer.attrs["value"] if producer is not None and producer.op == "constant" else None


def _identity_operand(node: Node, unit: float, positions: tuple[int, ...]) -> Value | None:
    """For op(a, b): the other operand when the one at a position in `positions` is the constant
    `unit`, and only when the result type equals that operand's (broadcasting may change the shape)."""
    for position in positions:
        other = node.inputs[1 - position]
        if _constant_value(node.inputs[position]) == unit and other.type == node.result.type:
            return other
    return None


def _mul_one(graph: Graph, node: Node) -> Value | None:
    return _identity_operand(node, 1, (0, 1))


def _mul(graph: Graph, node: Node) -> Value | None:
    """x * 1 is x; GELU's tanh approximation written out ends in a multiply and is one op."""
    return _mul_one(graph, node) or _gelu_tanh(graph, node)


def _by_constant(value: Value, op: str, constant: float) -> Value | None:
    """x where `value` is op(x, c) or op(c, x) (op commutative) with c close to `constant`, else None."""
    node = value.producer
    if node is None or node.op != op:
        return None
    for position in (0, 1):
        c = _constant_value(node.inputs[position])
        if c is not None and not isinstance(c, bool) and math.isclose(c, constant, rel_tol=1e-6):
            return node.inputs[1 - position]
    return None


def _gelu_tanh(graph: Graph, node: Node) -> Value | None:
    """GELU's tanh approximation as GPT-2 writes it (its `gelu_new`), 0.5 * x * (1 + tanh(sqrt(2 / pi) *
    (x + 0.044715 * x ** 3))), nine ops: `gelu(x, approximate="tanh")`, which every backend computes as one op
    and a library call applies in one pass. The same formula, in any order of the commutative operands."""
    for half, rest in (node.inputs, node.inputs[::-1]):
        x = _by_constant(half, "mul", 0.5)
        tanh = _by_constant(rest, "add", 1.0)
        if x is None or tanh is None or tanh.producer is None or tanh.producer.op != "tanh":
            continue
        inner = _by_constant(tanh.producer.inputs[0], "mul", math.sqrt(2 / math.pi))
        total = inner.producer if inner is not None else None
        if total is None or total.op != "add" or x not in total.inputs:
            continue
        cube = _by_constant(total.inputs[1 - total.inputs.index(x)], "mul", 0.044715)
        power = cube.producer if cube is not None else None
        if (power is None or power.op != "pow" or power.inputs[0] is not x
                or _constant_value(power.inputs[1]) not in (3, 3.0) or x.type != node.result.type):
            continue
        return _build(graph, node, "gelu", x, approximate="tanh")
    return None


def _add_zero(graph: Graph, node: Node) -> Value | None:
    return _identity_operand(node, 0, (0, 1))


def _sub_zero(graph: Graph, node: Node) -> Value | None:
    return _identity_operand(node, 0, (1,))


def _div_one(graph: Graph, node: Node) -> Value | None:
    return _identity_operand(node, 1, (1,))


def _same_type(graph: Graph, node: Node) -> Value | None:
    """cast to the same dtype, reshape / broadcast_to to the same shape: the operand itself."""
    (x,) = node.inputs
    return x if x.type == node.result.type else None


def _transpose(graph: Graph, node: Node) -> Value | None:
    (x,) = node.inputs
    perm = node.attrs["perm"]
    inner = x.producer
    if inner is not None and inner.op == "transpose":
        source = inner.inputs[0]
        combined = tuple(inner.attrs["perm"][p] for p in perm)
        if combined == tuple(range(len(combined))):
            return source
        return _build(graph, node, "transpose", source, perm=combined)
    if inner is not None and inner.op == "reshape" and len(x.users) == 1:
        return _transpose_before_reshape(graph, node, inner)
    return x if perm == tuple(range(len(perm))) else None


def _reshape_groups(source: tuple[int, ...], target: tuple[int, ...]) -> list[tuple[list[int], list[int]]] | None:
    """A row-major reshape as groups of consecutive axes (source axes, target axes) of equal sizes, each the
    finest such; None when the shapes hold no elements."""
    if not source or not target or 0 in source:
        return None
    groups, i, j = [], 0, 0
    while i < len(source) and j < len(target):
        a, b, ins, outs = source[i], target[j], [i], [j]
        i, j = i + 1, j + 1
        while a != b:
            if a < b and i < len(source):
                a, i = a * source[i], i + 1
                ins.append(i - 1)
            elif b < a and j < len(target):
                b, j = b * target[j], j + 1
                outs.append(j - 1)
            else:
                return None
        groups.append((ins, outs))
    if i < len(source) or j < len(target):  # trailing axes of one element
        groups[-1] = (groups[-1][0] + list(range(i, len(source))), groups[-1][1] + list(range(j, len(target))))
    return groups


def _transpose_before_reshape(graph: Graph, node: Node, reshape: Node) -> Value | None:
    """transpose(reshape(x)) where the reshape only merges axes (the heads of grouped-query attention's
    [b, g, r, l, d] result into [b, g * r, l, d]): reshape(transpose(x)), the merged axes moved together, so that
    the transpose reads x through bare loops and the merge comes last (the attention kernel writes through it)."""
    x = reshape.inputs[0]
    groups = _reshape_groups(x.type.shape, reshape.result.type.shape)
    if groups is None or len(groups) < 2 or any(len(outs) != 1 for _, outs in groups):
        return None  # (a reshape that splits an axis is a head split: transposed after it, it moves q, k, v)
    merged_from = {outs[0]: ins for ins, outs in groups}  # each axis of the reshape's result: the axes it merges
    source_perm = tuple(axis for merged in node.attrs["perm"] for axis in merged_from[merged])
    if source_perm == tuple(range(len(source_perm))):
        return None
    moved = _build(graph, node, "transpose", x, perm=source_perm)
    return _build(graph, node, "reshape", moved, shape=node.result.type.shape)


def _reshape(graph: Graph, node: Node) -> Value | None:
    (x,) = node.inputs
    if x.type == node.result.type:
        return x
    inner = x.producer
    if inner is not None and inner.op == "reshape":
        source = inner.inputs[0]
        if source.type == node.result.type:
            return source
        return _build(graph, node, "reshape", source, shape=node.attrs["shape"])
    if inner is not None and inner.op == "slice":
        return _split_before_slice(graph, node, inner)
    if inner is not None and inner.op == "transpose" and len(x.users) == 1:
        return _split_before_transpose(graph, node, inner)
    return None


def _split_before_transpose(graph: Graph, node: Node, transpose: Node) -> Value | None:
    """reshape(transpose(x)) where the reshape only splits axes (grouped-query attention's q, [b, h, l, d] split
    into [b, g, r, l, d] after its head split): transpose(reshape(x)), x's axes split first, so that each copy
    reads the one before through bare loops and they join the kernel that reads them. The mirror of
    `_transpose_before_reshape`: splits first, then the transpose, then merges."""
    x, perm = transpose.inputs[0], transpose.attrs["perm"]
    groups = _reshape_groups(transpose.result.type.shape, node.result.type.shape)
    if groups is None or any(len(ins) != 1 for ins, _ in groups) or all(len(outs) == 1 for _, outs in groups):
        return None
    parts = {perm[ins[0]]: [node.result.type.shape[o] for o in outs] for ins, outs in groups}
    first, shape = {}, []
    for axis in range(x.type.rank):
        first[axis] = len(shape)
        shape += parts[axis]
    order = tuple(first[perm[ins[0]]] + n for ins, outs in groups for n in range(len(outs)))
    split = _build(graph, node, "reshape", x, shape=tuple(shape))
    return _build(graph, node, "transpose", split, perm=order)


def _split_axis(shape: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, tuple[int, ...]] | None:
    """(axis, its parts) when `target` is `shape` with one axis split into several, else None."""
    extra = len(target) - len(shape)
    if extra < 1:
        return None
    for axis in range(len(shape)):
        parts = target[axis:axis + extra + 1]
        if target[:axis] == shape[:axis] and target[axis + extra + 1:] == shape[axis + 1:] \
                and math.prod(parts) == shape[axis]:
            return axis, parts
    return None


def _split_before_slice(graph: Graph, node: Node, sliced: Node) -> Value | None:
    """reshape(slice(x)) that splits one axis into parts, the slice taking whole rows of the later parts
    (a packed qkv [b, l, 3 * h * d] sliced into q, k, v, then split into heads [b, l, h, d]): the slice of
    the split x, slice(reshape(x)). Every node then reads x through an affine map (the slice's offset stays
    on the outer part), so the head split can join the kernel that reads it."""
    x, attrs = sliced.inputs[0], sliced.attrs
    found = _split_axis(sliced.result.type.shape, node.result.type.shape)
    if found is None:
        return None
    axis, parts = found
    row = math.prod(parts[1:])
    start, stop, step = attrs["start"][axis], attrs["stop"][axis], attrs["step"][axis]
    if step != 1 or start % row or x.type.shape[axis] % row:
        return None
    shape = x.type.shape[:axis] + (x.type.shape[axis] // row,) + parts[1:] + x.type.shape[axis + 1:]
    rest = len(parts) - 1

    def split(values: tuple[int, ...], at: int, inner: tuple[int, ...]) -> tuple[int, ...]:
        return values[:axis] + (at,) + inner + values[axis + 1:]

    split_x = _build(graph, node, "reshape", x, shape=shape)
    return _build(graph, node, "slice", split_x, start=split(attrs["start"], start // row, (0,) * rest),
                  stop=split(attrs["stop"], start // row + parts[0], parts[1:]),
                  step=split(attrs["step"], 1, (1,) * rest))


def _broadcast_to(graph: Graph, node: Node) -> Value | None:
    (x,) = node.inputs
    if x.type == node.result.type:
        return x
    inner = x.producer
    if inner is not None and inner.op == "broadcast_to":
        return _build(graph, node, "broadcast_to", inner.inputs[0], shape=node.attrs["shape"])
    return None


def _conv2d(graph: Graph, node: Node) -> Value | None:
    """A convolution of a zero-padded input (`concat` of zero constants around it along H or W, as
    torch's `F.pad` is converted): the convolution of the input itself, the zeros moved into its
    `padding` / `padding_end`. The padded copy is never made (MobileNetV2's "same" padding: 36)."""
    x = node.inputs[0]
    concat = x.producer
    if concat is None or concat.op != "concat" or concat.attrs["axis"] % 4 not in (2, 3) or concat.attrs["starts"]:
        return None
    pieces = list(concat.inputs)
    zero = [_constant_value(v) == 0 and v.type.dtype == x.type.dtype for v in pieces]
    core = [i for i, z in enumerate(zero) if not z]
    if len(core) != 1:
        return None
    axis = concat.attrs["axis"] % 4 - 2
    before = sum(v.type.shape[axis + 2] for v in pieces[:core[0]])
    after = sum(v.type.shape[axis + 2] for v in pieces[core[0] + 1:])
    begin, end = list(node.attrs["padding"]), list(conv_padding_end(node.attrs))
    begin[axis] += before
    end[axis] += after
    attrs = {**node.attrs, "padding": tuple(begin), "padding_end": None if begin == end else tuple(end)}
    return _build(graph, node, "conv2d", pieces[core[0]], node.inputs[1], **attrs)


def _concat(graph: Graph, node: Node) -> Value | None:
    """A concat reads through what only moves or negates its operands, so no kernel makes them: an operand
    sliced along the axis alone is read in place (its window moves into `starts` / `sizes`), and negated
    operands are taken as they are, the concat then multiplied by -1 over their windows (an index value,
    which fuses with it; x * -1 is -x, signed zeros included). Llama's rotary embedding, concat(-q2, q1),
    made q1 and -q2 in two kernels of their own."""
    axis = node.attrs["axis"]
    operands, windows = list(node.inputs), list(concat_windows(node.inputs, node.attrs))
    negated = [False] * len(operands)
    for j, value in enumerate(operands):
        producer = value.producer
        if producer is not None and producer.op == "neg":
            operands[j], negated[j], producer = producer.inputs[0], True, producer.inputs[0].producer
        if producer is not None and producer.op == "slice" and _slices_axis_alone(producer, axis):
            operands[j] = producer.inputs[0]
            windows[j] = (producer.attrs["start"][axis] + windows[j][0], windows[j][1])
    if operands == list(node.inputs):
        return None
    joined = _build(graph, node, "concat", *operands, axis=axis, starts=tuple(w[0] for w in windows),
                    sizes=tuple(w[1] for w in windows))
    if not any(negated):
        return joined
    return _build(graph, node, "mul", joined, _window_signs(graph, node, windows, negated))


def _slices_axis_alone(node: Node, axis: int) -> bool:
    """A unit-step slice taking every index on every axis but `axis`."""
    attrs, shape = node.attrs, node.inputs[0].type.shape
    return all(step == 1 for step in attrs["step"]) and all(
        (a, b) == (0, n) for d, (a, b, n) in enumerate(zip(attrs["start"], attrs["stop"], shape)) if d != axis)


def _window_signs(graph: Graph, node: Node, windows, negated) -> Value:
    """-1 along the concat's axis over the negated operands' windows, 1 elsewhere, shaped to broadcast
    against its result: where(i < end_0, s_0, where(i < end_1, s_1, ...)) over an iota."""
    axis, shape, dtype = node.attrs["axis"], node.result.type.shape, node.result.type.dtype
    index = _build(graph, node, "iota", shape=(shape[axis],), axis=0, dtype=DType.i64)
    ends = [sum(size for _, size in windows[:j + 1]) for j in range(len(windows))]
    signs = _build(graph, node, "constant", value=-1.0 if negated[-1] else 1.0, dtype=dtype, shape=())
    for end, minus in zip(reversed(ends[:-1]), reversed(negated[:-1])):
        below = _build(graph, node, "lt", index, _build(graph, node, "constant", value=end, dtype=DType.i64, shape=()))
        sign = _build(graph, node, "constant", value=-1.0 if minus else 1.0, dtype=dtype, shape=())
        signs = _build(graph, node, "where", below, sign, signs)
    if signs.type.shape != (shape[axis],):
        signs = _build(graph, node, "broadcast_to", signs, shape=(shape[axis],))
    trailing = len(shape) - axis - 1
    return _build(graph, node, "reshape", signs, shape=(shape[axis],) + (1,) * trailing) if trailing else signs


def _where(graph: Graph, node: Node) -> Value | None:
    """where(c, x, y) whose condition is known and the same everywhere (an all-true attention mask that a
    trace kept as data): x or y, broadcast to the result's shape. ViT's attention kernel loaded such a mask
    at every key/value step."""
    cond, x, y = node.inputs
    while cond.producer is not None and cond.producer.op in ("broadcast_to", "reshape"):  # the same values
        cond = cond.producer.inputs[0]
    known = _known(cond)
    if known is None or not _is_uniform(known):
        return None
    pick = x if known.flat[0] else y
    if pick.type.shape == node.result.type.shape:
        return pick
    return _build(graph, node, "broadcast_to", pick, shape=node.result.type.shape)


def _build(graph: Graph, anchor: Node, op: str, *operands: Value, **attrs: Any) -> Value:
    return graph.create_node(op, operands, attrs, before=anchor, loc=anchor.loc).result


# op -> rule(graph, node) returning the value that replaces the node's result, or None
SIMPLIFICATIONS: dict[str, Callable[[Graph, Node], Value | None]] = {
    "mul": _mul,
    "add": _add_zero,
    "sub": _sub_zero,
    "div": _div_one,
    "cast": _same_type,
    "transpose": _transpose,
    "reshape": _reshape,
    "broadcast_to": _broadcast_to,
    "conv2d": _conv2d,
    "where": _where,
    "concat": _concat,
}


def simplify(graph: Graph) -> int:
    """Apply SIMPLIFICATIONS once over the graph, in order; returns how many nodes were replaced."""
    count = 0
    for node in graph.nodes:
        rule = SIMPLIFICATIONS.get(node.op)
        if rule is None or node.graph is None:
            continue
        new = rule(graph, node)
        if new is not None and new is not node.result:
            if new.type != node.result.type:
                raise TypeError(f"simplifying {node!r} gave {new.type}, not {node.result.type}")
            _replace(graph, node, [new])
            count += 1
    return count


# ----- common subexpressions ---------------------------------------------------------------------
def _freeze(value: Any) -> Any:
    """A hashable key for an attribute value that tells 0.0 from -0.0, 1 from True, and NaN equals NaN."""
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(_freeze(v) for v in value))
    if isinstance(value, float):
        return ("float", repr(value))
    return (type(value).__name__, value)


def eliminate_common_subexpressions(graph: Graph) -> int:
    """Merge each node into an earlier one with the same op, operands, attributes and result types."""
    seen: dict[tuple, Node] = {}
    merged = 0
    for node in graph.nodes:
        key = (node.op, tuple(id(v) for v in node.inputs),
               tuple(sorted((k, _freeze(v)) for k, v in node.attrs.items())), node.result_types)
        first = seen.get(key)
        if first is None:
            seen[key] = node
            continue
        _replace(graph, node, list(first.results))
        merged += 1
    return merged
