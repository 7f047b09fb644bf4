"""The fuse pass: group nodes into kernels using the structured-op description, not per-op rules.

Greedy, in four rounds, each merge checked the same way:
1. attention patterns become one FlashAttention kernel each (closed to further merges);
2. every producer -> consumer edge, consumers in graph order (so an elementwise op joins its
   producer's kernel as an epilogue before it could join its consumer as a prologue);
3. sinking: a kernel's last elementwise node moves into the one kernel that reads it, where that saves
   traffic (round 2 put it with its producer first);
4. siblings: kernels that read the same tensor through the same map share one tile of it.

A merge is legal when the merged group is still a DAG node in the kernel graph (no cycle), its
loops align (`domain.kernel_domain`), it has at most one contraction/window (two would recompute
one per tile of the other), no contraction's reduction loop has to stay whole, and no row kept
whole on chip exceeds `max_full_elements`, and every result leaving the kernel runs over all its
parallel loops (else each tile of the others writes it again). It is taken when it saves traffic and any recompute it
causes (nodes that do not run over all the kernel's parallel loops) costs less than the traffic
saved at the machine balance `flops_per_byte`. Nodes are never duplicated.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from tilegraph.ir.domain import (ANCHORS, FULL, KernelDomain, Misaligned, aligned_domain, group_structure,
                                 node_key, structured_space, whole_anchor_loop)
from tilegraph.ir.graph import Graph, Node
from tilegraph.ir.ops.registry import ELEMENTWISE, REDUCTION as REDUCTION_OP
from tilegraph.ir.program import Kernel, Program
from tilegraph.ir.templates import GENERIC, KernelTemplate, TemplateMatch, templates

from ..manager import register_property_check
from ..registry import PassContext, register_pass
from .decisions import FusionDecision


@dataclass(frozen=True)
class FuseOptions:
    """attention/prologues/siblings switch rules on; the rest feed the cost model."""

    attention: bool = True  # FlashAttention kernels (a field named after a kernel template switches it)
    template_moves: bool = True  # a template kernel takes in the copies around it (attention: the head split and
    # merge), reading and writing through their maps (the C++ backend makes such copies once per tile)
    prologues: bool = True  # elementwise producers into matmul/conv (recomputed per tile of the other side)
    siblings: bool = True  # consumers of one tensor share a kernel (multi-output)
    sink: bool = True  # a kernel's last elementwise node moves into its only reader's kernel where that saves traffic
    flops_per_byte: float = 8.0  # machine balance: recompute is worth it when flops / this < bytes saved
    nominal_tile: int = 64  # tile size assumed to estimate recompute before tiling
    max_full_elements: int = 65536  # largest row (elements) a kernel may keep whole on chip


def io_bytes(nodes: Iterable[Node]) -> int:
    """Off-chip bytes of a node group run as one kernel: inputs read once, outputs written once."""
    return Kernel("_", tuple(nodes)).io_bytes


def recompute(domain: KernelDomain, nominal_tile: int) -> dict[Node, int]:
    """Extra flops per node that misses some parallel loops (recomputed per tile of them)."""
    extra = {}
    for i, node in enumerate(domain.nodes):
        missing = domain.missing_parallel(i)
        if missing:
            factor = math.prod(math.ceil(domain.loops[d].extent / nominal_tile) for d in missing)
            extra[node] = node.flops() * (factor - 1)
    return extra


def anchors(nodes: Iterable[Node]) -> list[Node]:
    return [n for n in nodes if n.opdef.category in ANCHORS]


class _Domains:
    """aligned_domain of node groups, memoised by the group's structure (each node's op, attributes and
    types, and where each of its inputs comes from: a node of the group, or the n-th outside value):
    the candidate merges of a model's repeated layers align the same way, so each aligns once."""

    def __init__(self, spaces: dict[Node, object]) -> None:
        self.spaces = spaces
        self.classes: dict[Node, int] = {}
        self.class_ids: dict[tuple, int] = {}
        self.found: dict[tuple, object] = {}

    def node_class(self, node: Node) -> int:
        known = self.classes.get(node)
        if known is None:
            known = self.classes[node] = self.class_ids.setdefault(node_key(node), len(self.class_ids))
        return known

    def structure(self, nodes: list[Node]) -> tuple:
        return group_structure(nodes, self.node_class)

    def aligned(self, nodes: list[Node]) -> KernelDomain:
        """aligned_domain(nodes); Misaligned (its reason naming these nodes) where they do not align."""
        key = self.structure(nodes)
        found = self.found.get(key)
        if found is None:
            try:
                domain = aligned_domain(nodes, self.spaces)
            except Misaligned as e:
                self.found[key] = (e.reason, _value_names(nodes))
                raise
            self.found[key] = (domain.loops, domain.node_loops)
            return domain
        if isinstance(found[0], str):  # the first group's reason, with its names replaced by these
            reason, names = found
            renamed = dict(zip(names, _value_names(nodes)))
            if all(m[1] in renamed for m in _NAME.finditer(reason)) and all(map(_NAME_CHARS.fullmatch, renamed)):
                raise Misaligned(_NAME.sub(lambda m: "%" + renamed[m[1]], reason))
            return aligned_domain(nodes, self.spaces)  # names the pattern cannot pick out: raise afresh
        loops, node_loops = found
        return KernelDomain(tuple(nodes), tuple(self.spaces[n] for n in nodes), loops, node_loops)


