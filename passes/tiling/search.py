"""Choosing tile sizes: enumerate candidate tilings, keep those that fit, take the least traffic.

Candidates per loop: powers of two below the extent, and the extent itself (full loops: only the
extent). When the grid of combinations exceeds `max_candidates`, the loops with the most
candidates lose every other intermediate size until it fits. Among the tilings whose working set
fits the target's budget, the choice minimises traffic, then maximises parallelism (tiles of the
parallel loops, counted up to the target's parallel units), then takes the fewest tiles (the
least per-tile overhead).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tilegraph.ir.target import Target

from ..fusion.domain import FULL, KernelDomain
from .model import evaluate, loop_orders


@dataclass(frozen=True)
class Tiling:
    """One chosen tiling: tile size per kernel loop, loop order (outermost first) and its costs."""

    tiles: tuple[int, ...]
    order: tuple[int, ...]
    working_set: int
    traffic: int
    parallel: int


def candidates(extent: int, kind: str) -> list[int]:
    if kind == FULL or extent <= 1:
        return [extent]
    sizes = [1 << k for k in range(max(1, extent.bit_length())) if (1 << k) < extent]
    return sizes + [extent]


def _thin(cands: list[list[int]], limit: int) -> list[list[int]]:
    cands = [list(c) for c in cands]
    while math.prod(len(c) for c in cands) > limit:
        widest = max(range(len(cands)), key=lambda i: len(cands[i]))
        c = cands[widest]
        if len(c) <= 2:
            break
        middle = c[1:-1]
        cands[widest] = [c[0]] + middle[1::2] + [c[-1]]
    return cands


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
    cands = _thin([candidates(loop.extent, loop.kind) for loop in loops], max_candidates)
    grid = np.stack(np.meshgrid(*[np.array(c, dtype=np.float64) for c in cands], indexing="ij"), -1)
    grid = grid.reshape(-1, len(loops))
    costs = evaluate(domain, target, grid)
    fits = np.flatnonzero(costs.working_set <= budget)
    if fits.size == 0:
        return None
    units = np.minimum(costs.parallel[fits], target.parallel_units)
    count = np.prod(np.ceil(np.array([loop.extent for loop in loops], dtype=np.float64) / grid[fits]), axis=1)
    pick = fits[np.lexsort((count, -units, costs.traffic[fits]))[0]]
    order = loop_orders(domain)[costs.order[pick]]
    return Tiling(tuple(int(t) for t in grid[pick]), full_order(domain, order), int(costs.working_set[pick]),
                  int(costs.traffic[pick]), int(costs.parallel[pick]))


def cost_of(domain: KernelDomain, target: Target, tiles: dict[str, int]) -> Tiling:
    """The costs of given tile sizes (loops not named are whole)."""
    row = np.array([[tiles.get(loop.name, loop.extent) for loop in domain.loops]], dtype=np.float64)
    costs = evaluate(domain, target, row.reshape(1, len(domain.loops)))
    order = loop_orders(domain)[costs.order[0]] if domain.loops else []
    return Tiling(tuple(int(t) for t in row[0]), full_order(domain, order), int(costs.working_set[0]),
                  int(costs.traffic[0]), int(costs.parallel[0]))


__all__ = ["Tiling", "search", "cost_of", "candidates"]
