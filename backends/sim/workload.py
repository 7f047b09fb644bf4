"""What one kernel asks of the accelerator: GEMMs for the PE array, operations for the vector unit, tile steps.

Every contraction (matmul, batch_matmul) and conv2d node runs on the array as a GEMM (SCALE-Sim's
mapping: M output pixels/rows, N filters/columns, K window/reduction); every other node runs on
the vector unit: its flops, or one operation per result element for a data move (transpose,
slice, concat, gather, ...); reshapes and constants are free.

Steps: the granularity at which transfers overlap compute. At least one per tile the tiling pass
chose (a tile's data is loaded before it is computed). Within a tile the work still streams: the
array consumes its streamed operand row by row over T and fold after fold (as SCALE-Sim's
double-buffered SRAMs are fed), the vector unit element by element; so a kernel with few tiles is
cut into sub-tile steps of at least SUBTILE_BYTES of I/O: with two buffers a step must outlast
one DRAM latency to hide it, and 32 KiB does on every preset (their latency x bandwidth is at
most 7.2 KB) while still overlapping the loads of big single-tile kernels. Capped at MAX_STEPS
so the command stream stays small. Steps depend only on the kernel and its tiles, never on the accelerator's DRAM bandwidth,
latency or buffering, so changing those changes only the timing of one command stream.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tilegraph.ir.graph import Node
from tilegraph.ir.program import Kernel

from .array import Gemm

FREE_OPS = frozenset({"reshape", "constant"})
ARRAY_OPS = frozenset({"matmul", "batch_matmul", "conv2d"})
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
    tiles: int  # tiles the tiling pass's sizes give (1 when untiled)
    steps: int  # simulated steps (see the module docstring)

    @property
    def macs(self) -> int:
        return sum(g.macs for g in self.gemms)


def node_gemm(node: Node) -> Gemm:
    """The GEMM of a matmul, batch_matmul or conv2d node."""
    space = node.iteration_space()
    extents = space.extents
    if node.op == "conv2d":
        n, groups, f, oh, ow, c, kh, kw = extents
        return Gemm(n * oh * ow, f, c * kh * kw, groups)
    *batch, m, n, k = extents
    count = math.prod(batch)
    if node.op == "matmul" and all(d == 1 for d in node.inputs[1].type.shape[:-2]):
        return Gemm(count * m, n, k)  # shared weights: the batch joins the rows
    return Gemm(m, n, k, count)


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
    from tilegraph.passes.fusion import kernel_domain_of

    extents = {loop.name: loop.extent for loop in kernel_domain_of(kernel).loops}
    return math.prod(math.ceil(extents.get(name, size) / max(1, size)) for name, size in kernel.tiles)


def kernel_work(kernel: Kernel) -> KernelWork:
    """The kernel's array and vector work and its simulated steps."""
    gemms = tuple(node_gemm(n) for n in kernel.nodes if n.op in ARRAY_OPS)
    vector = sum(node_vector_ops(n) for n in kernel.nodes if n.op not in ARRAY_OPS)
    tiles = kernel_tiles(kernel)
    parts = math.ceil(kernel.io_bytes / SUBTILE_BYTES)
    return KernelWork(kernel.name, tuple(n.op for n in kernel.nodes), gemms, vector, kernel.flops, tiles,
                      max(1, min(max(tiles, parts), MAX_STEPS)))
