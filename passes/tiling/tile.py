"""The tile pass: tile sizes for every kernel's loops from the target's on-chip budget.

Per kernel: its loop domain (`Kernel.domain`), then `search.search` for the fitting
tiling with least traffic. A kernel whose smallest tile does not fit keeps whole rows on chip
(full loops: a persistent softmax/normalisation row), or whose whole rows cost more traffic than
streaming them, is split into several kernels at its reduction boundaries, each of which then
streams its reduction (`split_stages`). Splitting along a parallel loop would not help: parallel
loops already tile down to 1. Layout kernels
(reshape, concat, gather) and undecomposed composites have no loops: they are streamed copies
whose working set is one chunk and whose traffic is their input and output.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from tilegraph.ir.errors import TilegraphError
from tilegraph.ir.graph import Node, Value
from tilegraph.ir.program import Kernel, Program
from tilegraph.ir.templates import GENERIC
from tilegraph.ir.target import Target, load_target

from tilegraph.ir.domain import FULL, KernelDomain, structured_space
from ..manager import register_property_check
from ..registry import PassContext, register_pass
from tilegraph.ir.tile_model import lower_bound
from .search import Tiling, cost_of, search

COPY_CHUNK = 4096  # bytes a layout kernel moves per step, per operand (less if the budget is smaller)


class TilingError(TilegraphError):
    """A kernel that cannot fit the target's on-chip budget at any tiling."""


@dataclass(frozen=True)
class TileOptions:
    """target: a preset name or a .toml path (empty: the PassContext's Target, else cpu);
    max_candidates bounds the tilings tried per kernel."""

    target: str = ""
    max_candidates: int = 200_000


@dataclass(frozen=True)
class TileReport:
    """What the tile pass chose for one kernel, and how good it is.

    `traffic` is the modelled off-chip bytes of the chosen tiling, `lower_bound` the I/O lower
    bound of the kernel (`bound` names which one), `working_set` the bytes of one tile including
    double buffering, `recompute` the total flops run over the kernel's own flops (1.0: none).
    """

    kernel: str
    kind: str
    tiles: tuple[tuple[str, int], ...]
    working_set: int
    budget: int
    traffic: int
    lower_bound: int
    bound: str
    parallel_tiles: int
    recompute: float
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.traffic / self.lower_bound if self.lower_bound else 1.0


def recompute_factor(domain: KernelDomain, tiles: dict[str, int]) -> float:
    """Flops run with these tiles over the flops of the kernel's nodes (>1 when some are recomputed)."""
    own = total = 0
    for i, node in enumerate(domain.nodes):
        flops = node.flops()
        trips = math.prod(math.ceil(domain.loops[d].extent / tiles.get(domain.loops[d].name, domain.loops[d].extent))
                          for d in domain.missing_parallel(i))
        own += flops
        total += flops * trips
    return total / own if own else 1.0


def split_stages(domain: KernelDomain) -> list[tuple[Node, ...]]:
    """The kernel's nodes cut into pieces that need no whole rows.

    A node starts a new piece when it runs over a loop that an upstream node of its piece reduces
    (it needs the finished reduction), or when it runs over any reduced loop downstream of a
    reduction (a streamed reduction cannot feed another streamed node in the same tile loop).
    """
    position = {n: i for i, n in enumerate(domain.nodes)}
    reduced = frozenset().union(*[domain.reduces(i) for i in range(len(domain.nodes))])
    stage: list[int] = []
    pending: list[frozenset[int]] = []
    for i, node in enumerate(domain.nodes):
        mine, reduces = domain.iterates(i), domain.reduces(i)
        producers = [position[v.producer] for v in node.inputs if v.producer in position]
        s = max((stage[j] + (1 if pending[j] & mine or (pending[j] and mine & reduced) else 0) for j in producers),
                default=0)
        carried = frozenset().union(*[pending[j] for j in producers if stage[j] == s]) if producers else frozenset()
        stage.append(s)
        pending.append(carried | reduces)
    for i, node in enumerate(domain.nodes):  # a constant joins its first reader's piece, not the first piece
        readers = [stage[position[u]] for v in node.results for u in v.users if u in position]
        if not node.inputs and readers:
            stage[i] = min(readers)
    return [tuple(n for n, s in zip(domain.nodes, stage) if s == k) for k in sorted(set(stage))]


