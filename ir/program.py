"""The scheduled IR: a Graph plus the decisions of later passes, each a plain data object.

A `Kernel` is a convex group of nodes that runs as one unit; the `Program` lists kernels in
execution order. Tensors are the values that cross kernel boundaries (plus graph inputs,
params and outputs): they are what memory planning and placement move around.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from .domain import KernelDomain, aligned_domain
from .graph import Graph, Node, Value
from .memory_plan import MemoryPlan
from .placement import Placement
from .target import Target
from .templates import GENERIC, KernelTemplate, get_template


@dataclass(frozen=True)
class Kernel:
    """A fused group of nodes, in a valid order, run as one unit.

    `tiles` maps loop names to tile sizes once the tiling pass has run (empty before), outermost
    loop first. `kind` says how the kernel runs: "generic" (the nodes' loop nests, fused) or the
    name of a registered kernel template (`ir.templates`, e.g. "attention": FlashAttention).
    """

    name: str
    nodes: tuple[Node, ...]
    tiles: tuple[tuple[str, int], ...] = ()
    kind: str = GENERIC

    @property
    def template(self) -> KernelTemplate | None:
        """The kernel template this kernel follows; None for a generic kernel."""
        return get_template(self.kind)

    def with_tiles(self, tiles: Sequence[tuple[str, int]]) -> Kernel:
        """This kernel with `tiles`; its loop nest, which tiles do not change, carries over uncomputed."""
        tiled = replace(self, tiles=tuple(tiles))
        if "domain" in self.__dict__:
            tiled.__dict__["domain"] = self.__dict__["domain"]
        return tiled

    @cached_property
    def domain(self) -> KernelDomain:
        """The kernel's loop nest: its template's, or the nodes' iteration spaces aligned (computed once)."""
        template = self.template
        return aligned_domain(self.nodes) if template is None else template.kernel_domain(self.nodes)

    @property
    def node_set(self) -> frozenset[Node]:
        return frozenset(self.nodes)

    @property
    def inputs(self) -> tuple[Value, ...]:
        """Values read by the kernel but defined outside it, in first-use order."""
        inside = self.node_set
        seen: dict[Value, None] = {}
        for node in self.nodes:
            for value in node.inputs:
                if value.producer not in inside:
                    seen[value] = None
        return tuple(seen)

    @property
    def outputs(self) -> tuple[Value, ...]:
        """Values defined in the kernel and read outside it (or returned by the graph)."""
        inside = self.node_set
        graph_outputs = set(self.nodes[0].graph.outputs) if self.nodes else set()
        return tuple(v for node in self.nodes for v in node.results
                     if v in graph_outputs or any(u not in inside for u in v.users))

    @property
    def flops(self) -> int:
        return sum(node.flops() for node in self.nodes)

    @property
    def io_bytes(self) -> int:
        """Bytes the kernel reads and writes off-chip when its intermediates stay inside."""
        return sum(v.type.nbytes for v in self.inputs) + sum(v.type.nbytes for v in self.outputs)

    def tile_sizes(self) -> dict[str, int]:
        return dict(self.tiles)

    def __repr__(self) -> str:
        return f"<Kernel {self.name}: {', '.join(n.op for n in self.nodes)}>"


@dataclass(frozen=True)
class Program:
    """A Graph with its kernels in execution order and every decision the passes made about it.

    `layouts` gives the storage order (axes outermost first) of tensors between kernels that are not
    stored row-major (the layout pass: channels-last activations); `target` is what the kernels were
    tiled for (the tile pass), `memory_plan` and `placement` come from the memplan and place passes;
    `properties` names what passes have established ("canonical", "fused", "tiled", ...). All of these
    print to and parse from the `.tgir` text. `notes` is report-only (fusion decisions, tiling
    statistics): nothing downstream reads it.
    """

    graph: Graph
    kernels: tuple[Kernel, ...]
    layouts: tuple[tuple[Value, tuple[int, ...]], ...] = ()
    target: Target | None = None
    memory_plan: MemoryPlan | None = None
    placement: Placement | None = None
    properties: frozenset[str] = frozenset()
    notes: dict[str, Any] = field(default_factory=dict, compare=False)

    @staticmethod
    def unfused(graph: Graph) -> Program:
        """One kernel per node, in graph order: the starting point before fusion."""
        return Program(graph, tuple(Kernel(f"k{i}", (node,)) for i, node in enumerate(graph.nodes)))

    def with_kernels(self, kernels: Sequence[Kernel]) -> Program:
        return replace(self, kernels=tuple(kernels))

    def tensors(self) -> list[Value]:
        """Every value that lives outside a kernel: inputs, params, kernel outputs."""
        values: dict[Value, None] = dict.fromkeys(self.graph.inputs)
        values.update(dict.fromkeys(self.graph.params))
        for kernel in self.kernels:
            values.update(dict.fromkeys(kernel.outputs))
        return list(values)

    def kernel_of(self) -> dict[Node, Kernel]:
        return {node: kernel for kernel in self.kernels for node in kernel.nodes}

    def storage_orders(self) -> dict[Value, tuple[int, ...]]:
        """`layouts` as a mapping: value -> its axes in storage order (a value not in it: row-major)."""
        return dict(self.layouts)

    def layout_problem(self) -> str | None:
        """What makes `layouts` invalid, or None: each names, once, a tensor a kernel writes for other
        kernels (not a graph output, whose layout the caller fixes), with a permutation of its axes that is
        not the identity."""
        written = {v for kernel in self.kernels for v in kernel.outputs} - set(self.graph.outputs)
        seen: set[Value] = set()
        for value, order in self.layouts:
            if value in seen:
                return f"%{value.name} has two layouts"
            seen.add(value)
            if value not in written:
                return f"%{value.name} is not a tensor between kernels (only those have a layout)"
            if sorted(order) != list(range(value.type.rank)) or list(order) == sorted(order):
                return f"%{value.name}: {list(order)} is no reordering of its {value.type.rank} axes"
        return None
