"""The loop domain of a kernel: the nodes' iteration spaces aligned into one loop nest.

How loops of different nodes are identified. Every structured node has its own loops (its
`IterationSpace`). Two loops are the same kernel loop when a tensor passed between the nodes
indexes one of its axes by exactly that loop on both sides: the producer writes axis `a` as `d_p`
and the consumer reads axis `a` as `d_c` (both a bare loop index, coefficient 1, offset 0, same
extent). Loops of extent 1 are constants (index 0) and are never identified. Identification is a
union-find over (node, loop) pairs; a class is one kernel loop. Two extra rules:

- every tensor passed inside the kernel must be *aligned*: after identification, the consumer's
  index expression on every axis equals the producer's (so a tile of the consumer reads exactly
  what the same tile of the producer wrote). A window read (conv, pooling), a strided slice or a
  transpose of the same loop pair the other way round is not aligned, and such a group is not a
  kernel (`Misaligned`, with the reason);
- a tensor read by several nodes of the kernel from outside (a kernel input) identifies their
  loops too, where that creates no conflict, so a tile of that input is loaded once for all.

A class whose loops are all parallel is a *parallel* kernel loop (tiles are independent). A class
holding a reduction loop is a *reduction* loop, tiled and carried across tiles (partial results
stay on chip) unless some node downstream of the reduction iterates the same loop (it needs the
finished reduction, e.g. `x - max(x)` in softmax): then it is *full*, kept whole inside one tile
(a persistent row). A reduction loop is also made full when a node iterating it is downstream of
another streamed reduction, so that all nodes iterating reduction loops (the streamed nodes) only
read finished values or values of the same tile. Attention kernels override this (see
`attention.py`): the key/value loop is a reduction carried by the online softmax.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import cached_property

from tilegraph.ir.graph import Node, Value
from tilegraph.ir.ops.registry import CONTRACTION, WINDOW
from tilegraph.ir.structured import PARALLEL, REDUCTION, AffineExpr, AffineMap, Arg, IterationSpace

FULL = "full"
ANCHORS = (CONTRACTION, WINDOW)  # op categories that carry a kernel's main loop nest
LOOP_KINDS = (PARALLEL, REDUCTION, FULL)


class Misaligned(Exception):
    """A node group whose loops cannot be aligned into one loop nest; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Loop:
    """One kernel loop: `d<i>`, its extent, and its kind (parallel, reduction, full)."""

    name: str
    extent: int
    kind: str


@dataclass(frozen=True)
class Access:
    """One way the kernel touches a tensor: its map over kernel loops and its role.

    role: "input" (read from off-chip), "output" (written off-chip) or "internal" (on chip only).
    """

    value: Value
    map: AffineMap
    role: str

    @cached_property
    def loops(self) -> frozenset[int]:
        return frozenset(d for e in self.map.exprs for d, _ in e.terms)