def structure(kernel: Kernel, orders: Mapping[Value, tuple[int, ...]] | None = None) -> str:
    """The kernel as text with its values numbered in order of use instead of named, and the storage
    orders of those in `orders`: kernels equal up to names (a repeated layer) have one structure, loop nest
    and best tiling."""
    number: dict = {}

    def name(value) -> str:
        return number.setdefault(value, f"%{len(number)}")

    lines = [f"in {name(v)}: {v.type} {v.kind.name}" for v in kernel.inputs]
    for node in kernel.nodes:
        attrs = ", ".join(f"{key}={value!r}" for key, value in sorted(node.attrs.items()))
        lines.append(f"{', '.join(name(v) for v in node.results)} = {node.op}"
                     f"({', '.join(name(v) for v in node.inputs)}) {{{attrs}}} : "
                     f"{', '.join(str(v.type) for v in node.results)}")
    lines.append(f"out {', '.join(name(v) for v in kernel.outputs)}; kind {kernel.kind}")
    lines += [f"stored {name(v)} {list(order)}" for v, order in (orders or {}).items()]
    return "\n".join(lines)


@dataclass
class TileMemo:
    """What the calls of one tile pass share, by kernel `structure` (a transformer's layers are one
    structure each): the best tiling searched, the tiles with their report figures, and the loop nest
    of a generic kernel (the pieces of a split kernel are new kernels, alike in every layer)."""

    tilings: dict[str, Tiling | None] = field(default_factory=dict)
    figures: dict[str, tuple] = field(default_factory=dict)
    domains: dict[str, tuple] = field(default_factory=dict)

    def domain(self, kernel: Kernel, key: str) -> KernelDomain:
        """kernel.domain; for a generic kernel computed once per structure (its loops renumbered onto
        these nodes, which take the same positions)."""
        if kernel.template is not None or "domain" in kernel.__dict__:
            return kernel.domain
        known = self.domains.get(key)
        if known is None:
            domain = kernel.domain
            self.domains[key] = (domain.loops, domain.node_loops)
            return domain
        loops, node_loops = known
        domain = KernelDomain(kernel.nodes, tuple(structured_space(n) for n in kernel.nodes), loops, node_loops)
        kernel.__dict__["domain"] = domain
        return domain


