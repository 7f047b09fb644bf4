"""Recognising decomposed attention and giving it a FlashAttention loop nest.

The pattern, as canonicalize leaves `attention` (or as a user writes it):

    kt = transpose(k)            (optional; any producer of the right operand works)
    s0 = matmul(q, kt)           loops (batch.., i, j, d), d reduced
    s  = f(s0, side operands)    a chain of elementwise ops: scale, mask (where/add), ...
    m  = max(s, last axis, keepdims);  e = exp(s - m);  z = sum(e, last axis, keepdims)
    p  = div(e, z)
    o  = matmul(p, v)            loops (batch.., i, e, j), j reduced

Side operands are kernel inputs or index-only subgraphs (iota, constant, comparisons: a causal
mask), which join the kernel; such nodes that other kernels read too stay outside, read as inputs
(canonicalize gives each reader its own copy, unless `private_index_values` is off). Copies join it
too (`MOVES`: transpose, reshape, slice, broadcast_to), where they only move q, k or v into place (a
head split: q = transpose(reshape(slice(qkv)))) or move `o` out of it (a head merge:
reshape(transpose(o))): the kernel then reads and writes the tensors on either side through the
copies' maps, and no copy is ever made. Every value inside except `o` must be used only inside the
pattern, so the L x S score matrix never has to exist. The kernel's loops are batch.. and i (parallel, the
query tiles), j (the key/value loop: a *reduction* carried by the online softmax recurrence
m' = max(m, rowmax(s)), l' = l*exp(m - m') + rowsum(exp(s - m')), acc' = acc*exp(m - m') +
exp(s - m') @ v), and d and e (full: a tile holds whole rows of q, k, v). A tile's working set is
then O(tile_i * d + tile_j * (d + e) + tile_i * tile_j), independent of the sequence lengths.
"""
from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

from tilegraph.ir.domain import (FULL, KernelDomain, Misaligned, group_structure, kernel_domain, structured_space,
                                 with_kinds)
from tilegraph.ir.graph import Node, Value
from tilegraph.ir.index_values import index_only
from tilegraph.ir.ops.layout import MOVES
from tilegraph.ir.ops.registry import ELEMENTWISE
from tilegraph.ir.structured import PARALLEL, REDUCTION
from tilegraph.ir.templates import KernelTemplate, register_template

MATMULS = ("matmul", "batch_matmul")
MAX_CHAIN = 8


@dataclass(frozen=True)
class AttentionMatch:
    """The nodes of one attention pattern (graph order) and the role of each core node."""

    nodes: tuple[Node, ...]
    qk: Node
    score: Value  # s, the input of max and sub
    max: Node
    sub: Node
    exp: Node
    sum: Node
    div: Node
    pv: Node
    epilogue: tuple[Node, ...] = ()  # copies that move o into the kernel's output, in order

    @property
    def output(self) -> Value:
        return self.epilogue[-1].result if self.epilogue else self.pv.result


def _last_axis_keepdims(node: Node) -> bool:
    rank = node.inputs[0].type.rank
    return node.attrs.get("axes") == (rank - 1,) and node.attrs.get("keepdims") is True


def _index_subgraph(value: Value, into: dict[Node, None]) -> None:
    node = value.producer
    if node is None or node in into:
        return
    for v in node.inputs:
        _index_subgraph(v, into)
    into[node] = None


def _moving(node: Node | None) -> bool:
    return node is not None and node.op in MOVES and structured_space(node) is not None


def _moved_in(values: list[Value], inside: set[Node], outputs: set[Value]) -> dict[Node, None]:
    """The copies that move tensors computed elsewhere into `values` (q, k, v, a mask), each read only by the
    pattern or by the other copies (one packed qkv split into heads serves all three)."""
    moved: dict[Node, None] = {}
    pending, progress = list(values), True
    while progress:
        progress, rest = False, []
        for value in pending:
            node = value.producer
            if node in moved or not _moving(node) or value in outputs:
                continue  # computed elsewhere: the kernel reads it
            if all(u in inside or u in moved for u in value.users):
                moved[node] = None
                rest.append(node.inputs[0])
                progress = True
            else:
                rest.append(value)  # also read by a copy not taken yet: another operand's chain may take it
        pending = rest
    return moved


def _moved_out(value: Value, outputs: set[Value]) -> list[Node]:
    """The copies that move `value` (o) into a tensor read elsewhere, each the only reader of the one before."""
    chain: list[Node] = []
    while value not in outputs and len(value.users) == 1 and _moving(value.users[0]):
        chain.append(value.users[0])
        value = chain[-1].result
    return chain


_ALIGNS: dict[tuple, bool] = {}


