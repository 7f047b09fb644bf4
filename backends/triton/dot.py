"""Reductions `acc + a * b` as `tl.dot`: matmul, batched matmul, conv2d as implicit GEMM, attention's matmuls.

A mixin of the kernel emitter (`kernel.KernelEmitter`): it needs the emitter's loop plans, reads,
and line output, and gives it `dot_plan` (is this node a dot, and over which loop groups),
`dot_product`/`dot_block` (the code), and `grouped_tiles` (launch order for tiled matmuls). f32 products
take the precision of the build's options (`options.TritonOptions`: TF32 where torch would use it).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tilegraph.ir.ops.layout import MOVES
from tilegraph.ir.structured import PARALLEL, Arg, Call

from .scalar import compute_type, tl_type

MIN_DOT = 16  # tl.dot needs every dimension >= 16 on the GPU
# K lanes of a dot on FMA units (IEEE f32): each thread holds its rows of A and columns of B for the whole
# K block, so a 64x64 block over K = 128 took 255 registers on sm_90 (3 ms for ViT's MLP on an H100);
# Inductor's f32 matmul configurations take 32 too
FMA_K = 32
# accumulators over this many elements walk FMA_K // 2 lanes of K on FMA units: a 128 x 256 block over 32 lanes
# spilled 472 B a thread on sm_90 at 8 warps, over 16 none (207 registers)
FMA_WIDE = 128 * 128
GROUP_M = 8  # row tiles per launch group in tiled matmuls (L2 reuse)


def row_major(flat: str, sizes: Sequence[int]) -> list[str]:
    """Expressions splitting the flat index `flat` of nested loops of `sizes` (the last innermost) into each
    loop's own index, by div and mod."""
    out = []
    for position, size in enumerate(sizes):
        stride = math.prod(sizes[position + 1:])
        out.append(flat + (f" // {stride}" if stride > 1 else "") + (f" % {size}" if position else ""))
    return out


def split_update(body):
    """A reduction body `acc <op> expr` as (op, expr) (the tiled reference executor's reading)."""
    from tilegraph.backends.reference.tiled import split_update as split

    return split(body)


@dataclass(frozen=True)
class DotPlan:
    """A reduction `acc + a * b` as tl.dot: which operands, and the batch / M / N / K loop groups."""

    args: tuple[int, int]
    bs: tuple[int, ...]
    ms: tuple[int, ...]
    ns: tuple[int, ...]
    ks: tuple[int, ...]

    @property
    def simple(self) -> bool:
        """A plain 2-D [m, k] @ [k, n]: operands load straight as 2-D blocks, the accumulator stays 2-D."""
        return not self.bs and len(self.ms) == 1 and len(self.ns) == 1