@dataclass(frozen=True, eq=False)
class KernelDomain:
    """Kernel loops, and for every node the kernel loop of each of its own loops (None: extent 1)."""

    nodes: tuple[Node, ...]
    spaces: tuple[IterationSpace | None, ...]
    loops: tuple[Loop, ...]
    node_loops: tuple[tuple[int | None, ...], ...]

    # ----- queries ------------------------------------------------------------------------
    @property
    def structured(self) -> bool:
        return all(s is not None for s in self.spaces)

    def index(self, node: Node) -> int:
        return self.nodes.index(node)

    def loops_of_kind(self, kind: str) -> tuple[int, ...]:
        return tuple(i for i, loop in enumerate(self.loops) if loop.kind == kind)

    def iterates(self, position: int) -> frozenset[int]:
        """Kernel loops node `position` runs over."""
        return frozenset(d for d in self.node_loops[position] if d is not None)

    def reduces(self, position: int) -> frozenset[int]:
        space = self.spaces[position]
        if space is None:
            return frozenset()
        return frozenset(self.node_loops[position][d] for d in space.reduction_dims
                         if self.node_loops[position][d] is not None)

    def compose(self, position: int, expr: AffineExpr) -> AffineExpr:
        """A node-loop index expression rewritten over kernel loops."""
        out = AffineExpr.constant(expr.const)
        for d, c in expr.terms:
            loop = self.node_loops[position][d]
            if loop is not None:
                out = out + AffineExpr.dim(loop, c)
        return out

    def compose_map(self, position: int, amap: AffineMap) -> AffineMap:
        return AffineMap(tuple(self.compose(position, e) for e in amap.exprs), amap.pad)

    @cached_property
    def streamed(self) -> tuple[bool, ...]:
        """Per node: whether it runs inside the loop over reduction tiles."""
        red = set(self.loops_of_kind(REDUCTION))
        return tuple(bool(self.iterates(i) & red) for i in range(len(self.nodes)))

    @cached_property
    def accesses(self) -> tuple[Access, ...]:
        """Every distinct (tensor, map) the kernel touches, inputs first, then results."""
        inside = set(self.nodes)
        graph_outputs = set(self.nodes[0].graph.outputs) if self.nodes else set()
        seen: dict[tuple[Value, AffineMap], Access] = {}
        for i, (node, space) in enumerate(zip(self.nodes, self.spaces)):
            if space is None:
                continue
            for value, amap in zip(node.inputs, space.inputs):
                role = "internal" if value.producer in inside else "input"
                key = (value, self.compose_map(i, amap))
                seen.setdefault(key, Access(value, key[1], role))
        for i, (node, space) in enumerate(zip(self.nodes, self.spaces)):
            if space is None:
                continue
            for value, amap in zip(node.results, space.outputs):
                external = value in graph_outputs or any(u not in inside for u in value.users)
                key = (value, self.compose_map(i, amap))
                seen[key] = Access(value, key[1], "output" if external else "internal")
        return tuple(seen.values())

    def missing_parallel(self, position: int) -> tuple[int, ...]:
        """Parallel kernel loops node `position` does not run over: it is recomputed for each of their tiles."""
        mine = self.iterates(position)
        return tuple(d for d in self.loops_of_kind(PARALLEL) if d not in mine)

    def describe(self) -> str:
        return ", ".join(f"{loop.name}<{loop.extent}{'' if loop.kind == PARALLEL else ' ' + loop.kind}>"
                         for loop in self.loops)


# ----- iteration spaces -------------------------------------------------------------------------
def reshape_space(source: tuple[int, ...], target: tuple[int, ...]) -> IterationSpace | None:
    """A reshape as a loop nest over the common refinement of the two shapes, when there is one.

    Row-major reshapes that only split and merge axes ([64, 128] -> [64, 4, 32] and back) are
    affine over the refined loops: each axis is a mixed-radix sum of the loops it holds. Reshapes
    whose axes straddle each other ([4, 6] -> [6, 4]) need div/mod and have no such form (None).
    """
    parts_in: list[list[int]] = [[] for _ in source]
    parts_out: list[list[int]] = [[] for _ in target]
    extents: list[int] = []
    i = j = 0
    left_in = source[0] if source else 1
    left_out = target[0] if target else 1
    while True:
        while i < len(source) and left_in == 1:
            i += 1
            left_in = source[i] if i < len(source) else 1
        while j < len(target) and left_out == 1:
            j += 1
            left_out = target[j] if j < len(target) else 1
        if i == len(source) or j == len(target):
            break
        step = min(left_in, left_out)
        if left_in % step or left_out % step:
            return None
        parts_in[i].append(len(extents))
        parts_out[j].append(len(extents))
        extents.append(step)
        left_in //= step
        left_out //= step

    def axis_map(parts: list[list[int]]) -> AffineMap:
        exprs = []
        for loops in parts:
            expr, stride = AffineExpr.constant(0), 1
            for loop in reversed(loops):
                expr = expr + AffineExpr.dim(loop, stride)
                stride *= extents[loop]
            exprs.append(expr)
        return AffineMap(tuple(exprs))

    return IterationSpace(tuple(extents), (PARALLEL,) * len(extents), (axis_map(parts_in),), (axis_map(parts_out),),
                          (Arg(0),), (None,))


def node_key(node: Node) -> tuple:
    """What a node's iteration space depends on: its op, types and attributes (equal in repeated layers)."""
    return node.op, node.input_types, node.result_types, repr(sorted(node.attrs.items()))


def group_structure(nodes: Sequence[Node], key: Callable[[Node], Hashable] = node_key) -> tuple:
    """A node group's structure: each node's `key` and where each of its inputs comes from (a node of the
    group, or the n-th outside value). Groups of one structure align the same way: memo keys."""
    position = {n: i for i, n in enumerate(nodes)}
    outside: dict[Value, int] = {}
    return tuple((key(node), tuple((position[v.producer], v.index) if v.producer in position
                                   else (-1, outside.setdefault(v, len(outside))) for v in node.inputs))
                 for node in nodes)


