"""The DRAM traffic of streamed tensors: those the memory plan leaves out, moved by tiles instead.

Which tensors are streamed is the memory plan's decision (`MemoryPlan.streamed`, made by the
memplan pass with `stream=true`). A streamed tensor stays in DRAM, its producer writes it tile by
tile, and every consumer reads it tile by tile as its tiling dictates (re-reading a tile whenever
a loop it depends on, or one outside it, advances: the tile traffic model of `ir.tile_model`).
The tile buffers of streamed operands share the scratchpad with resident tensors; the model does
not subtract them.
"""
from __future__ import annotations

import math

import numpy as np

from tilegraph.ir.program import Kernel, Program
from tilegraph.ir.target import Target
from tilegraph.ir.tile_model import candidates, evaluate, footprint, loop_orders, moves, thin

MAX_CANDIDATES = 4096  # tilings tried per kernel with streamed tensors


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


def least_streamed_tiling(kernel: Kernel, wanted: frozenset[str], target: Target) -> tuple[np.ndarray, list[int]]:
    """(tile sizes as a 1 x loops array, loop order) moving the least of `wanted`: the kernel's own
    tiles or a candidate of the tile pass's grid whose working set fits `target`."""
    domain = kernel.domain
    sizes = dict(kernel.tiles)
    own = np.array([[sizes.get(loop.name, loop.extent) for loop in domain.loops]], dtype=np.float64)
    cands = thin([candidates(loop.extent, loop.kind) for loop in domain.loops], MAX_CANDIDATES)
    grid = np.stack(np.meshgrid(*[np.array(c, dtype=np.float64) for c in cands], indexing="ij"), -1)
    grid = np.concatenate([own, grid.reshape(-1, len(domain.loops))])
    costs = evaluate(domain, target, grid, counted=wanted)
    fits = np.flatnonzero(costs.working_set <= target.onchip_bytes)
    pick = 0 if not len(fits) else int(fits[np.argmin(costs.traffic[fits])])
    if costs.traffic[pick] >= costs.traffic[0]:
        pick = 0  # the kernel's own tiles unless a candidate moves less
    return grid[pick:pick + 1], loop_orders(domain)[costs.order[pick]]


def streamed_tensors(program: Program) -> frozenset[str]:
    """Tensors the memory plan leaves out, streamed by tiles: those it streams for size, and the
    parameters when the plan was made without weights (memplan's `weights=False`)."""
    plan = program.memory_plan
    names = set(plan.streamed) if plan is not None else set()
    if plan is not None and not plan.weights:
        names |= {v.name for v in program.graph.params}
    return frozenset(names)


def stream_events(program: Program, target: Target, search: bool = True) -> dict[str, list[tuple]]:
    """Per kernel name: (kind, tensor, bytes, compulsory, streamed) of its streamed tensors' traffic.

    The first bytes of a streamed input or weight its first reader moves, and the bytes of a
    streamed graph output its producer writes, up to the tensor's size, are compulsory."""
    tensors = streamed_tensors(program)
    if not tensors:
        return {}
    values = {v.name: v for v in program.tensors()}
    outputs = {v.name for v in program.graph.outputs}
    seen: set[str] = set()
    out: dict[str, list[tuple]] = {}
    by_name = {k.name: k for k in program.kernels}
    for name in program.memory_plan.order:
        for (tensor, kind), size in sorted(stream_bytes(by_name[name], tensors, target, search).items()):
            value = values[tensor]
            first = (kind == "load" and value.producer is None and tensor not in seen) or \
                    (kind == "store" and tensor in outputs)
            comp = min(size, value.type.nbytes) if first else 0
            if kind == "load":
                seen.add(tensor)
            events = out.setdefault(name, [])
            if comp:
                events.append((kind, tensor, comp, True, False))
            if size > comp:
                events.append((kind, tensor, size - comp, False, True))
    return out