class DotMixin:
    """tl.dot code generation for KernelEmitter."""

    group_m = GROUP_M  # row tiles per launch group of a tiled matmul (a block-size variant may change it)
    persistent = 0  # programs launched, each walking tiles (a variant's, one per SM); 0: a program per tile

    def dot_plan(self, i: int) -> DotPlan | None:
        """Whether node i's `acc + a * b` is one tl.dot (implicit GEMM) in this block, and its loop groups.

        It is when a spans loops B + M + K and b spans B + K + N (sets of kernel loops wider than one
        lane; K the reduced ones, B batch loops in both: a 3-D dot), nothing else is wider than 1, and
        M, N, K have at least 16 lanes each. Matmul is M = {i}, N = {j}, K = {k}; conv2d is
        M = {n, oh, ow}, N = {f}, K = {c, kh, kw}.
        """
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        if len(node.results) != 1 or space.init[0] is None:
            return None
        if compute_type(tl_type(node.result.type.dtype)) != "float32":
            return None
        split = split_update(space.body[0])
        if split is None or split[0] != "add":
            return None
        expr = split[1]
        if not (isinstance(expr, Call) and expr.fn == "mul" and all(isinstance(a, Arg) for a in expr.args)):
            return None
        big_k = {k for k in self.domain.reduces(i) if self.loops[k].block > 1}
        spans = []
        for a in expr.args:
            value = node.inputs[a.index]
            if value.type.dtype.name not in ("f32", "f16", "bf16"):
                return None
            spans.append({d for d in self.static_loops(i, a.index) if self.loops[d].block > 1})
        (la, lb), (va, vb) = spans, (node.inputs[a.index] for a in expr.args)
        if va.type.dtype is not vb.type.dtype or not big_k or not (big_k <= la and big_k <= lb):
            return None
        bs = tuple(sorted((la & lb) - big_k))
        ms, ns, ks = (tuple(sorted(la - big_k - set(bs))), tuple(sorted(lb - big_k - set(bs))),
                      tuple(sorted(big_k)))
        if not ms or not ns:
            return None
        if {d for d in self.region(i) if self.loops[d].block > 1} - set(bs) - set(ms) - set(ns) - big_k:
            return None
        if any(math.prod(self.loops[d].block for d in group) < MIN_DOT for group in (ms, ns, ks)):
            return None
        return DotPlan((expr.args[0].index, expr.args[1].index), bs, ms, ns, ks)

    def on_fma(self, i: int, plan: DotPlan) -> bool:
        """Whether node i's tl.dot runs on FMA units, not tensor cores: IEEE f32 (TF32 off, torch's default
        for matmuls). Such a dot wants a short K block (`FMA_K`) and its B N-major (`packing.py`)."""
        node = self.domain.nodes[i]
        return node.inputs[plan.args[0]].type.dtype.name == "f32" and self.options.precision(node.op) == "ieee"

    def fma_k(self, plan: DotPlan) -> int:
        """K lanes a step of this dot on FMA units (`FMA_K`; half for accumulators over `FMA_WIDE`)."""
        accumulator = self.numel(plan.bs) * self.numel(plan.ms) * self.numel(plan.ns)
        return FMA_K if accumulator <= FMA_WIDE else FMA_K // 2

    def static_loops(self, i: int, j: int) -> frozenset[int]:
        """The kernel loops operand j of node i spans, before any code is emitted."""
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        return self._spans(node.inputs[j], self.domain.compose_map(i, space.inputs[j]))

    def _spans(self, value, amap) -> frozenset[int]:
        """The loops `value`, read through `amap`, varies over: a copy made in the kernel (a broadcast of grouped
        keys over the heads of a group) varies over what its source does, not over every loop of its space."""
        if value.producer not in self.domain.nodes:
            return frozenset(d for e in amap.exprs for d, _ in e.terms)
        p = self.domain.index(value.producer)
        own = self.region(p) - self.domain.reduces(p)
        if value.producer.op not in MOVES:
            return own
        return own & self._spans(value.producer.inputs[0], self.domain.compose_map(p, self.domain.spaces[p].inputs[0]))

    def dot_operand(self, i: int, plan: DotPlan, which: int) -> str:
        """Operand `which` (0: a, 1: b) as a [rows, cols] (or [batch, rows, cols]) block for tl.dot."""
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        j = plan.args[which]
        value, amap = node.inputs[j], self.domain.compose_map(i, space.inputs[j])
        rows, cols = (plan.ms, plan.ks) if which == 0 else (plan.ks, plan.ns)
        size = {d: self.loops[d].block for d in range(self.R)}
        name = self.fresh(f"{self.tensor(value)}_op")
        if value in self.env:  # moved in this kernel (a head split's reshape and transpose): load its source
            value, amap = self.moved_from(value) or (value, amap)
        loops = frozenset(d for e in amap.exprs for d, _ in e.terms)
        scalars = loops - set(rows) - set(cols)  # loops of one lane here (an implicit-GEMM conv's n, oh, kh, kw)
        bordered = len(plan.ks) > 1 and self.pad_masks(value, amap)
        if not plan.bs and value not in self.env and amap.pad in (None, 0.0) and not bordered \
                and set(rows + cols) <= loops and all(self.loops[d].block == 1 for d in scalars) and not self.wide:
            # a 2-D load feeding the dot (what the software pipeliner looks for); a side over several loops
            # (a convolution's n x oh x ow rows) numbers its lanes flat and splits them by division, unless
            # a window's border masks a K over several loops (the 7x7 stem's c x kh x kw: 255 registers
            # flat, 217 loading a block and reshaping it, in the sm_90 build)
            names, masks = {d: f"iv{d}[:, None]" for d in scalars}, []
            for group, axis in ((rows, "[:, None]"), (cols, "[None, :]")):
                for d, (index, mask) in self.flat_lanes(group).items():
                    names[d] = f"{index}{axis}"
                    masks += [f"{mask}{axis}"] if mask else []
            masks += self.pad_masks(value, amap, names)
            address = f"{self.pointer[value]} + {self.offsets(value, amap, names)}"
            text = f"{name} = tl.load({address}, mask={' & '.join(masks)}, other=0.0)" if masks \
                else f"{name} = tl.load({address})"
            if self.open and not (loops & set(self.open)):
                self.hoisted(text)
            else:
                self.line(text)
            return name
        e, _ = self.read(value, amap)
        mask = self.mask_of(plan.ks) if value in self.env else None  # loads already read 0 in tails
        # the zero fill keeps the operand's type: a float32 0.0 would promote a bf16 operand, and tl.dot
        # takes operands of one type
        x = e.code if not mask else f"tl.where({mask}, {e.code}, 0.0).to(tl.{e.type})"
        group = plan.bs + rows + cols
        self.line(f"{name} = tl.broadcast_to({x}, {self.shape(set(group))})")
        self.rearrange(name, sorted(group), list(group))
        dims = ([str(math.prod(size[d] for d in plan.bs))] if plan.bs else []) + \
            [str(math.prod(size[d] for d in rows)), str(math.prod(size[d] for d in cols))]
        self.line(f"{name} = tl.reshape({name}, ({', '.join(dims)}))")
        return name

    def flat_lanes(self, group: tuple[int, ...]) -> dict[int, tuple[str, str | None]]:
        """Per loop of a dot side: the names of its indices and lane mask as 1-D vectors over the side's lanes,
        numbered row-major over the group's loops (the order `tl.reshape` gives a gathered block); a side over
        several loops defines them (`<name>_i<k>`, `<name>_m<k>`), before the reduction loops when it can."""
        if len(group) == 1:
            (d,) = group
            return {d: (f"iv{d}", f"mv{d}" if self.masks.get(d) else None)}
        outer = not set(group) & set(self.open)
        cache = self.outer_loads if outer else self.loads  # both operands of a gathered K share its lanes
        if ("lanes", group) in cache:
            return cache["lanes", group]
        emit = self.hoisted if self.open and outer else self.line
        blocks = [self.loops[d].block for d in group]
        lanes, out = math.prod(blocks), {}
        for d, lane in zip(group, row_major(f"tl.arange(0, {lanes})", blocks)):
            index = self.fresh(f"lane{lanes}_i{d}")
            emit(f"{index} = {self.bases[d]} + {lane}")
            mask, mask_name = self.lane_mask(d, index, f"({lane})"), None
            if mask:
                mask_name = self.fresh(f"lane{lanes}_m{d}")
                emit(f"{mask_name} = {mask}")
            out[d] = (index, mask_name)
        cache["lanes", group] = out
        return out

    def moved_from(self, value):
        """(kernel input, its map over the kernel loops) when `value` is that input's elements moved by nodes
        of this kernel that only copy (a body that is its one operand, of the same type: reshape,
        transpose, broadcast); None otherwise. A dot then loads the input as a plain 2-D block."""
        while value.producer in self.domain.nodes:
            p = self.domain.index(value.producer)
            node, space = value.producer, self.domain.spaces[p]
            if space is None or len(node.inputs) != 1 or space.body != (Arg(0),) or space.init != (None,) \
                    or space.inputs[0].pad is not None or node.inputs[0].type.dtype != value.type.dtype:
                return None
            value = node.inputs[0]
            if value in self.pointer:
                return value, self.domain.compose_map(p, space.inputs[0])
        return None

    def dot_product(self, i: int, plan: DotPlan, acc: str | None = None) -> str:
        """`tl.dot(a, b[, acc])` of node i's operands."""
        a = self.dot_operand(i, plan, 0)
        b = self.dot_operand(i, plan, 1)
        node = self.domain.nodes[i]
        dtype = node.inputs[plan.args[0]].type.dtype.name
        precision = ""
        if dtype == "bf16" and self.interpreter:  # bf16 values are exact in f32 (and in TF32)
            a, b, precision = f"{a}.to(tl.float32)", f"{b}.to(tl.float32)", ', input_precision="ieee"'
        elif dtype == "f32":
            mode = self.options.precision(node.op)
            if mode == "tf32":  # to nearest TF32, as cuBLAS and cuDNN: tensor cores fed f32 bits truncate them
                a, b = (operand if node.inputs[j] in self.rounded else f"_tg_tf32({operand})"
                        for operand, j in ((a, plan.args[0]), (b, plan.args[1])))
            precision = f', input_precision="{mode}"'
        self.uses_dot = True
        if acc is not None:
            return f"tl.dot({a}, {b}, {acc}{precision})"
        return f"tl.dot({a}, {b}{precision}, out_dtype=tl.float32)"

    def dot_block(self, i: int, plan: DotPlan) -> str:
        """The dot of node i as a rank-R block over M + N (+ batch) loops."""
        out = self.fresh(f"{self.tensor(self.domain.nodes[i].results[0])}_part")
        self.line(f"{out} = {self.dot_product(i, plan)}")
        self.as_block(out, plan)
        return out

    def dot_dims(self, plan: DotPlan) -> tuple[int, ...]:
        """The [batch,] M x N shape of `plan`'s dot: each group's loops flattened."""
        size = lambda group: math.prod(self.loops[d].block for d in group)  # noqa: E731
        return ((size(plan.bs),) if plan.bs else ()) + (size(plan.ms), size(plan.ns))

    def as_block(self, name: str, plan: DotPlan) -> None:
        """Reshape `name`, a [batch,] M x N result of `plan`'s dot, into a rank-R block over its loops."""
        order = list(plan.bs + plan.ms + plan.ns)
        if len(order) > len(self.dot_dims(plan)):  # some group spans several loops: split it
            self.line(f"{name} = tl.reshape({name}, ({', '.join(str(self.loops[d].block) for d in order)},))")
        if order != sorted(order):
            self.line(f"{name} = tl.permute({name}, ({', '.join(str(order.index(d)) for d in sorted(order))},))")
        self.line(f"{name} = tl.reshape({name}, {self.shape(set(order))})")

    def rearrange(self, name: str, have: list[int], want: list[int]) -> None:
        """Squeeze a rank-R block to the axes `have` (in kernel order), then permute them into `want`."""
        sizes = ", ".join(str(self.loops[d].block) for d in have)
        self.line(f"{name} = tl.reshape({name}, ({sizes},))")
        if have != want:
            self.line(f"{name} = tl.permute({name}, ({', '.join(str(have.index(d)) for d in want)},))")

    def grouped_tiles(self) -> tuple[int, int] | None:
        """(m, n) when the kernel is a tiled 2-D matmul (plus epilogue): exactly two parallel loops of
        several tiles, and a node whose reduction is a plain tl.dot over them."""
        if self.kernel.template is not None:
            return None
        tiled = [k for k, p in enumerate(self.loops) if p.kind == PARALLEL and p.count > 1]
        if len(tiled) != 2 or self.loops[tiled[0]].count <= self.group_m:
            return None
        for i in range(len(self.domain.nodes)):
            plan = self.dot_plan(i)
            if plan is not None and plan.simple and set(plan.ms + plan.ns) == set(tiled):
                return plan.ms[0], plan.ns[0]
        return None


__all__ = ["DotPlan", "DotMixin", "row_major", "split_update", "MIN_DOT", "GROUP_M"]