def tile_kernel(kernel: Kernel, target: Target, options: TileOptions = TileOptions(),
                memo: TileMemo | None = None, orders: Mapping[Value, tuple[int, ...]] | None = None
                ) -> list[tuple[Kernel, TileReport]]:
    """The tiled kernel, or the kernels it was split into, with a report for each.

    A generic kernel keeping whole rows (full loops) is split at its reduction boundaries when
    no tiling fits, or when the pieces together move fewer bytes than the best fitting tiling.
    `memo`: what the calls of one pass share (`TileMemo`); `orders`: the Program's storage orders
    (`Program.layouts`), which the tile model counts contiguous runs in.
    """
    memo = TileMemo() if memo is None else memo
    orders = {v: orders[v] for v in (*kernel.inputs, *kernel.outputs) if v in orders} if orders else {}
    key = structure(kernel, orders)
    domain = memo.domain(kernel, key)
    budget = target.onchip_bytes
    if not domain.structured:
        moved = kernel.io_bytes
        chunk = min(COPY_CHUNK, budget // (2 * target.buffers))
        working = min(moved, target.buffers * 2 * chunk)
        note = "layout copy, streamed in chunks" if not kernel.nodes[0].opdef.is_composite else \
            "composite run whole (not decomposed)"
        report = TileReport(kernel.name, kernel.kind, (), working, budget, moved, moved, "compulsory", 1, 1.0, note)
        return [(kernel, report)]
    if key not in memo.tilings:
        memo.tilings[key] = search(domain, target, options.max_candidates, orders=orders)
    found = memo.tilings[key]
    stages = split_stages(domain) if kernel.template is None and domain.loops_of_kind(FULL) else []
    if len(stages) >= 2:
        # cut after the first stage only; each side decides again whether to split further
        pieces = [stages[0], tuple(n for n in kernel.nodes if n not in set(stages[0]))]
        split = []
        for s, nodes in enumerate(pieces):
            split += tile_kernel(Kernel(f"{kernel.name}_{s}", nodes), target, options, memo, orders)
        moved = sum(r.traffic for _, r in split)
        if found is None or moved < found.traffic:
            why = ("its smallest tile does not fit" if found is None else
                   f"whole rows on chip cost {found.traffic} bytes of traffic, the pieces {moved}")
            return [(k, replace(r, note=f"split from {kernel.name}: {why}" + (f"; {r.note}" if r.note else "")))
                    for k, r in split]
    if found is None:
        smallest = cost_of(domain, target, {loop.name: 1 for loop in domain.loops if loop.kind != FULL}, orders)
        whole = [loop.name for loop in domain.loops if loop.kind == FULL]
        raise TilingError(f"kernel {kernel.name} ({', '.join(n.op for n in kernel.nodes)}) needs "
                          f"{smallest.working_set} bytes even with the smallest tiles "
                          f"(whole loops: {', '.join(whole) or 'none'}), over the {target.onchip_bytes}-byte "
                          f"budget of target {target.name}")
    if key not in memo.figures:
        memo.figures[key] = _figures(kernel, domain, target, found)
    tiles, bound, recompute = memo.figures[key]
    report = TileReport(kernel.name, kernel.kind, tiles, found.working_set, target.onchip_bytes, found.traffic,
                        bound.bytes, bound.source, found.parallel, recompute)
    return [(kernel.with_tiles(tiles), report)]


def _figures(kernel: Kernel, domain: KernelDomain, target: Target, found: Tiling) -> tuple:
    """The chosen tiles by loop name, the kernel's traffic lower bound and its recompute factor: they
    depend on the kernel's structure only, so kernels equal up to names share them."""
    tiles = tuple((domain.loops[i].name, found.tiles[i]) for i in found.order)
    return tiles, lower_bound(domain, kernel.template, target), recompute_factor(domain, dict(tiles))


def tile_program(program: Program, target: Target, options: TileOptions = TileOptions()) -> tuple[list[Kernel], list[TileReport]]:
    kernels, reports = [], []
    memo, orders = TileMemo(), program.storage_orders()
    for kernel in program.kernels:
        for tiled, report in tile_kernel(kernel, target, options, memo, orders):
            kernels.append(tiled)
            reports.append(report)
    return kernels, reports


@register_pass("tile", TileOptions, requires={"fused"}, ensures={"tiled"},
               preserves={"canonical", "decomposed", "fused", "laid_out"})
def tile(program: Program, options: TileOptions, ctx: PassContext) -> Program:
    """Pick tile sizes per kernel: the working set fits the target, traffic is minimal."""
    target = ctx.target if not options.target and isinstance(ctx.target, Target) else \
        load_target(options.target or "cpu")
    kernels, reports = tile_program(program, target, options)
    ctx.stat("tile", "target", target.name)
    ctx.stat("tile", "kernels split", sum(1 for r in reports if r.note.startswith("split")))
    ctx.stat("tile", "traffic bytes", sum(r.traffic for r in reports))
    ctx.stat("tile", "lower bound bytes", sum(r.lower_bound for r in reports))
    ctx.stat("tile", "largest working set", max((r.working_set for r in reports), default=0))
    return replace(program, kernels=tuple(kernels), target=target, properties=program.properties | {"tiled"},
                   notes={**program.notes, "tiling": reports})


def format_tiling(program: Program) -> str:
    """One line per kernel: tiles, working set against budget, traffic against the lower bound."""
    reports = program.notes.get("tiling", ())
    if not reports:
        return "tiling: not run"
    lines = [f"tiling for target {program.target.name if program.target else '?'}:"]
    for r in reports:
        tiles = ", ".join(f"{name}={size}" for name, size in r.tiles) or "-"
        kind = "" if r.kind == GENERIC else f" <{r.kind}>"
        extra = f" [{r.note}]" if r.note else ""
        lines.append(f"  {r.kernel}{kind}: tiles {tiles}; working set {r.working_set}/{r.budget} B; "
                     f"traffic {r.traffic} B vs {r.bound} bound {r.lower_bound} B ({r.ratio:.2f}x); "
                     f"{r.parallel_tiles} parallel tiles; recompute {r.recompute:.2f}x{extra}")
    return "\n".join(lines)


def _tiling_problems(program: Program):
    """Property "tiled": a target is recorded, and every kernel with loops has a tile per loop that fits it."""
    target = program.target
    if target is None:
        yield "no target is recorded"
        return
    working_sets: dict[tuple, int] = {}  # by structure and tiles: a repeated layer's kernels are costed once
    for kernel in program.kernels:
        domain = kernel.domain
        if not domain.structured or not domain.loops:
            continue
        loops = {loop.name: loop for loop in domain.loops}
        if set(dict(kernel.tiles)) != set(loops):
            yield f"kernel {kernel.name}: tiles {dict(kernel.tiles)} do not cover its loops {sorted(loops)}"
            continue
        over = [name for name, size in kernel.tiles if size > loops[name].extent]
        if over:
            yield f"kernel {kernel.name}: tiles of {', '.join(over)} exceed their loops"
            continue
        key = (structure(kernel), kernel.tiles)
        if key not in working_sets:
            working_sets[key] = cost_of(domain, target, dict(kernel.tiles)).working_set
        working_set = working_sets[key]
        if working_set > target.onchip_bytes:
            yield (f"kernel {kernel.name}: its tiles' working set {working_set} B exceeds the "
                   f"{target.onchip_bytes} B of target {target.name}")


register_property_check("tiled", _tiling_problems)
