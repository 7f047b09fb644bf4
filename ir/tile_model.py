"""The analytic cost model of one tiling: working set, off-chip traffic, parallelism, lower bound.

All of it comes from the kernel's accesses (`KernelDomain.accesses`: each tensor's affine map over
kernel loops). For tile sizes t, an access's footprint on axis a is `1 + sum |c| * (t_l - 1)` over
the loops l of that axis' expression (`AffineExpr.range` over the tile), clipped to the axis size.
Off-chip tiles are counted in whole transfer lines (cache lines, DMA bursts) per contiguous run.

- working set: every access's footprint, off-chip ones times `target.buffers` (double buffering),
  in whole lines unless the tile memory holds elements only (`Target.holds_elements`: a GPU). On a
  GPU only tiles a reduction step streams are held twice (a dot's operands; its result and its
  epilogue's operands move once per tile), and internal values that a reduction step makes afresh
  count once per map (the largest): an attention's scores, scaled, masked and exponentiated at each
  key/value step, live in registers one at a time, and counting each kept Llama's 128-wide heads to 16
  query rows a program. A GPU's accumulators must also fit its registers (`accumulators_fit`);
- traffic: loops run in an order (parallel loops, then reduction loops innermost); an off-chip
  tile is (re)loaded or stored whenever a loop it depends on advances, and also when any loop
  outside its innermost such loop advances (it was evicted in between). So an access depending on
  loops D moves `footprint * prod(trips of loops up to the innermost loop of D with > 1 trip)`;
- parallelism: the number of tiles of the parallel loops.

Everything is vectorised over a batch of candidate tilings (rows of an int array).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tilegraph.ir.domain import FULL, Access, KernelDomain
from tilegraph.ir.graph import Value
from tilegraph.ir.ops.layout import MOVES
from tilegraph.ir.ops.registry import CONTRACTION, WINDOW
from tilegraph.ir.structured import PARALLEL, REDUCTION, AffineMap
from tilegraph.ir.target import Target
from tilegraph.ir.templates import KernelTemplate


@dataclass(frozen=True)
class Costs:
    """Per candidate tiling (arrays of one length): working set and traffic in bytes, tiles in parallel."""

    working_set: np.ndarray
    traffic: np.ndarray
    parallel: np.ndarray
    order: np.ndarray  # index into the loop orders tried


def footprint(access: Access, tiles: np.ndarray, line_bytes: int = 1,
              order: Sequence[int] | None = None) -> np.ndarray:
    """Bytes of one tile of `access` for each row of `tiles` ([n, loops]).

    With `line_bytes` > 1 the tile is counted in whole lines: it is a set of contiguous runs (the
    innermost axes it covers completely, times its span on the next axis), each rounded up. `order`:
    the tensor's axes in storage order (`Program.layouts`; default row-major).
    """
    shape = access.value.type.shape
    itemsize = access.value.type.dtype.itemsize
    rows = tiles.shape[0]
    run = np.full(rows, float(itemsize))
    runs = np.ones(rows)
    contiguous = np.ones(rows, dtype=bool)
    axes = range(len(shape)) if order is None else order
    for expr, size in reversed([(access.map.exprs[a], shape[a]) for a in axes]):
        span = np.ones(rows)
        for loop, coeff in expr.terms:
            span += abs(coeff) * (tiles[:, loop] - 1)
        span = np.minimum(span, size)
        run = np.where(contiguous, run * span, run)
        runs = np.where(contiguous, runs, runs * span)
        contiguous &= span >= size
    if line_bytes > 1:
        run = np.ceil(run / line_bytes) * line_bytes
    return run * runs


def loop_orders(domain: KernelDomain) -> list[list[int]]:
    """Orders tried (outermost first): parallel loops in kernel order, or with one of them moved
    innermost among the parallel loops; reduction loops always inside; full loops have one trip."""
    par = list(domain.loops_of_kind(PARALLEL))
    red = list(domain.loops_of_kind(REDUCTION))
    orders = [par + red]
    for k in range(len(par) - 1):
        moved = par[:k] + par[k + 1:] + [par[k]]
        orders.append(moved + red)
    return orders


def moves(access: Access, trips: np.ndarray, order: Sequence[int]) -> np.ndarray:
    """How many times the tile of `access` is loaded (or stored) in loop order `order`."""
    count = np.ones(trips.shape[0], dtype=np.float64)
    seen = np.zeros(trips.shape[0], dtype=bool)
    for loop in reversed(order):
        seen |= (loop in access.loops) & (trips[:, loop] > 1)
        count *= np.where(seen, trips[:, loop], 1)
    return count


def evaluate(domain: KernelDomain, target: Target, tiles: np.ndarray,
             counted: frozenset[str] | None = None, orders: Mapping[Value, Sequence[int]] | None = None) -> Costs:
    """Working set, traffic (best loop order) and parallelism of every candidate tiling; with
    `counted`, the traffic of those tensors only (the working set still holds every tile). `orders`:
    tensors stored in another order than row-major (`Program.layouts`)."""
    orders = orders or {}
    extents = np.array([loop.extent for loop in domain.loops], dtype=np.float64)
    trips = np.ceil(extents[None, :] / tiles) if len(extents) else np.ones((tiles.shape[0], 0))
    working = np.zeros(tiles.shape[0])
    offchip = []
    steps: dict[AffineMap, np.ndarray] = {}  # on a GPU: the largest per-step value of each map
    reductions = set(domain.loops_of_kind(REDUCTION))
    # on a GPU a value a copy (transpose, reshape, ...) makes inside the kernel is its input re-addressed: no
    # second tile (grouped-query attention reads k and v through four copies each)
    aliases = {node.result for node in domain.nodes if node.op in MOVES} if target.holds_elements else set()
    for access in domain.accesses:
        if access.role == "internal" and access.value in aliases:
            continue
        if access.role == "internal" and target.holds_elements and access.loops & reductions:
            block = footprint(access, tiles)
            steps[access.map] = np.maximum(steps.get(access.map, block), block)
        elif access.role == "internal":
            working += footprint(access, tiles)
        else:
            size = footprint(access, tiles, target.line_bytes, orders.get(access.value))
            # on a GPU only the tiles a reduction step streams are staged; one loaded or stored once per
            # tile (a dot's result, an epilogue's operand, attention's queries) is held once
            copies = 1 if target.holds_elements and reductions and not access.loops & reductions else target.buffers
            working += copies * (footprint(access, tiles) if target.holds_elements else size)
            if counted is None or access.value.name in counted:
                offchip.append((access, size))
    working += sum(steps.values(), np.zeros(tiles.shape[0]))
    orders = loop_orders(domain)
    traffic = np.stack([sum((moves(a, trips, order) * size for a, size in offchip), np.zeros(tiles.shape[0]))
                        for order in orders])
    best = np.argmin(traffic, axis=0)
    parallel = np.prod(trips[:, list(domain.loops_of_kind(PARALLEL))], axis=1) if len(extents) else \
        np.ones(tiles.shape[0])
    return Costs(working, traffic[best, np.arange(tiles.shape[0])], parallel, best)


def _distinct(expr, extents: Sequence[int], size: int) -> int:
    """How many indices in [0, size) an axis expression takes over the whole loop domain."""
    terms = [(extents[loop], coeff) for loop, coeff in expr.terms if extents[loop] > 1]
    if not terms:
        return 1 if 0 <= expr.const < size else 0
    if math.prod(e for e, _ in terms) > 1 << 21:  # too many points to list: the span (an over-count)
        lo, hi = expr.range(extents)
        return max(0, min(hi, size - 1) - max(lo, 0) + 1)
    values = np.full((1,) * len(terms), expr.const, dtype=np.int64)
    for axis, (extent, coeff) in enumerate(terms):
        shape = [1] * len(terms)
        shape[axis] = extent
        values = values + coeff * np.arange(extent).reshape(shape)
    values = np.unique(values)
    return int(np.count_nonzero((values >= 0) & (values < size)))


def compulsory_bytes(domain: KernelDomain) -> int:
    """Every off-chip element touched, read once, and every result written once.

    The axes of one access run over disjoint loops (no op indexes two axes by one loop), so the
    elements touched are the product of the indices touched per axis (strides and padding counted).
    """
    extents = [loop.extent for loop in domain.loops]
    best: dict = {}
    for access in domain.accesses:
        if access.role != "internal":
            shape = access.value.type.shape
            size = math.prod(_distinct(e, extents, n) for e, n in zip(access.map.exprs, shape))
            size *= access.value.type.dtype.itemsize
            best[(access.value, access.role)] = max(best.get((access.value, access.role), 0), size)
    return sum(best.values())


@dataclass(frozen=True)
class LowerBound:
    bytes: int
    source: str  # "compulsory", "hong-kung", or the name of a kernel template (its own bound)


def lower_bound(domain: KernelDomain, template: KernelTemplate | None, target: Target) -> LowerBound:
    """The larger of compulsory traffic and the I/O bound of the kernel's main loop nest.

    A template kernel takes its template's bound (attention: FlashAttention's). Otherwise each
    contraction/window gives Hong-Kung's red-blue pebble bound, 2 * points / sqrt(S) words for S
    words on chip (for matmul 2MNK/sqrt(S)).
    """
    best = LowerBound(compulsory_bytes(domain), "compulsory")
    if template is not None:
        bound = template.lower_bound(domain, target.onchip_bytes) if template.lower_bound else None
        return LowerBound(int(bound), template.name) if bound is not None and bound > best.bytes else best
    for i, node in enumerate(domain.nodes):
        space = domain.spaces[i]
        if space is None or node.opdef.category not in (CONTRACTION, WINDOW):
            continue
        itemsize = node.results[0].type.dtype.itemsize
        words = target.onchip_bytes / itemsize
        bound = 2 * space.points / math.sqrt(words) * itemsize
        if bound > best.bytes:
            best = LowerBound(int(bound), "hong-kung")
    return best


# ----- the grid of candidate tilings (the tile pass searches it; ir.stream_traffic re-tiles streamed kernels on it)
def candidates(extent: int, kind: str) -> list[int]:
    """Tile sizes tried for one loop: powers of two below its extent, and the extent (a full loop: its extent)."""
    if kind == FULL or extent <= 1:
        return [extent]
    sizes = [1 << k for k in range(max(1, extent.bit_length())) if (1 << k) < extent]
    return sizes + [extent]


def thin(cands: list[list[int]], limit: int) -> list[list[int]]:
    """The candidate sizes per loop, every other middle one dropped from the widest until at most `limit` tilings."""
    cands = [list(c) for c in cands]
    while math.prod(len(c) for c in cands) > limit:
        widest = max(range(len(cands)), key=lambda i: len(cands[i]))
        c = cands[widest]
        if len(c) <= 2:
            break
        middle = c[1:-1]
        cands[widest] = [c[0]] + middle[1::2] + [c[-1]]
    return cands


# ----- contractions and the matrix unit (the tile pass's GPU rules; Triton's tuning ranks its variants by them)
def contractions(domain: KernelDomain):
    """(node position, M, N, K kernel-loop groups) of each two-operand contraction."""
    for i, (node, space) in enumerate(zip(domain.nodes, domain.spaces)):
        if space is None or node.opdef.category not in (CONTRACTION, WINDOW) or len(space.inputs) < 2:
            continue
        a, b = (frozenset(d for e in domain.compose_map(i, amap).exprs for d, _ in e.terms)
                for amap in space.inputs[:2])
        k = domain.reduces(i)
        if k and a - k - b and b - k - a:
            yield i, a - k - b, b - k - a, k


def matrix_groups(domain: KernelDomain) -> list[tuple[frozenset[int], frozenset[int], frozenset[int]]]:
    """The (M, N, K) kernel-loop groups of each two-operand contraction (matmul: i / j / k; conv2d as an
    implicit GEMM: n, oh, ow / f / c, kh, kw)."""
    return [(m, n, k) for _, m, n, k in contractions(domain)]


WAVE_FILL = 0.75  # a GPU launch whose waves are fuller than this keeps its multiprocessors busy


def ragged(programs, units: int):
    """Whether a launch's last wave (one program a multiprocessor) leaves more than 1 - WAVE_FILL of the
    waves' slots idle (elementwise over arrays): ViT's MLP-down matmul at 128 x 256 is 150 programs on
    132 SMs, two waves 57% full, where 128 x 128 is three waves 76% full."""
    programs = np.asarray(programs, dtype=np.float64)
    return programs / (np.ceil(programs / units) * units) < WAVE_FILL


def accumulator_limit(target: Target) -> int:
    """The f32 accumulator elements one GPU program keeps in registers: half its block's register file (at
    8 warps, 128 x 256 is 128 registers a thread; tl.dot needs the rest for operands and addresses)."""
    return target.registers_per_block // 2


def accumulators_fit(domain: KernelDomain, target: Target, grid: np.ndarray) -> np.ndarray:
    """Per candidate tiling: on a GPU, the kernel's contraction result blocks (power-of-two lanes), which are
    live together (attention's scores and output), fit `accumulator_limit`. The shared-memory budget bounds
    only what is staged there; a larger accumulator spills registers."""
    if target.kind != "gpu" or not target.registers_per_block:
        return np.ones(grid.shape[0], dtype=bool)
    lanes = gpu_lanes(grid)
    total = np.zeros(grid.shape[0])
    for i, _, _, _ in contractions(domain):  # a contraction's result runs over its loops but the reduced ones
        total += np.prod(lanes[:, sorted(domain.iterates(i) - domain.reduces(i))], axis=1)
    return total <= accumulator_limit(target)


def gpu_lanes(grid: np.ndarray) -> np.ndarray:
    """The lanes a GPU runs each tile of `grid` in: the power of two at or above it (Triton's blocks)."""
    return 2.0 ** np.ceil(np.log2(grid))


def feeds_matrix_unit(domain: KernelDomain, target: Target, grid: np.ndarray, side: int = 0) -> np.ndarray:
    """Per candidate tiling: every contraction's M, N and K tiles reach the target's matrix unit, M and N
    also `side` (wgmma takes 16 of K a step, whatever its M), or the whole extent where smaller. A GPU runs
    a tile in a power-of-two block (Triton's), so a 14-wide tile fills a 16-wide unit; at least half of
    the padded lanes must be the tile's."""
    ok = np.ones(grid.shape[0], dtype=bool)
    if not target.matrix_unit:
        return ok
    extents = np.array([loop.extent for loop in domain.loops], dtype=np.float64)
    lanes = gpu_lanes(grid) if target.kind == "gpu" else grid
    for group in matrix_groups(domain):
        for loops, least in zip(map(sorted, group), (max(side, target.matrix_unit),) * 2 + (target.matrix_unit,)):
            useful, padded = np.prod(grid[:, loops], axis=1), np.prod(lanes[:, loops], axis=1)
            ok &= (padded >= min(least, np.prod(extents[loops]))) & (2 * useful >= padded)
    return ok
