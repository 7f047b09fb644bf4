"""The DRAM traffic of streamed tensors: tensors a memory plan leaves out, moved tile by tile.

One implementation for the memory planner (which records the traffic in `MemoryPlan.stream_events`)
and the simulator (which replays it, or counts it itself for plans that did not record it). A
streamed tensor stays in DRAM: its producer writes it tile by tile and every consumer reads it tile
by tile as its tiling dictates, re-reading a tile whenever a loop it depends on, or one outside it,
advances (the tile traffic model of `ir.tile_model`). Also here: the smallest scratchpad a kernel
runs in with every tensor streamed, and the bytes of each operand a kernel surely reads.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from .domain import Access
from .memory_plan import TransferEvent
from .program import Kernel, Program
from .target import Target
from .tile_model import candidates, evaluate, footprint, loop_orders, moves, thin

MAX_CANDIDATES = 4096  # tilings tried per kernel with streamed tensors
MAX_POINTS = 1 << 21  # an axis expression over more loop points than this is not enumerated


def stream_target(target: Target) -> Target:
    """The target streamed tiles are chosen for: double-buffered whatever the program's buffering,
    so that the tiles' traffic (and the plan recording it) does not depend on the buffering."""
    return dataclasses.replace(target, double_buffer=True)


def stream_bytes(kernel: Kernel, tensors: frozenset[str], target: Target,
                 search: bool = True) -> dict[tuple[str, str], int]:
    """DRAM bytes the kernel moves for each streamed tensor, as {(tensor, "load"|"store"): bytes}.

    From the kernel's loop domain: each access's tile footprint (in whole transfer lines) times how
    often the tile is (re)loaded or stored in the tiles' loop order, for the tiling that moves the
    least of the streamed tensors among the kernel's own and every candidate that fits the
    scratchpad (`target`). The tile pass minimises all off-chip traffic, tensors the plan keeps
    resident included; charging the streamed ones by its tiling alone would let a bigger
    scratchpad pick tiles that move more of them. Without `search`, the kernel's own tiles. A
    kernel without loops (a layout copy) moves each streamed operand once.
    """
    wanted = {v.name for v in kernel.inputs + kernel.outputs if v.name in tensors}
    if not wanted:
        return {}
    out: dict[tuple[str, str], int] = {}
    domain = kernel.domain
    if not domain.structured or not domain.loops:
        for v in kernel.inputs:
            if v.name in wanted:
                out[v.name, "load"] = v.type.nbytes
        for v in kernel.outputs:
            if v.name in wanted:
                out[v.name, "store"] = v.type.nbytes
        return out
    if search:
        tiles, order = least_streamed_tiling(kernel, frozenset(wanted), target)
    else:
        sizes = dict(kernel.tiles)
        tiles = np.array([[sizes.get(loop.name, loop.extent) for loop in domain.loops]], dtype=np.float64)
        names = [loop.name for loop in domain.loops]
        order = [names.index(n) for n, _ in kernel.tiles if n in names]
        order += [i for i in range(len(names)) if i not in order]
    trips = np.ceil(np.array([[loop.extent for loop in domain.loops]], dtype=np.float64) / tiles)
    for access in domain.accesses:
        if access.role == "internal" or access.value.name not in wanted:
            continue
        size = float(footprint(access, tiles, target.line_bytes)[0] * moves(access, trips, order)[0])
        key = (access.value.name, "load" if access.role == "input" else "store")
        out[key] = out.get(key, 0) + math.ceil(size)
    return out


def _grid(kernel: Kernel) -> np.ndarray:
    """The kernel's own tiles (row 0), then the tile pass's candidate grid (thinned)."""
    domain = kernel.domain
    sizes = dict(kernel.tiles)
    own = np.array([[sizes.get(loop.name, loop.extent) for loop in domain.loops]], dtype=np.float64)
    cands = thin([candidates(loop.extent, loop.kind) for loop in domain.loops], MAX_CANDIDATES)
    grid = np.stack(np.meshgrid(*[np.array(c, dtype=np.float64) for c in cands], indexing="ij"), -1)
    return np.concatenate([own, grid.reshape(-1, len(domain.loops))])