def _aligns(match: AttentionMatch) -> bool:
    """Whether the match's loops align, memoised by the group's structure (`group_structure`): a model's
    layers repeat one attention."""
    key = group_structure(match.nodes)
    if key not in _ALIGNS:
        if len(_ALIGNS) >= 1024:
            _ALIGNS.clear()
        try:
            attention_domain(match)
            _ALIGNS[key] = True
        except Misaligned:
            _ALIGNS[key] = False
    return _ALIGNS[key]


def _read_outside(value: Value, *inside: Container[Node], outputs: set[Value]) -> bool:
    """Whether `value` is a graph output or read by a node in none of `inside`."""
    return value in outputs or any(all(u not in group for group in inside) for u in value.users)


def _keep_private(side: dict[Node, None], nodes: dict[Node, None], outputs: set[Value]) -> None:
    """Drop from `side` the nodes also read outside the pattern (a constant or mask that CSE shares between a
    model's layers), and those feeding only dropped ones: the kernel reads what they compute as an input."""
    changed = True
    while changed:
        changed = False
        for node in list(side):
            if any(_read_outside(v, nodes, side, outputs=outputs) for v in node.results):
                del side[node]
                changed = True


def match_attention(pv: Node, moves: bool = True) -> AttentionMatch | str | None:
    """The attention pattern ending at matmul `pv`; a reason string when it looks like attention
    but cannot be one kernel; None when it is not softmax(...) @ v at all. `moves`: take in the copies
    around it (else only k's transpose, as before they could join)."""
    if pv.op not in MATMULS:
        return None
    div = pv.inputs[0].producer
    if div is None or div.op != "div":
        return None
    e, z = div.inputs
    exp, total = e.producer, z.producer
    if exp is None or total is None or exp.op != "exp" or total.op != "sum" or total.inputs[0] is not e:
        return None
    sub = exp.inputs[0].producer
    if sub is None or sub.op != "sub":
        return None
    s, m = sub.inputs
    mx = m.producer
    if mx is None or mx.op != "max" or mx.inputs[0] is not s:
        return None
    where = f"softmax(%{s.name}) @ %{pv.inputs[1].name}"
    if not (_last_axis_keepdims(total) and _last_axis_keepdims(mx)):
        return f"{where}: the softmax is not over the last axis of the scores"
    if not s.type.dtype.is_float:
        return f"{where}: scores are not floating point"

    nodes: dict[Node, None] = {}
    side: dict[Node, None] = {}  # index-only subgraphs feeding the chain (a causal mask, a constant)
    operands: list[Value] = []  # the chain's other tensors (a mask, a bias): copies may move them in too
    memo: dict[Value, bool] = {}
    cur = s.producer
    for _ in range(MAX_CHAIN + 1):
        if cur is None:
            return f"{where}: the scores are not computed by a matmul"
        if cur.op in MATMULS:
            break
        if cur.opdef.category != ELEMENTWISE:
            return f"{where}: %{cur.name} ({cur.op}) between the score matmul and the softmax is not elementwise"
        path = [v for v in cur.inputs if v.type.shape == s.type.shape and v.type.dtype == s.type.dtype
                and v.producer is not None and not index_only(v, memo)]
        if len(path) != 1:
            return f"{where}: cannot tell which operand of %{cur.name} ({cur.op}) carries the scores"
        for v in cur.inputs:
            if v is not path[0] and index_only(v, memo):
                _index_subgraph(v, side)
            elif v is not path[0]:
                operands.append(v)
        nodes[cur] = None
        cur = path[0].producer
    else:
        return f"{where}: more than {MAX_CHAIN} elementwise ops between the score matmul and the softmax"
    qk = cur
    outputs = set(pv.graph.outputs)
    for node in (qk, mx, sub, exp, total, div, pv):
        nodes[node] = None
    _keep_private(side, nodes, outputs)
    nodes.update(side)
    order = {n: i for i, n in enumerate(pv.graph.nodes)}
    for node in nodes:
        for value in node.results:
            if value is not pv.result and _read_outside(value, nodes, outputs=outputs):
                return (f"{where}: %{value.name} ({node.op}) is also used outside the pattern, so the "
                        "score matrix would have to be materialised")
    # the copies around it, as many as keep the loops aligned (each prefix of the copies moving q, k, v in,
    # nearest first, takes in every reader of what it holds); at least k's transpose (k^T), where it is one
    moved_in = list(_moved_in([qk.inputs[0], qk.inputs[1], pv.inputs[1], *operands], set(nodes), outputs))
    moved_out = tuple(_moved_out(pv.result, outputs))
    kt = qk.inputs[1].producer
    kt_only = [kt] if kt is not None and kt.op == "transpose" and kt.users == [qk] and kt.result not in outputs else []
    if not moves:
        moved_in, moved_out = kt_only, ()
    for out in ((moved_out, ()) if moved_out else ((),)):
        for ins in [moved_in[:n] for n in range(len(moved_in), -1, -1)] + [kt_only]:
            match = AttentionMatch(_ordered(dict.fromkeys([*nodes, *ins, *out]), order), qk, s, mx, sub, exp, total,
                                   div, pv, out)
            if _aligns(match) or (ins == kt_only and not out):  # the last: k^T alone, as before copies joined
                return match
    raise AssertionError("unreachable: the last candidate is always taken")