_NAME = re.compile(r"%([A-Za-z0-9_.]+)")
_NAME_CHARS = re.compile(r"[A-Za-z0-9_.]+")


def _value_names(nodes: list[Node]) -> list[str]:
    """The names of the nodes' inputs and results, in order of use: positions match between groups of
    one structure (nodes are named by their first result)."""
    return list(dict.fromkeys(v.name for n in nodes for v in (*n.inputs, *n.results)))


class _Groups:
    """Node groups (future kernels) with the quotient-graph queries fusion needs."""

    def __init__(self, graph: Graph) -> None:
        self.order = {n: i for i, n in enumerate(graph.nodes)}
        self.of: dict[Node, int] = {n: i for i, n in enumerate(graph.nodes)}
        self.members: dict[int, list[Node]] = {i: [n] for i, n in enumerate(graph.nodes)}
        self.kind: dict[int, str] = {}
        self.locked: set[int] = set()
        self.domains: dict[int, KernelDomain] = {}
        self.spaces = {n: structured_space(n) for n in graph.nodes}
        self.aligned = _Domains(self.spaces).aligned
        self.last = {i: i for i in range(len(self.order))}  # latest node position in each group

    def successors(self, group: int) -> set[int]:
        return {self.of[u] for n in self.members[group] for u in n.users} - {group}

    def _reaches(self, start: int, goal: int) -> bool:
        """Whether `goal` is reachable from `start` through at least one other group.

        Node positions are a topological order, so a group whose first node comes after the goal's
        last node cannot lead back to the goal: the search skips it.
        """
        horizon = self.last[goal]
        first = self.first
        frontier = [g for g in self.successors(start) if g != goal and first(g) < horizon]
        seen = set(frontier)
        while frontier:
            g = frontier.pop()
            for h in self.successors(g):
                if h == goal:
                    return True
                if h not in seen and first(h) < horizon:
                    seen.add(h)
                    frontier.append(h)
        return False

    def first(self, group: int) -> int:
        return self.order[self.members[group][0]]

    def creates_cycle(self, a: int, b: int) -> bool:
        return self._reaches(a, b) or self._reaches(b, a)

    def union(self, a: int, b: int) -> list[Node]:
        return sorted(self.members[a] + self.members[b], key=self.order.__getitem__)

    def merge(self, a: int, b: int, domain: KernelDomain, kind: str | None = None) -> int:
        nodes = self.union(a, b)
        self.last[a] = max(self.last[a], self.last.pop(b))
        del self.members[b]
        self.domains.pop(b, None)
        self.members[a] = nodes
        for n in nodes:
            self.of[n] = a
        self.domains[a] = domain
        if kind:
            self.kind[a] = kind
        return a

    def move(self, node: Node, a: int, b: int, domains: tuple[KernelDomain, KernelDomain]) -> None:
        """`node` out of group `a` into group `b`, with their new loop nests."""
        self.members[a] = [n for n in self.members[a] if n is not node]
        self.members[b] = sorted(self.members[b] + [node], key=self.order.__getitem__)
        self.of[node] = b
        self.domains[a], self.domains[b] = domains
        for g in (a, b):
            self.last[g] = self.order[self.members[g][-1]]

    def domain(self, group: int) -> KernelDomain | None:
        if group not in self.domains:
            try:
                self.domains[group] = self.aligned(self.members[group])
            except Misaligned:
                return None
        return self.domains[group]

    def kernels(self) -> list[Kernel]:
        """Groups in a topological order of the kernel graph (ties: earliest node first)."""
        import heapq

        indegree = {g: 0 for g in self.members}
        for g in self.members:
            for h in self.successors(g):
                indegree[h] += 1
        first = {g: self.order[nodes[0]] for g, nodes in self.members.items()}
        ready = [(first[g], g) for g, d in indegree.items() if d == 0]
        heapq.heapify(ready)
        out = []
        while ready:
            _, g = heapq.heappop(ready)
            out.append(g)
            for h in self.successors(g):
                indegree[h] -= 1
                if indegree[h] == 0:
                    heapq.heappush(ready, (first[h], h))
        assert len(out) == len(self.members), "fusion produced a cycle between kernels"
        kernels = [Kernel(f"k{i}", tuple(self.members[g]), kind=self.kind.get(g, GENERIC)) for i, g in enumerate(out)]
        for kernel, g in zip(kernels, out):
            if g not in self.kind:  # a generic kernel's loop nest: found while fusing, or memoised by structure
                kernel.__dict__["domain"] = self.domains[g] if g in self.domains else self.aligned(self.members[g])
        return kernels


