"""What one kernel asks of the accelerator: GEMMs for the PE array, operations for the vector unit, tile steps.

Every contraction or window op with a weight operand (matmul, batch_matmul, conv2d) runs on the
array as a GEMM read off its iteration space (SCALE-Sim's mapping: K the reduction loops, N the
loops only the weight indexes, groups the loops both operands index, M the rest: output pixels or
rows); every other node runs on the vector unit: its flops, or one operation per result element
for a data move (transpose, slice, concat, gather, ...); reshapes and constants are free.

Steps: the granularity at which transfers overlap compute. The work streams within a tile: the
array consumes its streamed operand row by row over T and fold after fold (as SCALE-Sim's
double-buffered SRAMs are fed), the vector unit element by element; so a kernel is cut into steps
of at least SUBTILE_BYTES of I/O: with two buffers a step must outlast one DRAM latency to hide
it, and 32 KiB does on every preset (their latency x bandwidth is at most 7.2 KB) while still
overlapping the loads of big kernels. Capped at MAX_STEPS so the command stream stays small.
Steps depend only on the kernel's I/O bytes, never on its tiles or the accelerator: a bigger
scratchpad (bigger tiles) cannot coarsen the pipeline, and changing the DRAM bandwidth, latency or
buffering changes only the timing of one command stream.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tilegraph.ir.domain import ANCHORS
from tilegraph.ir.graph import Node
from tilegraph.ir.program import Kernel
from tilegraph.ir.structured import REDUCTION

from .array import Gemm

FREE_OPS = frozenset({"reshape", "constant"})
MAX_STEPS = 64  # tile steps simulated per kernel (consecutive tiles are grouped beyond this)
COPY_CHUNK = 4096  # bytes per step of an untiled (layout) kernel, as the tile pass streams them
SUBTILE_BYTES = 32 * 1024  # least I/O per sub-tile step (see the module docstring)


@dataclass(frozen=True)
class KernelWork:
    """The kernel's array GEMMs, vector operations, flops and the tile steps it runs in."""

    name: str
    ops: tuple[str, ...]
    gemms: tuple[Gemm, ...]
    vector_ops: int
    flops: int
    tiles: int  # tiles the tiling pass's sizes give (1 when untiled; reported, not simulated)
    steps: int  # simulated steps (see the module docstring)

    @property
    def macs(self) -> int:
        return sum(g.macs for g in self.gemms)


def runs_on_array(node: Node) -> bool:
    """A contraction or window over two operands (data and weight): a GEMM on the PE array."""
    return node.opdef.category in ANCHORS and len(node.inputs) == 2 and node.iteration_space() is not None


def node_gemm(node: Node) -> Gemm:
    """The GEMM of an array node, from its loops: K reduced, N read by the weight only, groups read by
    both operands, M the rest (a batch the weight does not have joins the rows: shared weights)."""
    space = node.iteration_space()
    data, weight = ({d for expr in amap.exprs for d, _ in expr.terms} for amap in space.inputs[:2])
    m = n = k = groups = 1
    for d, (extent, kind) in enumerate(zip(space.extents, space.kinds)):
        if kind == REDUCTION:
            k *= extent
        elif d in weight and d in data:
            groups *= extent
        elif d in weight:
            n *= extent
        else:
            m *= extent
    return Gemm(m, n, k, groups)


def node_vector_ops(node: Node) -> int:
    if node.op in FREE_OPS:
        return 0
    flops = node.flops()
    if flops > 0:
        return flops
    return sum(v.type.numel for v in node.results)


def kernel_tiles(kernel: Kernel) -> int:
    """Tiles of the kernel under its tile sizes: the product of every tiled loop's trip count."""
    if not kernel.tiles:
        return max(1, math.ceil(kernel.io_bytes / COPY_CHUNK))

    extents = {loop.name: loop.extent for loop in kernel.domain.loops}
    return math.prod(math.ceil(extents.get(name, size) / max(1, size)) for name, size in kernel.tiles)


def kernel_work(kernel: Kernel) -> KernelWork:
    """The kernel's array and vector work and its simulated steps."""
    gemms = tuple(node_gemm(n) for n in kernel.nodes if runs_on_array(n))
    vector = sum(node_vector_ops(n) for n in kernel.nodes if not runs_on_array(n))
    parts = math.ceil(kernel.io_bytes / SUBTILE_BYTES)
    return KernelWork(kernel.name, tuple(n.op for n in kernel.nodes), gemms, vector, kernel.flops,
                      kernel_tiles(kernel), max(1, min(parts, MAX_STEPS)))
