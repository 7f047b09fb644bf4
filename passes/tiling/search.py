"""Choosing tile sizes: enumerate candidate tilings, keep those that fit, take the least traffic.

Candidates per loop: powers of two below the extent, and the extent itself (full loops: only the
extent). When the grid of combinations exceeds `max_candidates`, the loops with the most
candidates lose every other intermediate size until it fits. Among the tilings whose working set
fits the target's budget, the choice minimises traffic, then maximises parallelism (tiles of the
parallel loops, counted up to the target's parallel units), then takes the fewest tiles (the
least per-tile overhead); on a CPU, a kernel with BUSY_SECONDS of compute on one unit first drops the
tilings that leave units idle. On a target with a matrix unit (a GPU's tensor cores), a contraction's
tile must give the unit at least `matrix_unit` rows, columns and reduction depth (or the whole
extent, if smaller), whenever some fitting tiling does: a narrower tile runs on scalar cores; a GPU
tiling's accumulators must fit half its registers (`tile_model.accumulators_fit`). Among
those, a tiling whose contractions run K over one loop (a convolution's kh, kw walked one at a time),
the result's contiguous loop tiled, is kept (`straight_operands(rows_too=False)`): several K loops make a
gathered block reshaped in registers (the ResNet block's 3x3 convolution: 255 registers and 432
cp.async per program for K = 4 x 3 x 3 padded to 64 lanes, against 130 and 320 straight, per
`nvdisasm` of the sm_90 build). On a GPU the choice then ranks, in order: for a kernel without a dot, a
working set within `REGISTER_TILE` (its tile lives in registers); parallelism (up to its
multiprocessors); dots whose M and N blocks are `matrix_block` wide (gpu-h100: 64); M and N over one
loop each (`straight_operands`); for a wide dot tile that keeps its SM to itself (over half the
budget), a last wave at least `tile_model.WAVE_FILL` full (`ragged`: ViT's MLP-down matmul took
128 x 256, 150 programs on 132 SMs, two waves 57% full; now 128 x 128, three waves 76% full); traffic.
Width before straightness: ResNet-50's convolutions at 14 x 14 took one image row, 16 lanes on
mma.sync, re-reading all their weights per 14 pixels; now rows over several images and image rows, on
wgmma (the Triton backend loads such a side as one 2-D block, its lanes numbered flat). Width before
traffic: the traffic model alone gave ViT's 197-token attention 16 query rows a program, too few for wgmma.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tilegraph.ir.ops.registry import WINDOW
from tilegraph.ir.target import Target

from tilegraph.ir.domain import FULL, KernelDomain, downstream
from tilegraph.ir.graph import Value
from tilegraph.ir.tile_model import (accumulators_fit, candidates, contractions, evaluate, feeds_matrix_unit,
                                     loop_orders, matrix_groups, ragged, thin)


@dataclass(frozen=True)
class Tiling:
    """One chosen tiling: tile size per kernel loop, loop order (outermost first) and its costs."""

    tiles: tuple[int, ...]
    order: tuple[int, ...]
    working_set: int
    traffic: int
    parallel: int


def full_order(domain: KernelDomain, order: list[int]) -> tuple[int, ...]:
    """The execution order with the full loops appended (they have one trip)."""
    return tuple(order) + tuple(domain.loops_of_kind(FULL))


def search(domain: KernelDomain, target: Target, max_candidates: int = 200_000,
           budget: int | None = None, orders: Mapping[Value, Sequence[int]] | None = None) -> Tiling | None:
    """The best fitting tiling, or None when not even the smallest tiles fit. `orders`: tensors stored in
    another order than row-major (`Program.layouts`)."""
    budget = target.onchip_bytes if budget is None else budget
    loops = domain.loops
    if not loops:
        costs = evaluate(domain, target, np.ones((1, 0)), orders=orders)
        if costs.working_set[0] > budget:
            return None
        return Tiling((), (), int(costs.working_set[0]), int(costs.traffic[0]), 1)
    cands = thin([candidates(loop.extent, loop.kind) for loop in loops], max_candidates)
    grid = np.stack(np.meshgrid(*[np.array(c, dtype=np.float64) for c in cands], indexing="ij"), -1)
    grid = grid.reshape(-1, len(loops))
    costs = evaluate(domain, target, grid, orders=orders)
    fitting = (costs.working_set <= budget) & accumulators_fit(domain, target, grid)
    if not fitting.any():
        return None
    feeds_unit = fitting & feeds_matrix_unit(domain, target, grid)
    straight_k = feeds_unit & straight_operands(domain, target, grid, rows_too=False, orders=orders)
    fits = np.flatnonzero(straight_k if straight_k.any() else feeds_unit if feeds_unit.any() else fitting)
    units = np.minimum(costs.parallel[fits], target.parallel_units)
    count = np.prod(np.ceil(np.array([loop.extent for loop in loops], dtype=np.float64) / grid[fits]), axis=1)
    gathered = ~straight_operands(domain, target, grid[fits], orders=orders)
    if target.kind == "gpu":  # idle multiprocessors cost more than traffic that the L2 mostly serves
        narrow = ~feeds_matrix_unit(domain, target, grid[fits], target.matrix_block)
        has_dot = any(contractions(domain))
        # a kernel without a dot holds its tile in registers, not shared memory
        spills = costs.working_set[fits] > REGISTER_TILE if not has_dot else np.zeros(len(fits))
        # a wide dot tile keeping its SM to itself runs in waves of one program an SM: a last wave mostly idle
        alone = ~narrow & (2 * costs.working_set[fits] > target.onchip_bytes) & has_dot
        idle = alone & (costs.parallel[fits] > target.parallel_units) & ragged(costs.parallel[fits],
                                                                               target.parallel_units)
        pick = fits[np.lexsort((count, costs.traffic[fits], idle, gathered, narrow, -units, spills))[0]]
    else:
        if _busy_for_every_unit(domain, target):  # enough work: no tiling that leaves cores idle
            keep = units >= units.max()
            fits, units, count, gathered = fits[keep], units[keep], count[keep], gathered[keep]
        pick = fits[np.lexsort((count, -units, costs.traffic[fits], gathered))[0]]
    order = loop_orders(domain)[costs.order[pick]]
    return Tiling(tuple(int(t) for t in grid[pick]), full_order(domain, order), int(costs.working_set[pick]),
                  int(costs.traffic[pick]), int(costs.parallel[pick]))


# Working-set bytes of a GPU kernel without tl.dot that its registers hold well: MobileNetV2's depthwise
# convolutions took 100-224 KiB tiles (the shared-memory budget), 165-255 registers a thread in the sm_90
# build, one or two programs an SM for a memory-bound kernel
REGISTER_TILE = 64 << 10
BUSY_SECONDS = 1e-3  # a kernel with this much compute on one unit is tiled to keep every unit busy


def _busy_for_every_unit(domain: KernelDomain, target: Target) -> bool:
    """Whether the kernel's compute on one of the target's units takes BUSY_SECONDS or more. Least traffic
    alone kept a 197 x 3072 x 768 matmul (ViT's MLP down) in one tile, on one core: 6.8 ms on 1 thread and
    on 2."""
    if not target.peak_flops:
        return False
    return sum(node.flops() for node in domain.nodes) * target.parallel_units / target.peak_flops >= BUSY_SECONDS


def straight_operands(domain: KernelDomain, target: Target, grid: np.ndarray, rows_too: bool = True,
                      orders: Mapping[Value, Sequence[int]] | None = None) -> np.ndarray:
    """Per candidate tiling: on a target with a matrix unit, every contraction's M, N and K groups (with
    `rows_too` False, its K group only) have at most one loop tiled wider than 1, and its result's
    innermost (contiguous) loop is tiled wider than 1;
    a window that is no contraction (a depthwise convolution, a pooling) walks its window loops one at
    a time (elsewhere every tiling is). The second keeps stores, and the loads of the operand sharing
    that loop, coalesced: a 1x1 convolution at 7x7 would otherwise run M over the batch, one element per
    memory sector. The third keeps a program's block to its outputs: MobileNetV2's first depthwise
    convolution took its 3 x 3 window whole as 4 x 4 lanes, 255 registers in the sm_90 build, 128 walked."""
    ok = np.ones(grid.shape[0], dtype=bool)
    if not target.matrix_unit:
        return ok
    dots = set()
    for i, m, n, k in contractions(domain):
        dots.add(i)
        for loops in map(sorted, (m, n, k) if rows_too else (k,)):
            ok &= np.count_nonzero(grid[:, loops] > 1, axis=1) <= 1
        for loop, _ in _stored_innermost(domain, i, orders or {}).terms:
            if domain.loops[loop].extent > 1:
                ok &= grid[:, loop] > 1
    for i, node in enumerate(domain.nodes):  # a depthwise convolution or a pooling walks its window
        if i not in dots and domain.spaces[i] is not None and node.opdef.category == WINDOW:
            ok &= np.all(grid[:, sorted(domain.reduces(i))] == 1, axis=1)
    return ok


def _stored_innermost(domain: KernelDomain, i: int, orders: Mapping[Value, Sequence[int]]):
    """The expression over kernel loops of node i's result's contiguous axis; where the kernel stores that result
    in another order (channels-last), itself or through the ops after it (a convolution's batch norm and ReLU),
    the stored value's contiguous axis."""
    result = domain.nodes[i].result
    reached = {result, *(v for j in downstream(domain)[i] for v in domain.nodes[j].results)}
    stored = [a for a in domain.accesses if a.role == "output" and a.value in orders and a.value in reached
              and a.value.type.shape == result.type.shape]
    if stored:
        return stored[0].map.exprs[orders[stored[0].value][-1]]
    return domain.compose(i, domain.spaces[i].outputs[0].exprs[-1])


def cost_of(domain: KernelDomain, target: Target, tiles: dict[str, int],
            orders: Mapping[Value, Sequence[int]] | None = None) -> Tiling:
    """The costs of given tile sizes (loops not named are whole)."""
    row = np.array([[tiles.get(loop.name, loop.extent) for loop in domain.loops]], dtype=np.float64)
    costs = evaluate(domain, target, row.reshape(1, len(domain.loops)), orders=orders)
    order = loop_orders(domain)[costs.order[0]] if domain.loops else []
    return Tiling(tuple(int(t) for t in row[0]), full_order(domain, order), int(costs.working_set[0]),
                  int(costs.traffic[0]), int(costs.parallel[0]))


__all__ = ["Tiling", "search", "cost_of", "candidates", "feeds_matrix_unit", "matrix_groups"]
