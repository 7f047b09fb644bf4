"""Choosing tile sizes: enumerate candidate tilings, keep those that fit, take the least traffic.

Candidates per loop: powers of two below the extent, and the extent itself (full loops: only the
extent). When the grid of combinations exceeds `max_candidates`, the loops with the most
candidates lose every other intermediate size until it fits. Among the tilings whose working set
fits the target's budget, the choice minimises traffic, then maximises parallelism (tiles of the
parallel loops, counted up to the target's parallel units), then takes the fewest tiles (the
least per-tile overhead). On a target with a matrix unit (a GPU's tensor cores), a contraction's
tile must give the unit at least `matrix_unit` rows, columns and reduction depth (or the whole
extent, if smaller), whenever some fitting tiling does: a narrower tile runs on scalar cores; and
on a GPU, parallelism (up to its multiprocessors) comes before traffic.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilegraph.ir.ops.registry import CONTRACTION, WINDOW
from tilegraph.ir.target import Target

from tilegraph.ir.domain import FULL, KernelDomain
from tilegraph.ir.tile_model import candidates, evaluate, loop_orders, thin


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
           budget: int | None = None) -> Tiling | None:
    """The best fitting tiling, or None when not even the smallest tiles fit."""
    budget = target.onchip_bytes if budget is None else budget
    loops = domain.loops
    if not loops:
        costs = evaluate(domain, target, np.ones((1, 0)))
        if costs.working_set[0] > budget:
            return None
        return Tiling((), (), int(costs.working_set[0]), int(costs.traffic[0]), 1)
    cands = thin([candidates(loop.extent, loop.kind) for loop in loops], max_candidates)
    grid = np.stack(np.meshgrid(*[np.array(c, dtype=np.float64) for c in cands], indexing="ij"), -1)
    grid = grid.reshape(-1, len(loops))
    costs = evaluate(domain, target, grid)
    fitting = costs.working_set <= budget
    if not fitting.any():
        return None
    feeds_unit = fitting & feeds_matrix_unit(domain, target, grid)
    fits = np.flatnonzero(feeds_unit if feeds_unit.any() else fitting)
    units = np.minimum(costs.parallel[fits], target.parallel_units)
    count = np.prod(np.ceil(np.array([loop.extent for loop in loops], dtype=np.float64) / grid[fits]), axis=1)
    if target.kind == "gpu":  # idle multiprocessors cost more than traffic that the L2 mostly serves
        pick = fits[np.lexsort((count, costs.traffic[fits], -units))[0]]
    else:
        pick = fits[np.lexsort((count, -units, costs.traffic[fits]))[0]]
    order = loop_orders(domain)[costs.order[pick]]
    return Tiling(tuple(int(t) for t in grid[pick]), full_order(domain, order), int(costs.working_set[pick]),
                  int(costs.traffic[pick]), int(costs.parallel[pick]))


def matrix_groups(domain: KernelDomain) -> list[tuple[frozenset[int], frozenset[int], frozenset[int]]]:
    """The (M, N, K) kernel-loop groups of each two-operand contraction (matmul: i / j / k; conv2d as an
    implicit GEMM: n, oh, ow / f / c, kh, kw)."""
    groups = []
    for i, (node, space) in enumerate(zip(domain.nodes, domain.spaces)):
        if space is None or node.opdef.category not in (CONTRACTION, WINDOW) or len(space.inputs) < 2:
            continue
        a, b = (frozenset(d for e in domain.compose_map(i, amap).exprs for d, _ in e.terms)
                for amap in space.inputs[:2])
        k = domain.reduces(i)
        if k and a - k - b and b - k - a:
            groups.append((a - k - b, b - k - a, k))
    return groups


def feeds_matrix_unit(domain: KernelDomain, target: Target, grid: np.ndarray) -> np.ndarray:
    """Per candidate tiling: every contraction's M, N and K tiles reach the target's matrix unit."""
    ok = np.ones(grid.shape[0], dtype=bool)
    if not target.matrix_unit:
        return ok
    extents = np.array([loop.extent for loop in domain.loops], dtype=np.float64)
    for group in matrix_groups(domain):
        for loops in map(sorted, group):
            ok &= np.prod(grid[:, loops], axis=1) >= min(target.matrix_unit, np.prod(extents[loops]))
    return ok


def cost_of(domain: KernelDomain, target: Target, tiles: dict[str, int]) -> Tiling:
    """The costs of given tile sizes (loops not named are whole)."""
    row = np.array([[tiles.get(loop.name, loop.extent) for loop in domain.loops]], dtype=np.float64)
    costs = evaluate(domain, target, row.reshape(1, len(domain.loops)))
    order = loop_orders(domain)[costs.order[0]] if domain.loops else []
    return Tiling(tuple(int(t) for t in row[0]), full_order(domain, order), int(costs.working_set[0]),
                  int(costs.traffic[0]), int(costs.parallel[0]))


__all__ = ["Tiling", "search", "cost_of", "candidates"]