def structured_space(node: Node) -> IterationSpace | None:
    """The node's iteration space; for a reshape without one in the op library, its refinement space.
    Memoised by what it depends on (`node_key`): a model's layers repeat the same nodes."""
    key = node_key(node)
    if key not in _SPACES:
        if len(_SPACES) >= 8192:
            _SPACES.clear()
        space = node.iteration_space()
        if space is None and node.op == "reshape":
            space = reshape_space(node.inputs[0].type.shape, node.result.type.shape)
        _SPACES[key] = space
    return _SPACES[key]


_SPACES: dict[tuple, IterationSpace | None] = {}


# ----- construction ----------------------------------------------------------------------------
class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict = {}
        self.nodes: dict = {}  # root -> frozenset of node positions in the class

    def add(self, key, position: int) -> None:
        self.parent[key] = key
        self.nodes[key] = frozenset([position])

    def find(self, key):
        while self.parent[key] != key:
            self.parent[key] = self.parent[self.parent[key]]
            key = self.parent[key]
        return key

    def can_union(self, a, b) -> bool:
        ra, rb = self.find(a), self.find(b)
        return ra == rb or not (self.nodes[ra] & self.nodes[rb])

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            self.nodes[ra] = self.nodes[ra] | self.nodes.pop(rb)


def _bare(expr: AffineExpr, extents: Sequence[int]) -> int | None:
    """The loop an index expression is, when it is one bare loop of extent > 1 (loops of extent 1 are 0)."""
    terms = [(d, c) for d, c in expr.terms if extents[d] > 1]
    if expr.const == 0 and len(terms) == 1 and terms[0][1] == 1:
        return terms[0][0]
    return None


def _name(node: Node) -> str:
    return f"%{node.name} ({node.op})"


def kernel_domain(nodes: Sequence[Node], align_inputs: bool = True,
                  spaces: dict[Node, IterationSpace | None] | None = None) -> KernelDomain:
    """Align the nodes' loops into one kernel loop nest; raise Misaligned when they do not align.

    `nodes` must be in a valid order. A lone node without an iteration space (reshape, concat,
    gather, an undecomposed composite) gets a domain without loops; in a group it is Misaligned.
    `spaces` may hold the nodes' iteration spaces already computed.
    """
    nodes = tuple(nodes)
    spaces = tuple(spaces[n] if spaces is not None and n in spaces else structured_space(n) for n in nodes)
    if any(s is None for s in spaces):
        if len(nodes) == 1:
            return KernelDomain(nodes, spaces, (), ((),))
        odd = next(n for n, s in zip(nodes, spaces) if s is None)
        raise Misaligned(f"{_name(odd)} has no iteration space (layout or composite op): it runs alone")
    position = {n: i for i, n in enumerate(nodes)}
    uf = _UnionFind()
    for i, space in enumerate(spaces):
        for d, extent in enumerate(space.extents):
            if extent > 1:
                uf.add((i, d), i)

    # tensors passed inside the kernel identify loops
    edges = []
    for c, node in enumerate(nodes):
        for k, value in enumerate(node.inputs):
            p = position.get(value.producer)
            if p is None:
                continue
            pmap, cmap = spaces[p].outputs[value.index], spaces[c].inputs[k]
            edges.append((p, c, value, pmap, cmap))
            for pe, ce in zip(pmap.exprs, cmap.exprs):
                pd, cd = _bare(pe, spaces[p].extents), _bare(ce, spaces[c].extents)
                if pd is None or cd is None:
                    continue
                if spaces[p].extents[pd] != spaces[c].extents[cd]:
                    raise Misaligned(f"{_name(nodes[c])} reads %{value.name} over {spaces[c].extents[cd]} "
                                     f"positions of an axis its producer writes {spaces[p].extents[pd]} of")
                if not uf.can_union((p, pd), (c, cd)):
                    raise Misaligned(f"{_name(nodes[c])} reads %{value.name} through {cmap}: two of its loops "
                                     f"would have to be the same loop (a transpose of the producer's axes)")
                uf.union((p, pd), (c, cd))

    # a kernel input read by several nodes identifies their loops where it can (one tile for all)
    if align_inputs:
        readers: dict[Value, list[tuple[int, AffineMap]]] = {}
        for i, (node, space) in enumerate(zip(nodes, spaces)):
            for value, amap in zip(node.inputs, space.inputs):
                if value.producer not in position:
                    readers.setdefault(value, []).append((i, amap))
        for value, uses in readers.items():
            (a, amap), rest = uses[0], uses[1:]
            for b, bmap in rest:
                for ae, be in zip(amap.exprs, bmap.exprs):
                    ad, bd = _bare(ae, spaces[a].extents), _bare(be, spaces[b].extents)
                    if ad is None or bd is None or spaces[a].extents[ad] != spaces[b].extents[bd]:
                        continue
                    if uf.can_union((a, ad), (b, bd)):
                        uf.union((a, ad), (b, bd))

    # number the classes: loops of the last node first (output-major), then earlier nodes'
    order: dict = {}
    for i in reversed(range(len(nodes))):
        for d, extent in enumerate(spaces[i].extents):
            if extent > 1:
                order.setdefault(uf.find((i, d)), len(order))
    node_loops = tuple(tuple(order[uf.find((i, d))] if e > 1 else None for d, e in enumerate(space.extents))
                       for i, space in enumerate(spaces))
    extents = [0] * len(order)
    for i, space in enumerate(spaces):
        for d, e in enumerate(space.extents):
            if e > 1:
                extents[node_loops[i][d]] = e
    draft = KernelDomain(nodes, spaces, tuple(Loop(f"d{k}", e, PARALLEL) for k, e in enumerate(extents)), node_loops)

    # every tensor passed inside must be aligned
    for p, c, value, pmap, cmap in edges:
        for axis, (pe, ce) in enumerate(zip(pmap.exprs, cmap.exprs)):
            if draft.compose(p, pe) != draft.compose(c, ce):
                raise Misaligned(f"{_name(nodes[c])} reads axis {axis} of %{value.name} as {ce} where "
                                 f"{_name(nodes[p])} writes it as {pe}: a tile would need data another tile computes")
    kinds = _classify(draft)
    loops = tuple(Loop(loop.name, loop.extent, kind) for loop, kind in zip(draft.loops, kinds))
    return KernelDomain(nodes, spaces, loops, node_loops)