def _names(nodes: Iterable[Node]) -> tuple[str, ...]:
    return tuple(n.name for n in nodes)


def _illegal(domain: KernelDomain, options: FuseOptions) -> str | None:
    """Why an aligned group still cannot be one kernel, or None."""
    stuck = whole_anchor_loop(domain)
    if stuck is not None:
        node, loop = stuck
        return (f"the reduction loop {loop.name} of %{node.name} ({node.op}) would have to stay whole in "
                "every tile (a finished reduction feeds a node that runs over it)")
    full = [domain.loops[d] for d in domain.loops_of_kind(FULL)]
    size = math.prod(loop.extent for loop in full)
    if full and size > options.max_full_elements:
        return (f"it would keep {size} elements per row whole on chip (loops "
                f"{', '.join(loop.name for loop in full)}; limit {options.max_full_elements})")
    return None


class _Fuser:
    def __init__(self, graph: Graph, options: FuseOptions) -> None:
        self.graph = graph
        self.options = options
        self.groups = _Groups(graph)
        self.decisions: list[FusionDecision] = []
        self.seen: set[FusionDecision] = set()

    def record(self, rule: str, accepted: bool, a: Iterable[Node], b: Iterable[Node], via, reason: str,
               saved: int = 0, flops: int = 0, recomputed: Iterable[Node] = ()) -> None:
        decision = FusionDecision(rule, accepted, _names(a), _names(b), via.name if via else None,
                                  reason, saved, flops, _names(recomputed))
        if accepted or decision not in self.seen:  # the same refusal once
            self.seen.add(decision)
            self.decisions.append(decision)

    # ----- rules ----------------------------------------------------------------------------------
    def run(self) -> list[Kernel]:
        for node in self.graph.nodes:
            if self.groups.spaces[node] is None:
                what = "a composite (canonicalize decomposes it)" if node.opdef.is_composite else "a layout op"
                self.record("alone", False, [node], [], None, f"{node.op} is {what} without an iteration space: "
                            "it runs as its own kernel")
        for template in templates():
            if getattr(self.options, template.name, True):  # templates without a switch are always on
                self.apply(template)
        for node in self.graph.nodes:
            for value in dict.fromkeys(node.inputs):
                producer = value.producer
                if producer is not None and self.groups.of[producer] != self.groups.of[node]:
                    self.try_merge(self.groups.of[producer], self.groups.of[node], value, producer, node)
        if self.options.sink:
            self.sink()
        if self.options.siblings:
            self.siblings()
        return self.groups.kernels()

    def sink(self) -> None:
        """Move a kernel's last elementwise node into the one kernel that reads it, where that saves traffic:
        producers come first in round 2, so Llama's q * cos joined the transpose of q (one tile of both) and
        was written and read again by the rotary kernel, which reads that transpose anyway."""
        groups = self.groups
        moved = True
        while moved:
            moved = False
            for node in self.graph.nodes:
                ga = groups.of[node]
                users = {groups.of[u] for u in node.users}
                if (len(groups.members[ga]) < 2 or ga in groups.locked or node.opdef.category != ELEMENTWISE
                        or len(users) != 1 or ga in users or node.result in self.graph.outputs):
                    continue
                (gb,) = users
                if gb not in groups.locked and self.try_sink(node, ga, gb):
                    moved = True

    def try_sink(self, node: Node, ga: int, gb: int) -> bool:
        """Move `node` from group `ga` to `gb` (which alone reads it) if both stay legal kernels, no result is
        written twice, traffic falls and any recompute is worth it (as `try_merge` weighs a merge)."""
        groups, options = self.groups, self.options
        a, b = groups.members[ga], groups.members[gb]
        rest = [n for n in a if n is not node]
        taken = sorted(b + [node], key=groups.order.__getitem__)
        try:
            domains = groups.aligned(rest), groups.aligned(taken)
        except Misaligned:
            return False
        if any(_illegal(d, options) or self.repeated_output(d, nodes)
               for d, nodes in zip(domains, (rest, taken))):
            return False
        saved = io_bytes(a) + io_bytes(b) - io_bytes(rest) - io_bytes(taken)
        flops, _ = self.more_recompute((ga, gb), domains)
        if saved <= 0 or (flops and flops / options.flops_per_byte >= saved):
            return False
        groups.move(node, ga, gb, domains)
        self.record("sink", True, [node], b, node.result, f"the only reader's kernel; saves {saved} bytes", saved,
                    flops)
        return True

    def apply(self, template: KernelTemplate) -> None:
        """Make a kernel of every match of `template` (before the generic merges)."""
        for node in self.graph.nodes:
            found = template.match(node, moves=self.options.template_moves)
            if found is None:
                continue
            if isinstance(found, str):
                self.record(template.name, False, [node], [], None, found)
                continue
            self.merge_template(template, found)

    def merge_template(self, template: KernelTemplate, match: TemplateMatch) -> None:
        groups = self.groups
        rule = template.name
        ids = list(dict.fromkeys(groups.of[n] for n in match.nodes))
        if any(g in groups.locked for g in ids):
            self.record(rule, False, match.nodes, [], None, "overlaps another template kernel")
            return
        try:
            domain = template.domain(match)
        except Misaligned as e:
            self.record(rule, False, match.nodes, [], None, e.reason)
            return
        if any(set(groups.members[g]) - set(match.nodes) for g in ids):
            self.record(rule, False, match.nodes, [], None, "its nodes were already fused elsewhere")
            return
        first = ids[0]
        for other in ids[1:]:
            groups.members[first] += groups.members.pop(other)
            groups.last[first] = max(groups.last[first], groups.last.pop(other))
        groups.members[first].sort(key=groups.order.__getitem__)
        for n in groups.members[first]:
            groups.of[n] = first
        groups.domains[first] = domain
        groups.kind[first] = template.name
        groups.locked.add(first)
        saved = sum(io_bytes([n]) for n in match.nodes) - io_bytes(match.nodes)
        extra = recompute(domain, self.options.nominal_tile)
        self.record(rule, True, match.nodes, [], match.output, template.describe(match, domain), saved,
                    sum(extra.values()), list(extra))

    def siblings(self) -> None:
        graph = self.graph
        for value in list(graph.inputs) + list(graph.params) + [v for n in graph.nodes for v in n.results]:
            users = value.users
            for user in users[1:]:
                ga, gb = self.groups.of[users[0]], self.groups.of[user]
                owner = self.groups.of.get(value.producer) if value.producer is not None else None
                if ga != gb and owner not in (ga, gb):
                    self.try_merge(ga, gb, value, None, None, sibling=True)

    # ----- the merge check --------------------------------------------------------------------
    def rule(self, a: list[Node], b: list[Node], producer: Node | None, consumer: Node | None) -> str:
        if consumer is None:
            return "sibling"
        if consumer.opdef.category in ANCHORS and producer not in anchors(a):
            return "prologue"
        if anchors(a):
            return "epilogue"
        if REDUCTION_OP in (producer.opdef.category, consumer.opdef.category) or any(
                n.opdef.category == REDUCTION_OP for n in a + b):
            return "reduction"
        return "elementwise"

    def try_merge(self, ga: int, gb: int, via, producer: Node | None, consumer: Node | None,
                  sibling: bool = False) -> bool:
        groups, options = self.groups, self.options
        a, b = groups.members[ga], groups.members[gb]
        rule = self.rule(a, b, producer, consumer)

        def refuse(reason: str, saved: int = 0, flops: int = 0) -> bool:
            self.record(rule, False, a, b, via, reason, saved, flops)
            return False

        if any(groups.spaces[n] is None for n in a + b):
            return False  # recorded once per node ("alone")
        if ga in groups.locked or gb in groups.locked:
            return refuse("a template kernel takes no other nodes")
        if rule == "prologue" and not options.prologues:
            return refuse("prologue fusion is switched off")
        found = anchors(a + b)
        if len(found) > 1:
            return refuse(f"two contractions/windows (%{found[0].name} {found[0].op}, %{found[1].name} "
                          f"{found[1].op}): one would be recomputed for every tile of the other")
        if groups.creates_cycle(ga, gb):
            return refuse("a path between them runs through another kernel: merging would create a cycle")
        merged = groups.union(ga, gb)
        try:
            domain = groups.aligned(merged)
        except Misaligned as e:
            return refuse(e.reason)
        problem = _illegal(domain, options)
        if problem is not None:
            return refuse(problem)
        if sibling and not self.shares_tile(domain, via, a, b):
            return refuse(f"they read %{via.name} through different maps: no tile of it is shared")
        repeated = self.repeated_output(domain, merged)
        if repeated is not None:
            return refuse(repeated)
        saved = io_bytes(a) + io_bytes(b) - io_bytes(merged)
        flops, recomputed = self.more_recompute((ga, gb), (domain,))
        if saved <= 0:
            return refuse("saves no off-chip traffic", saved, flops)
        if flops and flops / options.flops_per_byte >= saved:
            return refuse(f"recomputing {flops} flops costs more than the {saved} bytes it saves "
                          f"(at {options.flops_per_byte:g} flops/byte)", saved, flops)
        groups.merge(ga, gb, domain)
        reason = f"loops {domain.describe()}; saves {saved} bytes"
        if flops or recomputed:
            reason += f"; recompute {flops} flops < {saved} bytes x {options.flops_per_byte:g} flops/byte"
        self.record(rule, True, a, b, via, reason, saved, flops, recomputed)
        return True

    def more_recompute(self, groups: tuple[int, ...], domains: tuple[KernelDomain, ...]) -> tuple[int, list[Node]]:
        """The flops recomputed per tile in kernels of `domains` beyond those in `groups` now, and the nodes."""
        before: dict[Node, int] = {}
        for g in groups:
            part = self.groups.domain(g)
            if part is not None:
                before.update(recompute(part, self.options.nominal_tile))
        after: dict[Node, int] = {}
        for domain in domains:
            after.update(recompute(domain, self.options.nominal_tile))
        recomputed = [n for n, f in after.items() if n not in before or f > before[n]]
        return sum(after[n] - before.get(n, 0) for n in recomputed), recomputed

    @staticmethod
    def repeated_output(domain: KernelDomain, nodes: list[Node]) -> str | None:
        """Why the merged kernel would write some result more than once, or None: a node whose result leaves
        the kernel but does not run over all its parallel loops is stored again by every tile of those
        (Llama's rotary embedding merged its q and k halves through the shared cos table: q written 64
        times, k 32). A value of one element (a constant) is exempt."""
        for value in Kernel("_", tuple(nodes)).outputs:
            i = domain.index(value.producer)
            missing = domain.missing_parallel(i)
            if missing and value.type.numel > 1:
                loops = ", ".join(domain.loops[d].name for d in missing)
                return (f"%{value.name} leaves the kernel but does not run over loops {loops}: every tile of "
                        "them would write it again")
        return None

    @staticmethod
    def shares_tile(domain: KernelDomain, value, a: list[Node], b: list[Node]) -> bool:
        """Whether both sides read `value` through one map that runs over some loop."""
        maps = {}
        for side, nodes in (("a", a), ("b", b)):
            for n in nodes:
                i = domain.index(n)
                for v, amap in zip(n.inputs, domain.spaces[i].inputs):
                    if v is value:
                        maps.setdefault(side, set()).add(domain.compose_map(i, amap))
        common = maps.get("a", set()) & maps.get("b", set())
        return any(any(e.terms for e in m.exprs) for m in common)


