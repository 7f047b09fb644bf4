"""The register-tiled micro-kernel for reductions (matmul, convolution, pooling, sums).

A reduction node runs over its output loops in blocks of MR (loop `u`) by NR (loop `v`, the one
with unit stride in the output) elements, the reduction loops inside, so the MR x NR partial
results stay in registers for the whole reduction and every load is reused along the loops it
does not depend on: for a matmul, a row of B (NR wide) serves all MR rows, an element of A is
broadcast across NR columns. Where the dialect has vectors (C++: GCC vector extensions) and the
body is a sum of products in f32, the block is written with explicit vectors; padded rows and
edges along `v` load only their lanes inside the tensor (masked loads), other edges run a scalar
block. MR and NR come from `MicroKernel`, capped by the tile sizes the tiling pass chose; NR
widens when the tile caps MR, so the block keeps enough accumulators to hide the FMA latency.
A matmul's weight is read from a load-time copy in panels one vector wide (`plan_weight_panels`). A block of one
output point reduces a contiguous row across a vector's lanes (`_lane_loop`), not one element at a time.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tilegraph.backends.reference.tiled import split_update
from tilegraph.ir.graph import Value
from tilegraph.ir.structured import Acc, AffineMap, Arg, Call, Const
from tilegraph.ir.types import DType

from .buffers import ConstantBuffer, Var, affine_text, element_steps, loops_read, store
from .code import Code
from .conv import PackedBuffer, WeightPack, load_time, plan_channels, row_blocks
from .flatrows import FlatPlan, FlatRows
from .names import compute_type, init_literal
from .scalar import scalar_expr


@dataclass(frozen=True)
class MicroKernel:
    """Register block of reductions: MR rows (outer output loop) by NR columns (inner, vectorised)."""

    mr: int = 8
    nr: int = 32
    min_parallel_flops: int = 2_000_000
    threads_hint: int = 8  # parallel tiles `widen_tiles` keeps at least
    min_rows: int = 8  # a vector block's row loop gets parallel tiles at least this tall (`widen_tiles`)
    fused_stores: bool = True  # blocks apply their elementwise epilogue as they store (`plan_fused_stores`)
    # load-time weight copies (channel blocks, panels): the most bytes a program holds beside the caller's weights
    # (`source.generate`: kernels past it read their weights as stored); `pack_weights` off: none in this kernel
    packed_weight_limit: int = 1 << 30
    pack_weights: bool = True


def _sum_of_products(expr) -> bool:
    """A body built from operands, the accumulator, constants, add, sub and mul only."""
    if isinstance(expr, Call):
        return expr.fn in ("add", "sub", "mul") and all(_sum_of_products(a) for a in expr.args)
    return isinstance(expr, (Arg, Acc, Const))


# Per-lane start of a reduction split across lanes (`RegisterBlocks._lane_loop`): the identity of its combine.
_LANE_IDENTITY = {"add": 0.0, "max": -math.inf, "min": math.inf}


def _running_extreme(expr) -> bool:
    """A body `max(acc, x)` or `min(acc, x)` of one operand (max pooling)."""
    return isinstance(expr, Call) and expr.fn in ("max", "min") and len(expr.args) == 2 \
        and any(isinstance(a, Acc) for a in expr.args) and any(isinstance(a, Arg) for a in expr.args)


class RegisterBlocks(FlatRows):
    """Reduction nodes as register-blocked loop nests (mixed into KernelEmitter)."""

    def widen_tiles(self) -> None:
        """Widen a parallel tile narrower than `MicroKernel.min_rows` on a vector block's row loop
        (if `threads_hint` tiles remain): each block row reuses the vectors loaded along `v`, so a
        narrow tile re-reads them more often. A 2-row block ran a ResNet block conv 30% slower than
        4 rows; 8 rows (8 x 32, NR narrowing as MR grows) halve the input the 3x3 convs stream
        from L2 against 4 x 64 and ran them 10% faster (GPT-2 tiny's matmuls 30%)."""
        for i in range(len(self.domain.nodes)):
            space = self.domain.spaces[i]
            if i in self.skipped or space is None or any(init is None for init in space.init):
                continue
            keep = self._order(i, [k for k in self.domain.iterates(i) if k not in self.domain.reduces(i)])
            v = keep[-1] if keep else None
            u = self._pick_u(i, keep[:-1], v)
            if u is None or u not in self.parallel or not self._vectorizable(i, v):
                continue
            rows = min(self.micro.min_rows, self.extents[u])
            if self.tile[u] >= rows:
                continue
            tiles = math.prod(-(-self.extents[k] // (rows if k == u else self.tile[k])) for k in self.parallel)
            if tiles >= self.micro.threads_hint:
                self.tile[u] = rows

    def plan_channel_blocks(self, inputs) -> None:
        """Decide which reductions run as channel blocks (conv.py), reading their constant operand
        (one of the kernel's `inputs`) from its repacked copy: `channel_plans` (node -> plan),
        `packs` (value -> pack). A parallel channel tile is widened to whole vectors, and an
        outer output loop's tile narrowed so that `threads_hint` tiles remain."""
        width = self.dialect.vector_width
        for i, space in enumerate(self.domain.spaces):
            if i in self.skipped or space is None or any(init is None for init in space.init):
                continue
            keep = self._order(i, [k for k in self.domain.iterates(i) if k not in self.domain.reduces(i)])
            plan = plan_channels(self, i, keep, inputs)
            if plan is None:
                continue
            value = self.domain.nodes[i].inputs[plan.operand]
            if value in self.packs and self.packs[value] != plan.pack:
                continue
            v = plan.v
            if v in self.parallel and self.tile[v] % width and self.tile[v] < self.extents[v]:
                self.tile[v] = min(self.extents[v], -(-self.tile[v] // width) * width)
            if self.tile[v] % width and self.tile[v] < self.extents[v]:
                continue  # blocks would start inside a packed vector
            self.channel_plans[i] = plan
            self.packs[value] = plan.pack
            tiles = lambda: math.prod(-(-self.extents[k] // self.tile[k]) for k in self.parallel)  # noqa: E731
            for k in keep:
                while k in self.parallel and k not in (plan.u, v) and self.tile[k] > 1 \
                        and tiles() < self.micro.threads_hint:
                    self.tile[k] = -(-self.tile[k] // 2)

    def plan_weight_panels(self, inputs) -> None:
        """Read a row block's matmul-like weight (`_panel_weight`) from a copy packed in panels one vector wide
        (`conv.WeightPack` along its last axis: [K, N] -> [N/16, K, 16]), so that the columns a block reads down
        the reduction are one contiguous stream. Row-major they are N elements apart: 4 KiB for Llama's MLP-down
        weight (N = 1024), a stride that maps a 2816-row strip onto few cache sets
        (`benchmarks/results/cpu_matmul_tiles.md`)."""
        width = self.dialect.vector_width
        for i, space in enumerate(self.domain.spaces):
            if i in self.skipped or i in self.channel_plans or space is None \
                    or any(init is None for init in space.init):
                continue
            keep = self._order(i, [k for k in self.domain.iterates(i) if k not in self.domain.reduces(i)])
            v = keep[-1] if keep else None
            if not self._vectorizable(i, v) or (self.tile[v] % width and self.tile[v] < self.extents[v]):
                continue  # (a block must start on a panel's first column)
            for weight, amap in zip(self.domain.nodes[i].inputs, space.inputs):
                if self._panel_weight(i, v, weight, self.domain.compose_map(i, amap), inputs):
                    # (one packed another way for another node of this kernel is read from that copy)
                    self.packs.setdefault(weight, WeightPack(weight, weight.type.rank - 1, width))

    def _panel_weight(self, i: int, v: int, weight: Value, cmap: AffineMap, inputs) -> bool:
        """Whether node i reads `weight` (through `cmap`) as a matmul reads its weight: an array known at load time,
        read as stored (one loop per axis, no offset or padding), `v` along its last axis, a reduction along another."""
        if weight not in inputs or not load_time(weight, self.folded) or cmap.pad is not None:
            return False
        if weight.producer in self.folded and ConstantBuffer.of(weight) is not None:
            return False  # a literal in the code, not an array
        axes = [dict(e.terms) for e in cmap.exprs]
        if len(axes) < 2 or any(e.const for e in cmap.exprs) or any(len(t) != 1 or set(t.values()) != {1}
                                                                    for t in axes):
            return False
        return v in axes[-1] and any(k in t for t in axes[:-1] for k in self.domain.reduces(i))

    def _span(self, ranges: dict[int, tuple[str, str]], k: int) -> int:
        """The longest range loop k takes in `ranges` (its tile, or its extent when whole)."""
        lo, hi = ranges[k]
        return self.extents[k] if lo == "0" and hi == str(self.extents[k]) else self.tile[k]

    def _lengths(self, ranges: dict[int, tuple[str, str]], k: int) -> set[int]:
        """Every length loop k's range in `ranges` takes: its extent when whole, else its tile and
        the last tile's remainder (static shapes: decided here, not when the code runs)."""
        lo, hi = ranges[k]
        e = self.extents[k]
        if lo == "0" and hi == str(e):
            return {e}
        t = self.tile[k]
        return {t} | ({e % t} if e % t else set())

    def _blocks(self, lengths: set[int], step: int) -> set[int]:
        """The sizes of the blocks a loop walking ranges of `lengths` in steps of `step` meets
        (`mu`, `nv`: the full step, and each range's remainder)."""
        return {b for n in lengths for b in ((step,) if n >= step else ()) + ((n % step,) if n % step else ())}

    def _pick_u(self, i: int, outer: list[int], v: int | None) -> int | None:
        """The loop to block MR-wide: the one most operands loaded along `v` do not depend on."""
        if not outer:
            return None
        space = self.domain.spaces[i]
        maps = [self.domain.compose_map(i, m) for m in space.inputs]
        uses = [frozenset(d for e in m.exprs for d, _ in e.terms) for m in maps]

        def reuse(u: int) -> int:
            return sum(1 for used in uses if (v is None or v in used) and u not in used)

        best = max(range(len(outer)), key=lambda n: (reuse(outer[n]), n))
        return outer[best]

    def _reduce(self, code: Code, i: int, ranges: dict[int, tuple[str, str]], reduced, first: str | None) -> None:
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        keep = self._order(i, [k for k in ranges if k not in reduced])
        inner = [k for k in sorted(ranges) if k in reduced]
        channels = self.channel_plans.get(i)
        if channels is not None:  # vectors along the output channels (conv.py)
            u, v = channels.u, channels.v
            mr = row_blocks(self._span(ranges, u), self.micro.mr)
        else:
            v = keep[-1] if keep else None
            u = self._pick_u(i, keep[:-1], v)
            mr = min(self.micro.mr, self._span(ranges, u)) if u is not None else 1
        outer = [k for k in keep if k not in (u, v)]
        # a vector along v one element wide is 15 idle lanes and a 16-lane gather per element (a layer norm's mean
        # over a 1-row tile: ViT's took 2.6 ms a call): scalars, summing in the same order
        vector = self._vectorizable(i, v) and self._span(ranges, v) > 1
        flat = self._flat_plan(i, ranges, keep, u, v, mr, inner) \
            if vector and channels is None and self._zero_padded(i) else None
        if flat is not None:  # rows folded with columns (flatrows.py)
            nr = flat.nr
            outer = [k for k in outer if k != flat.w]
            for table in flat.tables.values():
                for text in table.declaration().splitlines():
                    code.line(text)
        else:
            nr = self._pick_nr(ranges, v, mr, vector)
        loops = [(f"i{k}", *ranges[k], 1) for k in outer]
        if flat is not None:
            loops += [(f"b{u}", *ranges[u], mr), ("bf", "0", str(flat.total), nr)]
        else:
            loops += [(f"b{k}", *ranges[k], step) for k, step in ((u, mr), (v, nr)) if k is not None]
        depth = self._loops(code, loops)
        # The register-block variants: full (mr x nr, vectors where the body allows), masked (mr
        # rows, a partial vector row) and scalar (a partial block, mu x nv). The static shapes say
        # which block sizes occur, so only the variants they reach are emitted; each keeps the test
        # that picks it at run time (the compiler reads the block's shape off it).
        mus = self._blocks(self._lengths(ranges, u), mr) if u is not None else {1}
        nvs = (self._blocks({flat.total}, nr) if flat is not None else
               self._blocks(self._lengths(ranges, v), nr) if v is not None else {1})
        variants: list[tuple[str | None, Callable[[], None]]] = []  # (test, emit); None: the rest
        vector_variant = lambda rows=mr, **kw: lambda: self._vector_block(code, i, var, u, v, rows, nr,  # noqa: E731
                                                                          inner, ranges, first, **kw)
        if channels is not None:  # a vector block per row count: no scalar edges
            for rows in sorted(mus, reverse=True):
                if nr in nvs:
                    variants.append((f"mu == {rows} && nv == {nr}", vector_variant(rows)))
                if any(n < nr for n in nvs):
                    variants.append((f"mu == {rows}", vector_variant(rows, masked=True)))
        elif flat is not None:
            variants.append((f"mu == {mr}", vector_variant(masked=True, flat=flat)))
        elif mr == 1 and nr == 1:
            variants.append((None, lambda: block("1", "1", self._lane_loop(i, inner, ranges))))
        elif mr in mus and nr in nvs:
            variants.append((f"mu == {mr} && nv == {nr}",
                             vector_variant() if vector else lambda: block(str(mr), str(nr))))
        masked = vector and flat is None and mr in mus and any(n < nr for n in nvs)
        if masked and channels is None:  # a partial block along v: masked rows
            variants.append((f"mu == {mr}", vector_variant(masked=True)))
        tails = sorted(mus - {mr}, reverse=True) if vector and flat is None and channels is None and nr > 1 else []
        for rows in tails:  # the last rows of a range (14 = 8 + 6) as a vector block too, not scalar
            variants.append((f"mu == {rows}", vector_variant(rows, masked=True)))
        masked = masked or bool(tails)
        scalar = (mr, nr) != (1, 1) and (mus - {mr} - set(tails) or (nvs != {nr} and not vector)) \
            and channels is None
        if scalar:  # partial along u (or v, without vectors): a scalar block of mu x nv
            variants.append((None, lambda: block("mu", "nv")))
        tests = " ".join(test for test, _ in variants if test)
        if tests or scalar:
            code.line(f"const int64_t mu = {f'tg_lmin({mr}, {ranges[u][1]} - b{u})' if u is not None else 1};")
        if "nv" in tests or scalar or masked or flat is not None:
            nv = (f"tg_lmin({nr}, {flat.total} - bf)" if flat is not None else
                  f"tg_lmin({nr}, {ranges[v][1]} - b{v})" if v is not None else "1")
            code.line(f"const int64_t nv = {nv};")
        if tests:
            shapes = lambda sizes: ", ".join(map(str, sorted(sizes, reverse=True)))  # noqa: E731
            code.line(f"// register blocks: mu in {{{shapes(mus)}}}, nv in {{{shapes(nvs)}}}")
        accs = []
        for r, value in enumerate(node.results):
            if scalar or not vector or (mr, nr) == (1, 1):  # the scalar blocks' accumulators
                code.line(f"{compute_type(value.type.dtype, node.op)} acc{r}[{mr}][{nr}];")
            accs.append(f"acc{r}[uu][vv]")

        def var(k: int) -> str:
            if k == u:
                return f"(b{k} + uu)"
            if flat is not None and k == flat.w:
                return f"((bf + vv) / {flat.width})"
            if flat is not None and k == v:
                return f"((bf + vv) % {flat.width})"
            if k == v:
                return f"(b{k} + vv)"
            return f"i{k}"

        def block(bu: str, bv: str, lanes: int | None = None) -> None:
            lvalues = [self.buffers[val].lvalue(self.domain.compose_map(i, m), var) if val in self.buffers else None
                       for val, m in zip(node.results, space.outputs)]
            with code.block(f"for (int64_t uu = 0; uu < {bu}; ++uu)"):
                with code.block(f"for (int64_t vv = 0; vv < {bv}; ++vv)"):
                    for r, (value, init) in enumerate(zip(node.results, space.init)):
                        start = init_literal(init, value.type.dtype)
                        code.line(f"acc{r}[uu][vv] = {start if first is None else f'({first}) ? {start} : {lvalues[r]}'};")
            def steps(checked: bool) -> None:
                inner_depth = code.depth
                for k in inner:
                    lo, hi = ranges[k]
                    code.line(f"for (int64_t i{k} = {lo}; i{k} < {hi}; ++i{k}) {{")
                    code.depth += 1
                self._update(code, i, var, u, v, bu, bv, nr, accs, checked)
                while code.depth > inner_depth:
                    code.depth -= 1
                    code.line("}")

            inside = self._inside(i, ranges, inner, u, v, bu, bv) if flat is None else None
            if lanes is not None:  # one output point: its reduction split across vector lanes
                self._lane_steps(code, i, var, inner, ranges, lanes,
                                 update=lambda: self._update(code, i, var, u, v, bu, bv, nr, accs))
            elif inside is None:
                steps(True)
            else:  # blocks whose windows stay inside the tensor read it without checks
                with code.block(f"if ({inside})"):
                    steps(False)
                with code.block("else"):
                    steps(True)
            with code.block(f"for (int64_t uu = 0; uu < {bu}; ++uu)"):
                if i in self.fused:
                    self._store_fused(code, i, f"for (int64_t vv = 0; vv < {bv}; ++vv)", "acc0[uu][vv]", var, v=v)
                    return
                with code.block(f"for (int64_t vv = 0; vv < {bv}; ++vv)"):
                    for r, value in enumerate(node.results):
                        final = store(value, f"acc{r}[uu][vv]") if i not in self.carried else f"acc{r}[uu][vv]"
                        code.line(f"{lvalues[r]} = {final};")

        if variants[0][0] is None:  # a single variant for every block
            variants[0][1]()
        for n, (test, emit) in enumerate(variants if variants[0][0] is not None else ()):
            with code.block(f"if ({test})" if n == 0 else f"else if ({test})" if test else "else"):
                emit()
        while code.depth > depth:
            code.depth -= 1
            code.line("}")

    def _lane_loop(self, i: int, inner: list[int], ranges: dict[int, tuple[str, str]]) -> int | None:
        """Lanes to split node i's innermost reduction loop across, where a block is one output point: an f32
        `acc + x` (or a running max/min) over a loop at least two vectors long that every operand reads
        contiguously or not at all, unpadded. Summed one element at a time, each add waits for the last (a
        layer norm's means over 768 channels took 0.3 ms of ViT's 197-row layer norm; split, 0.065). None
        where not."""
        width = self.dialect.vector_width
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        if not width or not inner or len(node.results) != 1 or node.results[0].type.dtype is not DType.f32 \
                or any(x.type.dtype is not DType.f32 for x in node.inputs):
            return None
        update, k = split_update(space.body[0]), inner[-1]  # `acc <op> x`, x free of acc
        if update is None or update[0] not in _LANE_IDENTITY:
            return None
        steps = []
        for value, amap in zip(node.inputs, space.inputs):
            if amap.pad is not None:
                return None
            buf = self.buffers[value]
            steps.append(0 if isinstance(buf, ConstantBuffer) else
                         element_steps(buf, self.domain.compose_map(i, amap)).get(k, 0))
        if self._span(ranges, k) < 2 * width or not set(steps) <= {0, 1} or 1 not in steps:
            return None
        return width

    def _lane_steps(self, code: Code, i: int, var: Var, inner: list[int], ranges: dict[int, tuple[str, str]],
                    lanes: int, update: Callable[[], None]) -> None:
        """The reduction loops of one output point, the innermost in steps of `lanes`: lane l reduces elements
        l, l + lanes, ... into `lane0[l]` (independent adds, one vector), the remainder into `acc0[0][0]` one by
        one (`update`, the block's own step), then the lanes into it in order: the same sum every call, in
        another order than one by one."""
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        body, k = space.body[0], inner[-1]
        value = node.results[0]
        ctype = compute_type(value.type.dtype, node.op)
        code.line("const int64_t uu = 0, vv = 0;  // the block's one point (its reads name them)")
        code.line(f"{ctype} lane0[{lanes}];")
        identity = init_literal(_LANE_IDENTITY[body.fn], value.type.dtype)
        code.line(f"for (int64_t l = 0; l < {lanes}; ++l) lane0[l] = {identity};")
        depth = code.depth
        for d in inner[:-1]:
            lo, hi = ranges[d]
            code.line(f"for (int64_t i{d} = {lo}; i{d} < {hi}; ++i{d}) {{")
            code.depth += 1
        lo, hi = ranges[k]
        with code.block(""):
            code.line(f"int64_t i{k} = {lo};")
            with code.block(f"for (; i{k} + {lanes} <= {hi}; i{k} += {lanes})"):
                lane_var: Var = lambda d: f"(i{k} + l)" if d == k else var(d)  # noqa: E731
                names = []
                if self.dialect.simd():
                    code.raw(self.dialect.simd())
                with code.block(f"for (int64_t l = 0; l < {lanes}; ++l)"):
                    for n, (operand, amap) in enumerate(zip(node.inputs, space.inputs)):
                        read = self._read(self.buffers[operand], self.domain.compose_map(i, amap), lane_var, True)
                        code.line(f"const {compute_type(operand.type.dtype, node.op)} a{n} = {read};")
                        names.append(f"a{n}")
                    index = self._index_fn(i, lane_var)
                    step = scalar_expr(body, names, value.type.dtype, index, acc="lane0[l]", op=node.op)
                    code.line(f"lane0[l] = {step};")
            with code.block(f"for (; i{k} < {hi}; ++i{k})"):
                update()
        while code.depth > depth:
            code.depth -= 1
            code.line("}")
        combine = scalar_expr(Call(body.fn, (Acc(), Arg(0))), ["lane0[l]"], value.type.dtype, self._index_fn(i, var),
                              acc="acc0[0][0]", op=node.op)
        code.line(f"for (int64_t l = 0; l < {lanes}; ++l) acc0[0][0] = {combine};")

    def _pick_nr(self, ranges: dict[int, tuple[str, str]], v: int | None, mr: int, vector: bool) -> int:
        """The register block's width along `v`: NR capped by the range for scalar blocks, whole
        vectors for vector blocks (`_vector_nr`)."""
        if v is None:
            return 1
        span = self._span(ranges, v)
        width = self.dialect.vector_width
        if not vector:
            nr = min(self.micro.nr, span)
            return nr - nr % width if width and nr > width else nr
        return self._vector_nr(span, mr)

    def _vectorizable(self, i: int, v: int | None) -> bool:
        """Whether the register block can use explicit vectors: an f32 body with one result, a
        sum of products or a running max/min (pooling)."""
        width = self.dialect.vector_width
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        if not width or v is None or len(node.results) != 1:
            return False
        if node.results[0].type.dtype is not DType.f32 or any(x.type.dtype is not DType.f32 for x in node.inputs):
            return False
        return _sum_of_products(space.body[0]) or _running_extreme(space.body[0])

    def _zero_padded(self, i: int) -> bool:
        """Whether node i's padded reads (if any) read zeros: masked loads may then zero-fill."""
        return all(m.pad in (None, 0.0) for m in self.domain.spaces[i].inputs)

    def _lane_span(self, buf, cmap: AffineMap, var: Var, v: int, limit: str, stride: int = 1) -> tuple[str] | None:
        """C statements setting `lane_lo`, `lane_hi`: the lanes of a row along `v` (from `b{v}`,
        below `limit`) whose reads are inside the tensor. None when a padded axis does not move
        by `stride` elements per lane (the row is gathered instead)."""
        los, his, inside = [], [limit], []
        at_start = lambda k: f"b{k}" if k == v else var(k)  # noqa: E731
        for expr, size, below, above in buf.bounds(cmap, self.extents):
            step = dict(expr.terms).get(v, 0)
            text = affine_text(dict(expr.terms), expr.const, at_start)
            if step == 0:
                inside += [f"({text}) >= 0"] * below + [f"({text}) < {size}"] * above
            elif step == 1 == stride:
                los += [f"-({text})"] * below
                his += [f"{size} - ({text})"] * above
            elif step == stride > 1:  # lane l reads text + stride * l: ceilings of the bounds
                los += [f"(-({text}) + {stride - 1}) / {stride}"] * below
                his += [f"({size} - ({text}) + {stride - 1}) / {stride}"] * above
            else:
                return None
        lo = "0"
        for text in los:
            lo = f"tg_lmax({lo}, {text})"
        hi = his[0]
        for text in his[1:]:
            hi = f"tg_lmin({hi}, {text})"
        if inside:
            hi = f"({' && '.join(inside)}) ? {hi} : 0"
        return (f"const int64_t lane_lo = {lo}; const int64_t lane_hi = {hi};",)

    def _contiguous(self, value: Value, cmap: AffineMap, v: int) -> bool:
        """Whether `value` read through `cmap` is contiguous along loop v (unit stride)."""
        return element_steps(self.buffers[value], cmap).get(v, 0) == 1

    def _vector_block(self, code: Code, i: int, var: Var, u: int | None, v: int, mr: int, nr: int,
                      inner: list[int], ranges: dict[int, tuple[str, str]], first: str | None,
                      masked: bool = False, flat: FlatPlan | None = None) -> None:
        """The register block with explicit vectors: acc[MR][NR/W] vectors stay in registers,
        operands along `v` are loaded as vectors, the others broadcast. `masked`: only `nv` of the
        NR columns exist (the edge of the range); the others compute on zeros and are not stored.
        `flat`: the columns are flat points `bf + vv` over rows and columns, loads masked by table."""
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        value, init = node.results[0], space.init[0]
        width = self.dialect.vector_width
        lanes = nr // width
        vtype = self.dialect.vector_type
        at_flat = (lambda start: lambda k: "0" if k == flat.w else (start if k == v else var(k))) if flat else None
        out_var = at_flat("(bf + vv)") if flat else var
        lvalue = self.buffers[value].lvalue(self.domain.compose_map(i, space.outputs[0]), out_var) \
            if value in self.buffers else None  # None: stored through its fused epilogue
        code.line(f"{vtype} vacc[{mr}][{lanes}];")
        code.line(f"float row[{nr}];")
        start = init_literal(init, value.type.dtype)
        code.raw(self.dialect.unroll(mr))
        with code.block(f"for (int64_t uu = 0; uu < {mr}; ++uu)"):
            init_text = start if first is None else f"({first}) ? {start} : {lvalue}"
            if masked:
                init_text = f"vv < nv ? ({init_text}) : 0.0f"
            code.line(f"for (int64_t vv = 0; vv < {nr}; ++vv) row[vv] = {init_text};")
            code.line(f"for (int64_t q = 0; q < {lanes}; ++q) std::memcpy(&vacc[uu][q], row + q * {width}, "
                      f"sizeof({vtype}));")
        def steps(checked: bool) -> None:
            """The reduction loops over the block; reads of padded operands checked or not."""
            depth = code.depth
            for k in inner:
                lo, hi = ranges[k]
                code.line(f"for (int64_t i{k} = {lo}; i{k} < {hi}; ++i{k}) {{")
                code.depth += 1
            at_lane = lambda k: f"(b{k} + q * {width})" if k == v else var(k)  # noqa: E731
            names, per_row, per_lane = [], [], []
            for n, (operand, amap) in enumerate(zip(node.inputs, space.inputs)):
                cmap = self.domain.compose_map(i, amap)
                buf = self.buffers[operand]
                used = loops_read(buf, cmap)
                if v in used and flat is not None:
                    table = flat.tables[n]
                    start = buf.lvalue(cmap, at_flat("bf"))
                    load = (f"{vtype} a{n}[{lanes}]; "
                            f"tg_load_masks(a{n}, &{start}, &{table.name}[{table.index(nr, lanes)}], {lanes});")
                    names.append(f"a{n}[q]")
                    (per_row if u in used else per_lane).append(load)
                elif v in used and isinstance(buf, PackedBuffer):  # whole zero-padded vectors (conv.py)
                    load = (f"{vtype} a{n}[{lanes}]; for (int64_t q = 0; q < {lanes}; ++q) " +
                            (f"if (q * {width} < nv) " if masked else "") +
                            f"std::memcpy(&a{n}[q], &{buf.lvalue(cmap, at_lane)}, sizeof({vtype}));" +
                            (f" else a{n}[q] = {vtype}{{}};" if masked else ""))
                    names.append(f"a{n}[q]")
                    (per_row if u in used else per_lane).append(load)
                elif v in used:
                    direct = (f"for (int64_t q = 0; q < {lanes}; ++q) "
                              f"std::memcpy(&a{n}[q], &{buf.lvalue(cmap, at_lane)}, sizeof({vtype}));")
                    element = self._read(buf, cmap, var, checked)
                    if masked:
                        element = f"(vv < nv ? {element} : 0.0f)"
                    gather = (f"{{ float g[{nr}]; for (int64_t vv = 0; vv < {nr}; ++vv) "
                              f"g[vv] = {element}; std::memcpy(a{n}, g, sizeof(g)); }}")
                    checks = buf.checks(cmap, var, self.extents) if checked else None
                    span = self._lane_span(buf, cmap, var, v, "nv" if masked else str(nr))
                    step = element_steps(buf, cmap).get(v, 0)
                    even = self._lane_span(buf, cmap, var, v, "nv" if masked else str(nr), 2) if step == 2 else None
                    if step == 2 and not masked and checks is None:  # even lanes of two vectors
                        start = buf.lvalue(cmap, lambda k: f"b{k}" if k == v else var(k))
                        load = f"{vtype} a{n}[{lanes}]; tg_load_even(a{n}, &{start}, {lanes});"
                    elif even is not None:  # the same, lanes outside the tensor (or the block) padded
                        start = buf.lvalue(cmap, lambda k: f"b{k}" if k == v else var(k))
                        pad = init_literal(cmap.pad if checks else 0.0, DType.f32)
                        load = (f"{vtype} a{n}[{lanes}]; {{ {even[0]} "
                                f"tg_load_even_lanes(a{n}, &{start}, lane_lo, lane_hi, {lanes}, {pad}); }}")
                    elif step != 1 or (span is None and (masked or checks)) or (checks and not zero):
                        load = f"{vtype} a{n}[{lanes}]; {gather}"  # gather a row
                    elif not masked and checks is None:
                        load = f"{vtype} a{n}[{lanes}]; {direct}"
                    else:  # padded or partial: the lanes inside, as masked vector loads
                        start = buf.lvalue(cmap, lambda k: f"b{k}" if k == v else var(k))
                        load = (f"{vtype} a{n}[{lanes}]; {{ {span[0]} "
                                f"tg_load_lanes(a{n}, &{start}, lane_lo, lane_hi, {lanes}); }}")
                    names.append(f"a{n}[q]")
                    (per_row if u in used else per_lane).append(load)
                else:
                    text = self._read(buf, cmap, var, checked)
                    load = f"const float a{n} = {text};"
                    names.append(f"a{n}")
                    if u in used:
                        per_row.append(load)
                    else:
                        code.line(load)
            for line in per_lane:
                code.line(line)
            index = self._index_fn(i, var)
            code.raw(self.dialect.unroll(mr))
            with code.block(f"for (int64_t uu = 0; uu < {mr}; ++uu)"):
                for line in per_row:
                    code.line(line)
                code.raw(self.dialect.unroll(lanes))
                with code.block(f"for (int64_t q = 0; q < {lanes}; ++q)"):
                    expr = scalar_expr(space.body[0], names, DType.f32, index, acc="vacc[uu][q]", op=node.op)
                    code.line(f"vacc[uu][q] = {expr};")
            while code.depth > depth:
                code.depth -= 1
                code.line("}")

        # channel blocks broadcast scalars, each checked when padded: blocks inside go without
        # (row blocks load padded rows as masked vectors, a row block is rarely inside)
        zero = self._zero_padded(i)
        inside = self._inside(i, ranges, inner, u, v, str(mr), "nv" if masked else str(nr)) \
            if i in self.channel_plans or not zero else None
        if inside is None:
            steps(True)
        else:  # blocks whose windows stay inside the tensor read it without checks
            with code.block(f"if ({inside})"):
                steps(False)
            with code.block("else"):
                steps(True)
        code.raw(self.dialect.unroll(mr))
        with code.block(f"for (int64_t uu = 0; uu < {mr}; ++uu)"):
            code.line(f"for (int64_t q = 0; q < {lanes}; ++q) std::memcpy(row + q * {width}, &vacc[uu][q], "
                      f"sizeof({vtype}));")
            head = f"for (int64_t vv = 0; vv < {'nv' if masked else nr}; ++vv)"
            if i in self.fused:
                self._store_fused(code, i, head, "row[vv]", var, out_var, flat, v=v)
            else:
                final = "row[vv]" if i in self.carried else store(value, "row[vv]")
                code.line(f"{head} {lvalue} = {final};")

    def _store_fused(self, code: Code, i: int, head: str, acc: str, var: Var, at_point: Var | None = None,
                     flat: FlatPlan | None = None, *, v: int | None) -> None:
        """The loop `head` storing the block's sums `acc` through node i's fused epilogue
        (`plan_fused_stores`): each value of the run in a register, only the last stored. With flat
        blocks, reads and the store whose rows are as long as the flat point's (the flat output's
        own layout) index by the flat point (`at_point`), others by row and column."""
        domain = self.domain

        def point_var(buf, cmap: AffineMap) -> Var:
            if flat is None or at_point is None or isinstance(buf, ConstantBuffer) or buf.bounds(cmap, self.extents):
                return var
            steps = element_steps(buf, cmap)
            along_w, along_v = steps.get(flat.w, 0), steps.get(v, 0)
            return at_point if along_w == flat.width * along_v else var

        moving = {v} | ({flat.w} if flat is not None else set())
        chain = self.fused[i]
        fixed, per_point = [], []  # operand reads: fixed along the store loop (hoisted), or not
        for n, j in enumerate(chain):
            node, space = domain.nodes[j], domain.spaces[j]
            for m, (operand, amap) in enumerate(zip(node.inputs, space.inputs)):
                if operand is (domain.nodes[chain[n - 1]] if n else domain.nodes[i]).results[0]:
                    continue
                cmap = domain.compose_map(j, amap)
                buf = self.buffers[operand]
                text = buf.element(cmap, point_var(buf, cmap), self.extents)
                line = f"const {compute_type(operand.type.dtype, node.op)} a{n}_{m} = {text};"
                (per_point if loops_read(buf, cmap) & moving else fixed).append(line)
        for line in fixed:
            code.line(line)
        if self.dialect.simd():  # the loop-invariant reads hoisted, the stores may not alias them
            code.raw(self.dialect.simd())
        with code.block(head):
            for line in per_point:
                code.line(line)
            def lvalue(value: Value, j: int) -> str:
                cmap = domain.compose_map(j, domain.spaces[j].outputs[0])
                return self.buffers[value].lvalue(cmap, point_var(self.buffers[value], cmap))

            self.chain_values(code, chain, (domain.nodes[i].results[0], acc), var,
                              lambda n, m, operand, j: f"a{n}_{m}", lvalue)

    def chain_values(self, code: Code, chain: tuple[int, ...], first: tuple[Value | None, str | None], var: Var,
                     operand: Callable[[int, int, Value, int], str], lvalue: Callable[[Value, int], str]) -> None:
        """An elementwise run (`plan_chains`) in registers: node n's expression reads the value before
        it (`first`: the value the run starts from and its C name) and its other operands by the names
        `operand(n, m, value, j)` gives (which may emit their reads); each result is `const float e<n>`
        but the last, stored at `lvalue(value, j)`."""
        domain = self.domain
        previous, name = first
        for n, j in enumerate(chain):
            node, space = domain.nodes[j], domain.spaces[j]
            names = [name if value is previous else operand(n, m, value, j) for m, value in enumerate(node.inputs)]
            previous = node.results[0]
            expr = scalar_expr(space.body[0], names, previous.type.dtype, self._index_fn(j, var), op=node.op)
            if n + 1 < len(chain):
                name = f"e{n}"
                code.line(f"const float {name} = {expr};  // {node.op}")
            else:
                code.line(f"{lvalue(previous, j)} = {store(previous, expr)};  // {node.op}")

    def _read(self, buf, cmap: AffineMap, var: Var, checked: bool) -> str:
        """The element `buf` holds at `cmap`: padded reads checked, or not (the caller knows
        they are inside)."""
        if checked or buf.checks(cmap, var, self.extents) is None:
            return buf.element(cmap, var, self.extents)
        return buf.lvalue(cmap, var)

    def _inside(self, i: int, ranges: dict[int, tuple[str, str]], inner: list[int], u: int | None,
                v: int | None, rows: str, cols: str) -> str | None:
        """The C condition that every padded read of node i in the current block (`rows` along
        `u` from `b{u}`, `cols` along `v` from `b{v}`, the reduction loops over their ranges)
        is inside its tensor; None when no operand is padded."""
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        conditions: list[str] = []
        for value, amap in zip(node.inputs, space.inputs):
            cmap = self.domain.compose_map(i, amap)
            for expr, size, below, above in self.buffers[value].bounds(cmap, self.extents):
                if any(d in (u, v) and (rows if d == u else cols).isdigit()
                       and int(rows if d == u else cols) >= self.extents[d] for d, _ in expr.terms):
                    return None  # one block spans the padded axis: never inside
                low, high = [str(expr.const)] if expr.const else [], [str(expr.const)] if expr.const else []
                for d, c in expr.terms:
                    if d in (u, v):
                        size_text = rows if d == u else cols
                        first = f"b{d}"
                        last = f"(b{d} + {int(size_text) - 1})" if size_text.isdigit() else f"(b{d} + {size_text} - 1)"
                    elif d in inner:
                        lo, hi = ranges[d]
                        first, last = lo, str(int(hi) - 1) if hi.isdigit() else f"({hi} - 1)"
                    else:
                        first = last = f"i{d}"
                    for terms, at in ((low, first if c > 0 else last), (high, last if c > 0 else first)):
                        if at != "0":
                            terms.append(at if c == 1 else f"{c} * {at}")
                if below:
                    conditions.append(f"{' + '.join(low) or '0'} >= 0")
                if above:
                    conditions.append(f"{' + '.join(high) or '0'} < {size}")
        return " && ".join(f"({c})" for c in conditions) if conditions else None

    def _update(self, code: Code, i: int, var: Var, u: int | None, v: int | None, bu: str, bv: str, nr: int,
                accs: list[str], checked: bool = True) -> None:
        """One step of the reduction loops over the register block, loads hoisted by what they vary
        with: operands fixed over the block once, those varying along `v` only into an NR-wide row
        (reused by all MR rows), those along `u` only once per row, the rest per element."""
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        full = bu.isdigit() and bv.isdigit()
        names, per_row, per_element = [], [], []
        for n, (value, amap) in enumerate(zip(node.inputs, space.inputs)):
            cmap = self.domain.compose_map(i, amap)
            buf = self.buffers[value]
            used = loops_read(buf, cmap)
            text = self._read(buf, cmap, var, checked)
            ctype = compute_type(value.type.dtype, node.op)
            along_u, along_v = u in used, v in used
            if not along_u and not along_v:
                code.line(f"const {ctype} a{n} = {text};")
                names.append(f"a{n}")
            elif along_v and not along_u:
                code.line(f"{ctype} a{n}[{nr}];")
                if full:
                    code.raw(self.dialect.unroll(int(bv)))
                code.line(f"for (int64_t vv = 0; vv < {bv}; ++vv) a{n}[vv] = {text};")
                names.append(f"a{n}[vv]")
            elif along_u and not along_v:
                per_row.append(f"const {ctype} a{n} = {text};")
                names.append(f"a{n}")
            else:
                per_element.append(f"const {ctype} a{n} = {text};")
                names.append(f"a{n}")
        index = self._index_fn(i, var)
        if full:
            code.raw(self.dialect.unroll(int(bu)))
        with code.block(f"for (int64_t uu = 0; uu < {bu}; ++uu)"):
            for line in per_row:
                code.line(line)
            if self.dialect.simd():
                code.raw(self.dialect.simd())
            with code.block(f"for (int64_t vv = 0; vv < {bv}; ++vv)"):
                for line in per_element:
                    code.line(line)
                for r, (value, body) in enumerate(zip(node.results, space.body)):
                    expr = scalar_expr(body, names, value.type.dtype, index, acc=accs[r], op=node.op)
                    code.line(f"{accs[r]} = {expr};")