def downstream(domain: KernelDomain) -> list[frozenset[int]]:
    """Per node position: positions of the nodes inside the kernel that depend on it."""
    position = {n: i for i, n in enumerate(domain.nodes)}
    below: list[frozenset[int]] = [frozenset()] * len(domain.nodes)
    for i in reversed(range(len(domain.nodes))):
        found: set[int] = set()
        for user in domain.nodes[i].users:
            j = position.get(user)
            if j is not None:
                found.add(j)
                found |= below[j]
        below[i] = frozenset(found)
    return below


def _classify(domain: KernelDomain) -> list[str]:
    """Kernel loop kinds: parallel, reduction (carried across tiles) or full (whole in a tile)."""
    n = len(domain.nodes)
    below = downstream(domain)
    iterates = [domain.iterates(i) for i in range(n)]
    reduces = [domain.reduces(i) for i in range(n)]
    reduction = set().union(*reduces) if reduces else set()
    full = {loop for i in range(n) for loop in reduces[i] if any(loop in iterates[j] for j in below[i])}
    changed = True
    while changed:
        changed = False
        streamed = reduction - full
        for i in range(n):
            if not reduces[i] & streamed:
                continue
            for j in below[i]:
                extra = (iterates[j] & streamed) - reduces[i]
                if extra:
                    full |= extra
                    changed = True
    return [FULL if k in full else REDUCTION if k in reduction else PARALLEL for k in range(len(domain.loops))]


def with_kinds(domain: KernelDomain, kinds: Sequence[str]) -> KernelDomain:
    """The same domain with loop kinds overridden (attention kernels)."""
    loops = tuple(Loop(loop.name, loop.extent, kind) for loop, kind in zip(domain.loops, kinds))
    return KernelDomain(domain.nodes, domain.spaces, loops, domain.node_loops)


def whole_anchor_loop(domain: KernelDomain) -> tuple[Node, Loop] | None:
    """A contraction/window whose reduction loop the domain keeps whole (full), if any."""
    for i, node in enumerate(domain.nodes):
        if node.opdef.category in ANCHORS:
            for loop in sorted(domain.reduces(i)):
                if domain.loops[loop].kind == FULL:
                    return node, domain.loops[loop]
    return None


def aligned_domain(nodes: Sequence[Node], spaces: dict[Node, IterationSpace | None] | None = None) -> KernelDomain:
    """kernel_domain, sharing input tiles only where that keeps every contraction's reduction streamed."""
    domain = kernel_domain(nodes, align_inputs=True, spaces=spaces)
    if whole_anchor_loop(domain) is not None:
        domain = kernel_domain(nodes, align_inputs=False, spaces=spaces)
    return domain