def fuse_graph(graph: Graph, options: FuseOptions = FuseOptions()) -> tuple[list[Kernel], list[FusionDecision]]:
    """Kernels (in execution order) and every decision taken or refused."""
    fuser = _Fuser(graph, options)
    kernels = fuser.run()
    return kernels, fuser.decisions


@register_pass("fuse", FuseOptions, requires={"canonical"}, ensures={"fused"}, preserves={"canonical", "decomposed"})
def fuse(program: Program, options: FuseOptions, ctx: PassContext) -> Program:
    """Group nodes into kernels: elementwise chains, prologues/epilogues, reductions, siblings, attention."""
    kernels, decisions = fuse_graph(program.graph, options)
    before = io_bytes_unfused(program.graph)
    after = sum(k.io_bytes for k in kernels)
    ctx.stat("fuse", "nodes", len(program.graph.nodes))
    ctx.stat("fuse", "kernels", len(kernels))
    for template in templates():
        ctx.stat("fuse", f"{template.name} kernels", sum(k.kind == template.name for k in kernels))
    ctx.stat("fuse", "merges taken", sum(d.accepted for d in decisions))
    ctx.stat("fuse", "merges refused", sum(not d.accepted for d in decisions))
    ctx.stat("fuse", "bytes before", before)
    ctx.stat("fuse", "bytes after", after)
    return replace(program, kernels=tuple(kernels), properties=program.properties | {"fused"},
                   notes={**program.notes, "fusion": decisions})


def io_bytes_unfused(graph: Graph) -> int:
    """Off-chip bytes when every node is its own kernel."""
    return sum(io_bytes([n]) for n in graph.nodes)


def _kernel_problems(program: Program):
    """Property "fused": every kernel has a loop nest (its nodes align, or its template matches them)."""
    for kernel in program.kernels:
        try:
            kernel.domain
        except (Misaligned, ValueError) as e:
            yield f"kernel {kernel.name} ({kernel.kind}) has no loop nest: {e}"


register_property_check("fused", _kernel_problems)


__all__ = ["fuse", "FuseOptions", "fuse_graph", "io_bytes", "io_bytes_unfused", "recompute"]