def least_streamed_tiling(kernel: Kernel, wanted: frozenset[str], target: Target) -> tuple[np.ndarray, list[int]]:
    """(tile sizes as a 1 x loops array, loop order) moving the least of `wanted`: the kernel's own
    tiles or a candidate of the tile pass's grid whose working set fits `target`."""
    domain = kernel.domain
    grid = _grid(kernel)
    costs = evaluate(domain, target, grid, counted=wanted)
    fits = np.flatnonzero(costs.working_set <= target.onchip_bytes)
    pick = 0 if not len(fits) else int(fits[np.argmin(costs.traffic[fits])])
    if costs.traffic[pick] >= costs.traffic[0]:
        pick = 0  # the kernel's own tiles unless a candidate moves less
    return grid[pick:pick + 1], loop_orders(domain)[costs.order[pick]]


def stream_traffic(program: Program, order: Sequence[str], tensors: frozenset[str], target: Target,
                   search: bool = True) -> tuple[TransferEvent, ...]:
    """The streamed tensors' DRAM transfers, kernel by kernel in `order` (step t runs `order[t]`).

    Per (step, tensor, load|store) one event, or two: the compulsory part, then the rest. The first
    bytes of a streamed graph input or weight its first reader moves, and the bytes of a streamed
    graph output its producer writes, up to the tensor's size, are compulsory; the rest are tile
    re-reads (non-compulsory)."""
    if not tensors:
        return ()
    values = {v.name: v for v in program.tensors()}
    outputs = {v.name for v in program.graph.outputs}
    by_name = {k.name: k for k in program.kernels}
    seen: set[str] = set()
    events: list[TransferEvent] = []
    for step, name in enumerate(order):
        for (tensor, kind), size in sorted(stream_bytes(by_name[name], tensors, target, search).items()):
            value = values[tensor]
            first = (kind == "load" and value.producer is None and tensor not in seen) or \
                    (kind == "store" and tensor in outputs)
            comp = min(size, value.type.nbytes) if first else 0
            if kind == "load":
                seen.add(tensor)
            if comp:
                events.append(TransferEvent(step, kind, tensor, comp, True))
            if size > comp:
                events.append(TransferEvent(step, kind, tensor, size - comp, False))
    return tuple(events)


def min_tile_working_set(kernel: Kernel, target: Target) -> int:
    """The smallest scratchpad the kernel runs in with every operand streamed by tiles: the least
    working set (each operand's tile in whole lines, times the target's buffers, plus internal
    tiles) over its own tiles and the tile pass's candidate grid. A kernel without loops (a layout
    copy) needs one line of each operand, per buffer."""
    domain = kernel.domain
    if not domain.structured or not domain.loops:
        return target.buffers * target.line_bytes * len(kernel.inputs + kernel.outputs)
    costs = evaluate(domain, target, _grid(kernel))
    return int(math.ceil(float(np.min(costs.working_set))))


def _touched(access: Access, extents: list[int]) -> int:
    """A lower bound on the elements `access` touches: per axis the distinct in-range indices its
    expression takes (1 where there are too many loop points to list), multiplied (an op never
    indexes two axes by one loop)."""
    count = 1
    for axis in range(len(access.map.exprs)):
        values = axis_indices(access, axis, extents)
        if values is not None:
            count *= len(values)
    return count


def axis_indices(access: Access, axis: int, extents: list[int]) -> np.ndarray | None:
    """The in-range indices of `axis` the access takes over the loop domain, sorted (None: too many
    loop points to list)."""
    expr = access.map.exprs[axis]
    size = access.value.type.shape[axis]
    terms = [(extents[loop], coeff) for loop, coeff in expr.terms if extents[loop] > 1]
    if math.prod(e for e, _ in terms) > MAX_POINTS:
        return None
    values = np.full((1,) * max(1, len(terms)), expr.const, dtype=np.int64)
    for k, (extent, coeff) in enumerate(terms):
        shape = [1] * len(terms)
        shape[k] = extent
        values = values + coeff * np.arange(extent).reshape(shape)
    values = np.unique(values)
    return values[(values >= 0) & (values < size)]


def read_at_least(kernel: Kernel) -> dict[str, int]:
    """Per input of the kernel: bytes it surely reads (distinct elements its accesses touch; the
    whole tensor for a kernel without loops). Any tiling moves at least these bytes of it."""
    domain = kernel.domain
    if not domain.structured or not domain.loops:
        return {v.name: v.type.nbytes for v in kernel.inputs}
    extents = [loop.extent for loop in domain.loops]
    out: dict[str, int] = {}
    for access in domain.accesses:
        if access.role == "input":
            size = _touched(access, extents) * access.value.type.dtype.itemsize
            out[access.value.name] = max(out.get(access.value.name, 0), size)
    return out


__all__ = ["MAX_CANDIDATES", "stream_target", "stream_bytes", "least_streamed_tiling", "stream_traffic",
           "min_tile_working_set", "read_at_least"]
