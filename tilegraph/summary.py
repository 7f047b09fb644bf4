"""What `tilegraph check` prints about a graph: ops, params, flops and bytes."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from tilegraph.ir import Graph
from tilegraph.ir.units import format_bytes, parse_bytes


@dataclass(frozen=True)
class GraphSummary:
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    op_counts: tuple[tuple[str, int], ...]
    param_count: int
    param_bytes: int
    flops: int
    bytes_moved: int  # every node reading its operands and writing its results off-chip

    @staticmethod
    def of(graph: Graph) -> GraphSummary:
        counts = Counter(node.op for node in graph.nodes)
        return GraphSummary(
            name=graph.name,
            inputs=tuple(f"%{v.name}: {v.type}" for v in graph.inputs),
            outputs=tuple(f"%{v.name}: {v.type}" for v in graph.outputs),
            op_counts=tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
            param_count=sum(v.type.numel for v in graph.params),
            param_bytes=sum(v.type.nbytes for v in graph.params),
            flops=sum(node.flops() for node in graph.nodes),
            bytes_moved=sum(node.bytes() for node in graph.nodes),
        )

    def lines(self) -> list[str]:
        ops = ", ".join(f"{op} x{n}" for op, n in self.op_counts) or "none"
        total = sum(n for _, n in self.op_counts)
        return [
            f"@{self.name}: valid",
            f"  inputs:  {', '.join(self.inputs) or 'none'}",
            f"  outputs: {', '.join(self.outputs)}",
            f"  nodes:   {total} ({ops})",
            f"  params:  {self.param_count:,} elements, {format_bytes(self.param_bytes)}",
            f"  flops:   {format_count(self.flops)}",
            f"  bytes:   {format_bytes(self.bytes_moved)} moved op by op (unfused)",
        ]


def format_count(n: int) -> str:
    for unit, size in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return str(n)


