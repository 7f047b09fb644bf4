"""One fused kernel as one `@triton.jit` function, walking the structure of `Kernel.domain`.

The schedule is the tiled reference executor's (`backends/reference/tiled.py`), one Triton program
per parallel tile. Every value inside a program is a block tensor of rank R (one axis per kernel
loop; size 1 on the loops it does not run over), so broadcasting between nodes is free:

- parallel loops: decoded from the program id, `ix<k> = base + arange(block)`;
- full loops: whole in the block (persistent rows), `ix<k> = arange(next_pow2(extent))`;
- reduction loops: a `for` over tiles inside the program, reductions carried in fp32 (or the integer
  type) accumulators and reduced inside a tile with `tl.sum/max/min` over the block axis;
- a reduction `acc + a * b` whose operands split into batch/M/K and batch/K/N loop groups becomes
  `tl.dot` (`dot.py`: matmul with a 2-D accumulator and straight 2-D operand loads, batched matmul
  as a 3-D dot, conv2d as implicit GEMM, the two matmuls of attention);
- attention kernels: score nodes per key/value tile, then the online softmax (`attention.py`);
- loads that do not depend on the open reduction loops are hoisted above them.

Masks appear only for loops whose tile does not divide the extent or is not a power of two.
Masked lanes read the map's pad (or 0) and are replaced by the reduction's identity (0 for sum,
-inf for max, ...) before any reduction, so garbage in tails never reaches a stored element.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from tilegraph.ir import TilegraphError
from tilegraph.ir.graph import Value
from tilegraph.ir.program import Kernel
from tilegraph.ir.domain import downstream
from tilegraph.ir.structured import PARALLEL, REDUCTION, AffineExpr, AffineMap, Arg
from tilegraph.ir.templates import lowering_for

from .attention import AttentionMixin
from .dot import MIN_DOT, DotMixin, DotPlan, row_major, split_update
from .names import NameTable, identifier, py_reserved
from .options import TritonOptions
from .scalar import Expr, ScalarTranslator, cast, compute_type, literal, tl_type

MAX_NUMEL = 1 << 20  # Triton's largest block tensor
# What one program may hold while it reduces. The tiling pass sizes what is on chip per tile; a program
# also broadcasts a non-dot reduction over its whole block (registers, spilled through shared memory)
# and stages a tl.dot's operand blocks in shared memory once per pipeline stage. Unbounded, LeNet's and
# the ResNet block's convolutions asked an H200 for 0.25-2 MiB of shared memory (it has 227 KiB).
REGISTER_BLOCK = 1 << 14  # elements of a non-dot reduction's block
DOT_STAGE_BYTES = 112 << 10  # bytes of a tl.dot's [M, K] and [K, N] blocks (two stages fit 227 KiB)
# K lanes of one step of a dot on tensor cores (as `variants.MAX_K`): a convolution's whole K of 256-512
# channels in one block left nothing for the pipeliner to overlap (ResNet-50's 1x1 convolutions had no
# cp.async in the sm_90 build)
TENSOR_K = 128
K_PADDING = 9 / 8  # a dot's K step is the widest whose padded lanes stay within this of the K extent
_COMBINE = {"add": "+", "mul": "*"}
_REDUCE = {"add": "tl.sum({x}, axis={k}, keep_dims=True)", "max": "tl.max({x}, axis={k}, keep_dims=True)",
           "min": "tl.min({x}, axis={k}, keep_dims=True)", "mul": "tl.reduce({x}, {k}, _tg_mul, keep_dims=True)"}
_IDENTITY = {"add": 0.0, "mul": 1.0, "max": -math.inf, "min": math.inf}


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def least_padded_step(loop: "LoopPlan") -> int:
    """The widest power-of-two step, at most the loop's block and at least MIN_DOT, whose steps cover the
    extent within K_PADDING of it; the block itself when none does."""
    step = loop.block
    while step >= MIN_DOT:
        if -(-loop.extent // step) * step <= K_PADDING * loop.extent:
            return step
        step //= 2
    return loop.block


@dataclass(frozen=True)
class LoopPlan:
    """A kernel loop as generated: tile (step between blocks) and block (power-of-two lanes)."""

    extent: int
    kind: str
    tile: int
    block: int

    @property
    def count(self) -> int:
        return -(-self.extent // self.tile)


@dataclass
class KernelSource:
    """The generated function of one kernel and how to launch it."""

    function: str
    text: str
    grid: int
    args: tuple[Value, ...]  # kernel inputs, then kernel outputs
    loops: tuple[LoopPlan, ...]
    uses_dot: bool = False
    notes: list[str] = field(default_factory=list)


def kept_whole(domain) -> frozenset[int]:
    """Reduction loops a carried reduction keeps in its result (it reduces other loops): its accumulator
    must hold every tile of them, so they are generated whole (one block)."""
    reduction = set(domain.loops_of_kind(REDUCTION))
    whole: set[int] = set()
    for i, space in enumerate(domain.spaces):
        if space is not None and any(x is not None for x in space.init) and domain.reduces(i) & reduction:
            whole |= (domain.iterates(i) & reduction) - domain.reduces(i)
    return frozenset(whole)


def plan_loops(kernel: Kernel, domain) -> tuple[LoopPlan, ...]:
    """Tiles from the tiling pass (untiled loops whole); blocks are the next powers of two."""
    sizes = dict(kernel.tiles)
    whole = kept_whole(domain) if kernel.template is None else frozenset()
    plans = []
    for k, loop in enumerate(domain.loops):
        tiled = loop.kind in (PARALLEL, REDUCTION) and k not in whole
        tile = min(sizes.get(loop.name, loop.extent), loop.extent) if tiled else loop.extent
        plans.append(LoopPlan(loop.extent, loop.kind, max(tile, 1), next_pow2(max(tile, 1))))
    if not plans:  # a kernel over scalars: one dummy loop so every tensor has rank 1
        plans.append(LoopPlan(1, PARALLEL, 1, 1))
    return tuple(plans)


class KernelEmitter(DotMixin, AttentionMixin):
    """Emits one kernel; `emit()` returns its KernelSource."""

    def __init__(self, kernel: Kernel, domain, function: str, interpreter: bool = False,
                 names: dict[Value, str] | None = None, options: TritonOptions | None = None,
                 layouts: Mapping[Value, tuple[int, ...]] | None = None,
                 rounded: frozenset[Value] = frozenset()) -> None:
        self.kernel, self.domain, self.function = kernel, domain, function
        self.layouts = layouts or {}  # parameters stored with their axes in this order (`packing.py`)
        self.rounded = rounded  # parameters bound already rounded to TF32 (`packing.tf32_params`)
        self.options = options if options is not None else TritonOptions.from_torch()
        # tensors as the module names them (`names.tensor_names`); blocks inside the kernel are
        # called after the value they hold, pointers `<tensor>_ptr`, in the kernel's own scope
        self.names = names if names is not None else {}
        self.scope = NameTable(py_reserved)
        self.interpreter = interpreter
        self.loops = plan_loops(kernel, domain)
        self.R = len(self.loops)
        if kernel.template is None:
            self.walk_reductions_in_chunks()
        elif kernel.kind in TEMPLATE_STEPS:
            TEMPLATE_STEPS[kernel.kind](self)
        self.lines: list[str] = []
        self.depth = 1
        self.env: dict[Value, Expr] = {}  # values computed in this program
        self.shape_of: dict[Value, frozenset[int]] = {}
        self.acc: dict[Value, Expr] = {}
        self.loads: dict = {}  # loads inside the open reduction loops
        self.outer_loads: dict = {}  # loads outside them (valid for the whole program)
        self.open: list[int] = []  # reduction loops whose `for` is open
        self.flat = False  # the open reduction loops run as one flat `for` (`reduction_loops`)
        self.hoist_at, self.hoist_depth = 0, 1
        self.acc2d: dict[Value, DotPlan] = {}  # accumulators kept as tl.dot's [batch,] M x N tiles
        self.masks: dict[int, str | None] = {}
        self.bases: dict[int, str] = {}  # each loop's first index in this program (or reduction step)
        self.uses_dot = False
        inputs, outputs = kernel.inputs, kernel.outputs
        self.pointer = {v: self.scope.take(f"{self.tensor(v)}_ptr") for v in (*inputs, *outputs)}
        self.outputs = set(outputs)
        self.args = tuple(inputs) + tuple(outputs)
        self.wide = any(v.type.numel >= 2 ** 31 for v in self.args)

    def walk_reductions_in_chunks(self) -> None:
        """Halve the widest reduction block of each reduction node (a carried `for` loop then walks the tile)
        until the node fits REGISTER_BLOCK, or if it is a tl.dot, DOT_STAGE_BYTES and at most TENSOR_K lanes
        of K (`fma_k` on FMA units), keeping MIN_DOT; a dot over one K loop then takes the widest step that pads
        K by at most K_PADDING (MobileNetV2's K = 144 channels: 5 steps of 32, not 256 lanes). Which outputs
        a program computes is unchanged: parallel tiles are the tiling pass's."""
        whole, numel = kept_whole(self.domain), self.numel
        for i, space in enumerate(self.domain.spaces):
            if space is None or all(x is None for x in space.init):
                continue
            while True:
                plan = self.dot_plan(i)
                if plan is not None:
                    itemsize = self.domain.nodes[i].inputs[plan.args[0]].type.dtype.itemsize
                    k_lanes = numel(plan.ks)
                    k_limit = self.fma_k(plan) if self.on_fma(i, plan) else TENSOR_K
                    fits = k_lanes <= MIN_DOT or k_lanes <= k_limit and \
                        (numel(plan.ms) + numel(plan.ns)) * numel(plan.bs) * k_lanes * itemsize <= DOT_STAGE_BYTES
                    chunkable = plan.ks
                else:
                    fits = numel(self.region(i)) <= REGISTER_BLOCK
                    chunkable = self.domain.reduces(i)
                chunkable = [k for k in chunkable if k not in whole and self.loops[k].block > 1]
                if fits or not chunkable:
                    break
                k = max(chunkable, key=lambda d: (self.loops[d].block, -d))
                self.step_loop(k, self.loops[k].block // 2)
            if plan is not None and len(chunkable) == 1 and len(plan.ks) == 1:
                self.step_loop(chunkable[0], least_padded_step(self.loops[chunkable[0]]))

    def step_loop(self, k: int, step: int) -> None:
        """Reduction loop k walked `step` lanes at a time."""
        loops = list(self.loops)
        loops[k] = LoopPlan(loops[k].extent, REDUCTION, step, step)
        self.loops = tuple(loops)

    # ----- small helpers ---------------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def tensor(self, value: Value) -> str:
        """The value's name in the module (its sanitized IR name when emitted on its own)."""
        return self.names.get(value) or identifier(value.name)

    def fresh(self, stem: str) -> str:
        """A new local of the kernel: `stem`, or `stem_2`, ... when taken."""
        return self.scope.take(stem)

    def shape(self, loops) -> str:
        dims = [str(self.loops[k].block) if k in loops else "1" for k in range(self.R)]
        return "(" + ", ".join(dims) + ("," if self.R == 1 else "") + ")"

    def numel(self, loops) -> int:
        return math.prod(self.loops[k].block for k in loops)

    def view(self, k: int) -> str:
        if self.R == 1:
            return ""
        return "[" + ", ".join(":" if j == k else "None" for j in range(self.R)) + "]"

    def const(self, code: str, t: str) -> Expr:
        return Expr(f"tl.full({self.shape(())}, {code}, tl.{t})", t)

    def define_loop(self, k: int, base: str) -> None:
        """`iv<k>`/`mv<k>`: the loop's lane indices and mask as 1-D vectors; `ix<k>`/`mk<k>`: rank-R views."""
        plan = self.loops[k]
        self.bases[k] = base
        self.line(f"iv{k} = {base} + tl.arange(0, {plan.block})")
        if self.wide:
            self.line(f"iv{k} = iv{k}.to(tl.int64)")
        self.line(f"ix{k} = iv{k}{self.view(k)}")
        mask = self.lane_mask(k, f"iv{k}", f"tl.arange(0, {plan.block})")
        if mask:
            self.line(f"mv{k} = {mask}")
            self.line(f"mk{k} = mv{k}{self.view(k)}")
        self.masks[k] = f"mk{k}" if mask else None

    def lane_mask(self, k: int, index: str, lane: str) -> str | None:
        """Which lanes of loop k are in its tile and extent, for lane numbers `lane` at loop indices `index`."""
        plan = self.loops[k]
        parts = []
        if plan.block != plan.tile and plan.count > 1:
            parts.append(f"({lane} < {plan.tile})")
        if plan.extent % plan.tile != 0 or (plan.block != plan.tile and plan.count == 1):
            parts.append(f"({index} < {plan.extent})")
        return " & ".join(parts) or None

    def mask_of(self, loops) -> str | None:
        parts = [self.masks[k] for k in sorted(loops) if self.masks.get(k)]
        return " & ".join(parts) if parts else None

    def node_loop(self, i: int, d: int) -> int | None:
        return self.domain.node_loops[i][d]

    # ----- memory ----------------------------------------------------------------------------------
    def affine(self, expr: AffineExpr, names: dict[int, str] | None = None) -> str:
        names = names or {}
        parts = [names.get(d, f"ix{d}") if c == 1 else f"{c} * {names.get(d, f'ix{d}')}" for d, c in expr.terms]
        if expr.const or not parts:
            parts.append(str(expr.const))
        return "(" + " + ".join(parts) + ")"

    def offsets(self, value: Value, amap: AffineMap, names: dict[int, str] | None = None) -> str:
        """The element offsets `amap` selects in `value`'s memory (row-major, or in its packed axis order)."""
        order = self.layouts.get(value, tuple(range(value.type.rank)))
        strides, step = [0] * len(order), 1
        for axis in reversed(order):
            strides[axis] = step
            step *= value.type.shape[axis]
        terms = [f"{self.affine(e, names)} * {s}" if s != 1 else self.affine(e, names)
                 for e, s in zip(amap.exprs, strides) if e.terms or e.const]
        return " + ".join(([] if names else ["zr"]) + terms)

    def read(self, value: Value, amap: AffineMap) -> tuple[Expr, frozenset[int]]:
        """A kernel input's elements at the current block (or a value this program computed)."""
        if value in self.env:
            return self.env[value], self.shape_of[value]
        if value not in self.pointer:
            raise TilegraphError(f"kernel {self.kernel.name}: %{value.name} is read before it is computed")
        key = (value, amap)
        loops = frozenset(d for e in amap.exprs for d, _ in e.terms)
        hoist = bool(self.open) and not (loops & set(self.open))
        cache = self.outer_loads if hoist or not self.open else self.loads
        if key in cache:
            return cache[key]
        masks = [self.masks[k] for k in sorted(loops) if self.masks.get(k)]
        masks += self.pad_masks(value, amap)
        t = tl_type(value.type.dtype)
        fill = literal(amap.pad if amap.pad is not None else 0.0, t)
        name = self.fresh(self.tensor(value))
        address = f"{self.pointer[value]} + {self.offsets(value, amap)}"
        text = f"{name} = tl.load({address}, mask={' & '.join(masks)}, other={fill})" if masks \
            else f"{name} = tl.load({address})"
        self.line(text) if not hoist else self.hoisted(text)
        result = (Expr(name, t), loops)
        cache[key] = result
        return result

    def pad_masks(self, value: Value, amap: AffineMap, names: dict[int, str] | None = None) -> list[str]:
        """Bounds checks for a padded read (conv/pool windows): only the sides that can fall outside."""
        if amap.pad is None:
            return []
        masks = []
        for e, size in zip(amap.exprs, value.type.shape):
            lo, hi = e.range([p.extent for p in self.loops])
            if not e.terms and not 0 <= e.const < size:  # a constant index in the padding: all pad
                masks.append(f"({next(iter(names.values()))} < 0)" if names else "(zr < 0)")
            if e.terms and lo < 0:
                masks.append(f"({self.affine(e, names)} >= 0)")
            if e.terms and hi >= size:
                masks.append(f"({self.affine(e, names)} < {size})")
        return masks

    def hoisted(self, text: str) -> None:
        """A line placed before the reduction loops (a load that does not change inside them)."""
        self.lines.insert(self.hoist_at, "    " * self.hoist_depth + text)
        self.hoist_at += 1

    def store(self, value: Value, var: str, loops: frozenset[int], amap: AffineMap) -> None:
        span = loops | frozenset(d for e in amap.exprs for d, _ in e.terms)
        offsets = f"tl.broadcast_to({self.offsets(value, amap)}, {self.shape(span)})"
        mask = self.mask_of(span)
        tail = f", mask={mask}" if mask else ""
        self.line(f"tl.store({self.pointer[value]} + {offsets}, {var}{tail})")

    # ----- nodes -----------------------------------------------------------------------------------
    def translator(self, i: int, result_type: str) -> ScalarTranslator:
        node, space = self.domain.nodes[i], self.domain.spaces[i]

        def arg(j: int) -> Expr:
            expr, _ = self.read(node.inputs[j], self.domain.compose_map(i, space.inputs[j]))
            return expr

        def index(d: int) -> Expr:
            k = self.node_loop(i, d)
            return Expr(f"ix{k}", "int64" if self.wide else "int32") if k is not None else self.const("0", "int32")

        return ScalarTranslator(arg, index, self.const, result_type)

    def region(self, i: int) -> frozenset[int]:
        return self.domain.iterates(i)

    def check_size(self, i: int, loops) -> None:
        if self.numel(loops) > MAX_NUMEL:
            node = self.domain.nodes[i]
            raise TilegraphError(f"kernel {self.kernel.name}: node %{node.name} ({node.op}) needs a block of "
                                 f"{self.numel(loops)} elements, more than Triton's {MAX_NUMEL}; tile it smaller")

    def elementwise(self, i: int) -> None:
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        loops = self.region(i)
        self.check_size(i, loops)
        for value, amap, body in zip(node.results, space.outputs, space.body):
            t = tl_type(value.type.dtype)
            if isinstance(body, Arg):  # a copy (transpose, in-kernel reshape): no round trip through fp32
                e = cast(self.read(node.inputs[body.index], self.domain.compose_map(i, space.inputs[body.index]))[0], t)
            else:
                e = cast(self.translator(i, t)(body), t)
            name = self.fresh(self.tensor(value))
            self.line(f"{name} = tl.broadcast_to({e.code}, {self.shape(loops)})")
            self.env[value] = Expr(name, t)
            self.shape_of[value] = loops
            if value in self.outputs:
                self.store(value, name, loops, self.domain.compose_map(i, amap))

    def init_acc(self, i: int) -> None:
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        loops = self.region(i) - self.domain.reduces(i)
        plan = self.dot_plan(i)
        for value, init in zip(node.results, space.init):
            t = compute_type(tl_type(value.type.dtype))
            start = literal(init, t)
            if t == "int1":  # tl.sum/max of int1 give int32: count in int32, `!= 0` when finished
                t = "int32"
            name = self.fresh(f"{self.tensor(value)}_acc")
            if plan is not None and init == 0.0:  # tl.dot accumulates in place; one reshape when finished
                self.acc2d[value] = plan
                self.line(f"{name} = tl.zeros(({', '.join(map(str, self.dot_dims(plan)))}), dtype=tl.float32)")
            else:
                self.line(f"{name} = tl.full({self.shape(loops)}, {start}, tl.{t})")
            self.acc[value] = Expr(name, t)

    def accumulate(self, i: int, guard: str | None = None) -> None:
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        loops = self.region(i)
        reduced = sorted(self.domain.reduces(i))
        for value, body in zip(node.results, space.body):
            split = split_update(body)
            if split is None:
                raise TilegraphError(f"kernel {self.kernel.name}: %{node.name} ({node.op}): reduction body is not "
                                     "`acc op expr`; the Triton backend cannot generate it")
            fn, expr = split
            acc = self.acc[value]
            plan = self.dot_plan(i) if fn == "add" else None
            if plan is not None and value in self.acc2d:
                new = self.dot_product(i, plan, acc.code)
                self.line(f"{acc.code} = {new if not guard else f'tl.where({guard}, {new}, {acc.code})'}")
                continue
            if plan is not None:
                part = self.dot_block(i, plan)
            else:
                self.check_size(i, loops)
                e = cast(self.translator(i, acc.type)(expr), acc.type)
                part = self.fresh(f"{self.tensor(value)}_part")
                self.line(f"{part} = tl.broadcast_to({e.code}, {self.shape(loops)})")
                mask = self.mask_of(reduced)
                if mask:
                    self.line(f"{part} = tl.where({mask}, {part}, {literal(_IDENTITY[fn], acc.type)})")
                for k in reduced:
                    self.line(f"{part} = {_REDUCE[fn].format(x=part, k=k)}")
            new = f"({acc.code} {_COMBINE[fn]} {part})" if fn in _COMBINE else f"tl.{fn}imum({acc.code}, {part})"
            if guard:
                new = f"tl.where({guard}, {new}, {acc.code})"
            self.line(f"{acc.code} = {new}")

    def finish(self, i: int) -> None:
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        loops = self.region(i) - self.domain.reduces(i)
        for value, amap in zip(node.results, space.outputs):
            t = tl_type(value.type.dtype)
            name = self.fresh(self.tensor(value))
            self.line(f"{name} = {cast(self.acc[value], t).code}")
            if value in self.acc2d:
                self.as_block(name, self.acc2d[value])
            self.env[value] = Expr(name, t)
            self.shape_of[value] = loops
            if value in self.outputs:
                self.store(value, name, loops, self.domain.compose_map(i, amap))

    def whole(self, i: int) -> None:
        """A node evaluated completely in the current scope (elementwise, or reducing only whole loops)."""
        if any(init is not None for init in self.domain.spaces[i].init):
            self.init_acc(i)
            self.accumulate(i)
            self.finish(i)
        else:
            self.elementwise(i)

    # ----- schedules -------------------------------------------------------------------------------
    def header(self) -> None:
        args = ", ".join(self.pointer[v] for v in self.args)
        self.lines.append("@triton.jit")
        self.lines.append(f"def {self.function}({args}):")
        self.line(self.tile_comment())
        tiles = self.tile_count()
        if self.programs() < tiles:
            # persistent: a program per SM walks the tiles in launch order; `flatten` lets the software
            # pipeliner run on into the next tile's first loads while this one's epilogue stores
            self.line(f"for tile in tl.range(tl.program_id(0), {tiles}, {self.persistent}, flatten=True):")
            self.depth += 1
            self.line("pid = tile")
        else:
            self.line("pid = tl.program_id(0)")
        self.line(f"zr = tl.zeros({self.shape(())}, dtype=tl.{'int64' if self.wide else 'int32'})")
        grouped = self.grouped_tiles()
        if grouped is not None:
            m, n = grouped
            cm, cn, g = self.loops[m].count, self.loops[n].count, self.group_m
            # programs walk GROUP_M row tiles at a time so the B tiles they share stay in L2
            self.line(f"group = pid // {g * cn}")
            self.line(f"rows = tl.minimum({cm} - group * {g}, {g})")
            self.line(f"base{m} = (group * {g} + (pid % {g * cn}) % rows) * {self.loops[m].tile}")
            self.line(f"base{n} = ((pid % {g * cn}) // rows) * {self.loops[n].tile}")
        for k in reversed(range(self.R)):
            plan = self.loops[k]
            if plan.kind == PARALLEL:
                if grouped is not None and k in grouped:
                    self.define_loop(k, f"base{k}")
                elif plan.count > 1:
                    self.line(f"base{k} = (pid % {plan.count}) * {plan.tile}")
                    self.line(f"pid = pid // {plan.count}")
                    self.define_loop(k, f"base{k}")
                else:
                    self.define_loop(k, "0")
            elif plan.kind != REDUCTION or plan.count == 1:
                self.define_loop(k, "0")

    def tile_count(self) -> int:
        """Tiles of the parallel loops: one program each, unless the kernel is persistent."""
        return math.prod(p.count for p in self.loops if p.kind == PARALLEL)

    def programs(self) -> int:
        """Programs launched: one per tile, or a persistent kernel's fewer."""
        tiles = self.tile_count()
        return self.persistent if 0 < self.persistent < tiles else tiles

    def tile_comment(self) -> str:
        """`# tile: d0=32 (parallel), d2=64 (reduction)`: every loop's tile as generated (after
        `walk_reductions_in_chunks`), with its block of lanes where that is wider."""
        parts = []
        for k, plan in enumerate(self.loops):
            block = f", block {plan.block}" if plan.block != plan.tile else ""
            parts.append(f"d{k}={plan.tile} ({plan.kind}{block})")
        # the pointer's name, not the tensor's: repeated layers' kernels stay equal up to names (one compile)
        packed = "".join(f"; {self.pointer[v]} stored as axes {list(order)}" for v, order in self.layouts.items()
                         if v in self.pointer)
        return f"# tile: {', '.join(parts)}{packed}"

    def reduction_loops(self, loops: tuple[int, ...]) -> tuple[int, ...]:
        """Open the reduction loops of several tiles (one-tile loops are defined up front) in nested order:
        loops of one lane outermost, the wide block innermost. Where at most one loop has a wide block (an
        implicit-GEMM convolution: kh and kw walked, channels in chunks) they run as one flat `for`, which
        Triton pipelines whole, where a `for` per loop restarted the pipeline at every kh and kw. Gathered
        blocks (several wide loops: ResNet-50's 7x7 stem in IEEE f32) keep a `for` each: flat, their
        pipelined loads took 255 registers, 168 nested."""
        loops = tuple(sorted((k for k in loops if self.loops[k].count > 1), key=lambda k: (self.loops[k].block > 1, k)))
        self.hoist_at, self.hoist_depth = len(self.lines), self.depth
        flat = len(loops) > 1 and sum(self.loops[k].block > 1 for k in loops) <= 1
        if not flat:
            for k in loops:
                self.line(f"for rb{k} in range(0, {self.loops[k].extent}, {self.loops[k].tile}):")
                self.depth += 1
                self.define_loop(k, f"rb{k}")
        else:
            counts = [self.loops[k].count for k in loops]
            self.line(f"for rt in range(0, {math.prod(counts)}):")
            self.depth += 1
            for k, step in zip(loops, row_major("rt", counts)):  # rt walks the loops in nested order
                self.line(f"rb{k} = ({step}) * {self.loops[k].tile}")
            for k in loops:
                self.define_loop(k, f"rb{k}")
        self.loads = {}
        self.open = list(loops)
        self.flat = flat
        return loops

    def close_loops(self, loops: tuple[int, ...]) -> None:
        self.depth -= 1 if self.flat else len(loops)
        for k in loops:
            self.masks.pop(k, None)
        self.loads = {}
        self.open = []

    def generic(self) -> None:
        domain = self.domain
        count = len(domain.nodes)
        reduction = domain.loops_of_kind(REDUCTION)
        below = downstream(domain)
        after = set().union(*[below[i] for i in range(count) if domain.streamed[i]]) if reduction else set()
        reducers = {i for i in range(count) if any(x is not None for x in domain.spaces[i].init)}
        carried = {i for i in reducers if domain.reduces(i) & set(reduction)}
        prologue = [i for i in range(count) if not domain.streamed[i] and i not in after]
        streamed = [i for i in range(count) if domain.streamed[i]]
        epilogue = [i for i in range(count) if not domain.streamed[i] and i in after]
        self.header()
        for i in prologue:
            self.whole(i)
        for i in sorted(carried):
            self.init_acc(i)
        if streamed:
            opened = self.reduction_loops(reduction)
            for i in streamed:
                if i in carried:
                    others = [f"(rb{k} == 0)" for k in opened if k not in domain.iterates(i)]
                    self.accumulate(i, " & ".join(others) if others else None)
                else:
                    self.whole(i)
            self.close_loops(opened)
        for i in sorted(carried):
            self.finish(i)
        for i in epilogue:
            self.whole(i)

    def emit(self) -> KernelSource:
        if self.kernel.template is None:
            self.generic()
        else:
            lowering_for("triton", self.kernel.kind, TEMPLATE_EMITTERS)(self)
        return KernelSource(self.function, "\n".join(self.lines) + "\n", self.programs(), self.args, self.loops,
                            self.uses_dot)


def emit_kernel(kernel: Kernel, domain, function: str, interpreter: bool = False,
                names: dict[Value, str] | None = None, options: TritonOptions | None = None,
                layouts: Mapping[Value, tuple[int, ...]] | None = None,
                rounded: frozenset[Value] = frozenset()) -> KernelSource:
    """The `@triton.jit` source of one structured kernel (raises TilegraphError when unsupported);
    `names`: the module's tensor names (default: from the values' IR names); `options`: the build's
    (default: torch's precision flags now, `TritonOptions.from_torch`); `layouts`: parameters stored
    with permuted axes (`packing.plan_layouts`)."""
    return KernelEmitter(kernel, domain, function, interpreter, names, options, layouts, rounded).emit()


__all__ = ["emit_kernel", "KernelSource", "LoopPlan", "plan_loops", "next_pow2", "MAX_NUMEL"]


TEMPLATE_EMITTERS = {"attention": KernelEmitter.attention}  # kernel template -> its Triton code generator
# kernel template -> how it walks its reduction loops, where not as tiled (before any code or dot_shape reads them)
TEMPLATE_STEPS = {"attention": KernelEmitter.walk_keys_for_fma}