def _ordered(nodes: dict[Node, None], order: dict[Node, int]) -> tuple[Node, ...]:
    return tuple(sorted(nodes, key=order.__getitem__))


def attention_domain(match: AttentionMatch) -> KernelDomain:
    """The generic alignment of the pattern's loops, with the FlashAttention loop kinds."""
    domain = kernel_domain(match.nodes, align_inputs=False)
    at = domain.index
    pv_space = domain.spaces[at(match.pv)]
    qk_space = domain.spaces[at(match.qk)]
    j = domain.node_loops[at(match.max)][-1]
    kv = domain.node_loops[at(match.pv)][pv_space.reduction_dims[0]]
    d = domain.node_loops[at(match.qk)][qk_space.reduction_dims[0]]
    e = domain.node_loops[at(match.pv)][pv_space.rank - 2]
    if j is None:
        raise Misaligned("a single key/value position: there is no key/value loop to stream")
    if j != kv:
        raise Misaligned("the softmax axis is not the key/value axis of the second matmul")
    kinds = []
    for k, loop in enumerate(domain.loops):
        if k == j:
            kinds.append(REDUCTION)
        elif k in (d, e):
            kinds.append(FULL)
        elif loop.kind == PARALLEL:
            kinds.append(PARALLEL)
        else:
            raise Misaligned(f"loop {loop.name} of the attention pattern is reduced outside the softmax")
    return with_kinds(domain, kinds)


@dataclass(frozen=True)
class AttentionLayout:
    """Where the parts of an attention kernel sit in its domain (positions in `domain.nodes`):
    what every code generator needs before it writes the online softmax."""

    match: AttentionMatch
    core: frozenset[int]  # the online softmax: max, sub, exp, sum, div and the p @ v matmul
    scores: tuple[int, ...]  # q @ k^T, the chain that scales and masks it, the copies moving q, k, v in
    kv: int  # the key/value loop, the one reduction of the domain
    max: int
    pv: int
    written: int  # the node whose output map places the result: pv, or the last copy moving o out

    def output_map(self, domain: KernelDomain):
        """Where o's elements go in the kernel's output (`match.output`), over the kernel's loops."""
        return domain.compose_map(self.written, domain.spaces[self.written].outputs[0])


def describe(match: AttentionMatch, domain: KernelDomain) -> str:
    """The fusion report's line for an accepted attention kernel."""
    j = next(loop for loop in domain.loops if loop.kind == REDUCTION)
    return (f"FlashAttention kernel: online softmax over key/value loop {j.name} ({j.extent} keys); "
            "the score matrix stays on chip")


def lower_bound(domain: KernelDomain, onchip_bytes: float) -> float | None:
    """FlashAttention's I/O bound L * S * d * e / M words (N^2 d^2 / M, constant 1), batch included, in bytes."""
    pv = next((n for n in reversed(domain.nodes) if n.op in MATMULS), None)
    space = None if pv is None else domain.spaces[domain.index(pv)]
    if space is None:
        return None
    itemsize = pv.results[0].type.dtype.itemsize
    qk = next(n for n in domain.nodes if n.op in MATMULS)
    d = qk.inputs[0].type.shape[-1]
    return space.points * d / (onchip_bytes / itemsize) * itemsize


ATTENTION = register_template(KernelTemplate(
    "attention", "softmax(q @ k^T ...) @ v as one FlashAttention kernel (online softmax over key/value tiles)",
    match_attention, attention_domain, describe, lower_bound))


def attention_layout(domain: KernelDomain, nodes: tuple[Node, ...]) -> AttentionLayout:
    """The layout of an attention kernel's nodes in its domain."""
    match = ATTENTION.match_kernel(nodes)
    at = domain.index
    core = frozenset(at(n) for n in (match.max, match.sub, match.exp, match.sum, match.div, match.pv))
    after = frozenset(at(n) for n in match.epilogue)  # never computed: o is written through their maps
    (kv,) = domain.loops_of_kind(REDUCTION)
    return AttentionLayout(match, core, tuple(i for i in range(len(domain.nodes)) if i not in core | after), kv,
                           at(match.max), at(match.pv), at(match.epilogue[-1]) if match.epilogue else at(match.pv))
