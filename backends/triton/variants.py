"""Block-size variants of dot kernels (matmul, conv, attention) for the autotuner.

The tiling pass picks one tiling per kernel for on-chip data; the best BLOCK_M/N/K on a GPU also
depends on wave quantization, registers and the pipeline. `dot_variants` proposes other tilings of
the loops a kernel's `tl.dot`s run over: per loop the tile model's grid (`tile_model.candidates`,
thinned by `tile_model.thin`), kept where every dot still gets at least 16 lanes per side, at most 256
rows/columns and 128 of K, an accumulator that fits the registers and operand blocks whose pipeline
stages fit shared memory; ranked as the tiling pass ranks them on a GPU (tilings that leave SMs idle
last, then those with dots narrower than the target's `matrix_block`), then those whose last wave leaves
many SMs idle (`tile_model.ragged`), then by off-chip traffic, and half the picks kept for "straight"
tilings (one loop per dot side, so operands load as plain 2-D blocks: for a convolution, n, oh, kh and kw
walked one at a time, an implicit GEMM over ow x f x c). `emit_variant` emits one as its own function
(`Kernel.with_tiles`; GROUP_M, the row tiles per launch group of a tiled matmul, as given). The Program's own
tiling is always variant 0. A grid of several waves of tiles that each hold an SM alone also gets its best
tiling as a persistent kernel (a program per SM, each walking tiles a stride apart): whether that pays
(prologues saved, one tile's epilogue overlapping the next one's loads) depends on the device, so the tuner
times it like any other variant.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from tilegraph.ir import TilegraphError
from tilegraph.ir.graph import Value
from tilegraph.ir.program import Kernel
from tilegraph.ir.structured import PARALLEL, REDUCTION
from tilegraph.ir.target import Target, load_target
from tilegraph.ir.tile_model import accumulator_limit, candidates, evaluate, feeds_matrix_unit, ragged, thin

from .dot import GROUP_M, MIN_DOT
from .kernel import KernelEmitter, KernelSource
from .library import LABEL
from .options import TritonOptions

MAX_MN = 256  # rows / columns of one tl.dot block
MAX_K = 128
STAGES = 3  # pipeline stages the shared-memory check allows for
GRID_LIMIT = 512  # tilings tried per kernel before the model ranks them
GROUP_CHOICES = (4, 16)  # GROUP_M tried beside the default, on the best tiling of a grouped matmul
# a tiling whose accumulators reach this many elements holds an SM alone (128 x 128 f32 is half its registers):
# only such a kernel is also tried persistent, one program per SM; smaller tiles already share an SM several at
# a time (ResNet-50's 64 x 56 conv tiles: 61-110 registers, 24-48 KiB in the sm_90 build). Only kernels of one
# tl.dot: attention's two chained dots, flattened into the tile loop, came out 0.77 off the generated kernel on an
# H200 (Triton 3.6, the tuner's cross-check, 2026-11-27), and its 2048-token sm_90 build needs 352 KiB of shared
# memory (results/persistent_sm90.md)
PERSISTENT_ACCUMULATOR = 128 * 128


@dataclass(frozen=True)
class Variant:
    """One tiling of a kernel's loops (loop name -> tile) and its GROUP_M; `library`: the kernel run by the
    vendor's library instead (`library.py`; the tiles are then the Program's, unused); `persistent`: that
    many programs, each walking the tiles a stride apart."""

    tiles: tuple[tuple[str, int], ...]
    group_m: int = GROUP_M
    library: bool = False
    persistent: int = 0  # programs launched, each walking tiles (one per SM); 0: a program per tile

    def label(self) -> str:
        if self.library:
            return LABEL
        tiles = " ".join(f"{name}={size}" for name, size in self.tiles) + f" group {self.group_m}"
        return tiles + (f" persistent {self.persistent}" if self.persistent else "")


@dataclass(frozen=True)
class Shape:
    """What a tiling gives each tl.dot of the kernel: block rows, columns and K (after K chunking)."""

    dots: tuple[tuple[int, int, int], ...]
    itemsize: int
    programs: int
    grouped: bool
    straight: bool = False  # every dot is one loop per side: operands load as plain 2-D blocks (pipelined)

    @property
    def accumulator(self) -> int:
        """Elements of the dots' [M, N] accumulator blocks, which are live together: attention's 128 x 64
        scores and 128 x 64 output took 188 registers a thread at 4 warps on sm_90, 106 at 8."""
        return sum(m * n for m, n, _ in self.dots)

    @property
    def stage_bytes(self) -> tuple[int, ...]:
        """Per dot, the bytes of its [M, K] and [K, N] operand blocks: what one pipeline stage holds."""
        return tuple((m * k + k * n) * self.itemsize for m, n, k in self.dots)


def _emitter(kernel: Kernel, options: TritonOptions) -> KernelEmitter:
    return KernelEmitter(kernel, kernel.domain, "kernel_variant", options=options)


def dot_shape(kernel: Kernel, options: TritonOptions | None = None) -> Shape | None:
    """The tl.dot blocks of `kernel` as tiled (None: it has no tl.dot)."""
    emitter = _emitter(kernel, options or TritonOptions())
    dots, sizes, straight = [], [], True
    for i in range(len(kernel.domain.nodes)):
        plan = emitter.dot_plan(i)
        if plan is None:
            continue
        dots.append(tuple(emitter.numel(group) for group in (plan.ms, plan.ns, plan.ks)))
        straight = straight and plan.simple and len(plan.ks) == 1
        sizes.append(kernel.domain.nodes[i].inputs[plan.args[0]].type.dtype.itemsize)
    if not dots:
        return None
    itemsize = max(sizes)
    programs = math.prod(p.count for p in emitter.loops if p.kind == PARALLEL)
    return Shape(tuple(dots), itemsize, programs, emitter.grouped_tiles() is not None, straight)


def fits(shape: Shape, target: Target) -> bool:
    """Every dot at least MIN_DOT per side and within the block limits; accumulator and staged operands fit."""
    smem = target.shared_memory_per_block or 232448
    acc = accumulator_limit(target) or 128 * 256
    for (m, n, k), stage in zip(shape.dots, shape.stage_bytes):
        if min(m, n, k) < MIN_DOT or m > MAX_MN or n > MAX_MN or k > MAX_K or m * n > acc:
            return False
        if stage * STAGES > smem:
            return False
    return True


def dot_loops(kernel: Kernel, options: TritonOptions | None = None) -> tuple[int, ...]:
    """Kernel loops some tl.dot runs over (its M, N or K groups), in kernel order."""
    emitter = _emitter(kernel, options or TritonOptions())
    loops: set[int] = set()
    for i in range(len(kernel.domain.nodes)):
        plan = emitter.dot_plan(i)
        if plan is not None:
            loops |= set(plan.ms) | set(plan.ns) | set(plan.ks)
    return tuple(sorted(loops))


def dot_variants(kernel: Kernel, target: Target | None = None, limit: int = 6,
                 options: TritonOptions | None = None,
                 orders: Mapping[Value, tuple[int, ...]] | None = None, units: int | None = None) -> list[Variant]:
    """The Program's tiling, then up to `limit - 1` other tilings of the dot loops that `fits` allows,
    best first by the tile model (off-chip traffic over the tensors as stored, `orders` the Program's
    layouts; fewer programs than SMs ranked last), then GROUP_M choices on the best tiling of a grouped
    matmul, then the best tiling as a persistent kernel of `units` programs (the device's SMs; default the
    target's) where its one tl.dot has more tiles than that and holds an SM alone (`PERSISTENT_ACCUMULATOR`).
    Empty for a kernel without tl.dot."""
    options = options or TritonOptions()
    target = target if target is not None and target.kind == "gpu" else load_target("gpu-h100")
    units = units or target.parallel_units or 132
    domain = kernel.domain
    own = dict(kernel.tiles)
    base = tuple((loop.name, min(own.get(loop.name, loop.extent), loop.extent)) for loop in domain.loops)
    first = Variant(base)
    loops = dot_loops(kernel, options)
    if not loops:
        return []
    # sizes under MIN_DOT only fit a group of several loops; dropping them first keeps thinning from dropping
    # 128 (ViT's MLP-down matmul was offered 64 and 256 rows, not 128)
    grids = [[t for t in candidates(domain.loops[k].extent, domain.loops[k].kind)
              if t <= (MAX_K if domain.loops[k].kind == REDUCTION else MAX_MN)] for k in loops]
    if math.prod(map(len, grids)) > GRID_LIMIT:
        grids = [[t for t in grid if t >= MIN_DOT] or grid for grid in grids]
    grids = thin(grids, GRID_LIMIT)
    seen = {dot_shape(kernel, options)}
    kept: list[tuple[Variant, Shape]] = []
    for sizes in itertools.product(*grids):
        tiles = dict(base)
        tiles.update({domain.loops[k].name: int(t) for k, t in zip(loops, sizes)})
        variant = Variant(tuple((loop.name, tiles[loop.name]) for loop in domain.loops))
        if variant.tiles == first.tiles:
            continue
        shape = dot_shape(kernel.with_tiles(variant.tiles), options)
        if shape is None or shape in seen or not fits(shape, target):
            continue
        seen.add(shape)
        kept.append((variant, shape))
    if kept:
        array = np.array([[size for _, size in v.tiles] for v, _ in kept], dtype=np.float64)
        costs = evaluate(domain, target, array, orders=orders)
        wide = feeds_matrix_unit(domain, target, array, target.matrix_block)
        order = sorted(range(len(kept)), key=lambda j: (kept[j][1].programs < units, not wide[j],
                                                        ragged(kept[j][1].programs, units),
                                                        float(costs.traffic[j]), kept[j][0].tiles))
        ranked = [kept[j] for j in order]
        # half the picks (at least) among tilings whose dots load plain 2-D blocks (a conv with n, oh, kh,
        # kw walked one at a time: an implicit GEMM the pipeliner can stage), the rest by the model alone
        straight = [pair for pair in ranked if pair[1].straight][:limit // 2]
        kept = straight + [pair for pair in ranked if pair not in straight]
    out = [first] + [v for v, _ in kept[:max(limit - 1, 0)]]
    best = out[1] if len(out) > 1 else first
    shape = dot_shape(kernel.with_tiles(best.tiles), options)
    if shape is not None and shape.grouped:
        out += [Variant(best.tiles, g) for g in GROUP_CHOICES]
    if (shape is not None and len(shape.dots) == 1 and shape.programs > units
            and shape.accumulator >= PERSISTENT_ACCUMULATOR):
        out.append(Variant(best.tiles, persistent=units))  # one program per SM, each walking several tiles
    return out


def emit_variant(kernel: Kernel, variant: Variant, function: str, interpreter: bool = False,
                 names: dict[Value, str] | None = None, options: TritonOptions | None = None,
                 layouts: dict[Value, tuple[int, ...]] | None = None,
                 rounded: frozenset[Value] = frozenset()) -> KernelSource:
    """`kernel` with the variant's tiles and GROUP_M, as function `function` (`layouts`, `rounded`: the
    module's permuted and TF32-rounded parameters, which every variant reads as they are bound)."""
    tiled = kernel.with_tiles(variant.tiles)
    emitter = KernelEmitter(tiled, tiled.domain, function, interpreter, names, options, layouts, rounded)
    emitter.group_m, emitter.persistent = variant.group_m, variant.persistent
    source = emitter.emit()
    if not source.uses_dot:
        raise TilegraphError(f"kernel {kernel.name}: variant {variant.label()} has no tl.dot")
    return source


__all__ = ["Variant", "Shape", "dot_shape", "dot_loops", "dot_variants", "emit_variant", "fits"]
