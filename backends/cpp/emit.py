"""The loop-nest emitter: one fused, tiled kernel as one C++ function (shared by cpp and sycl).

It walks the same structure as the tiled reference executor (`backends/reference/tiled.py`),
from the kernel's loop domain (`Kernel.domain`) and its tile sizes:

- parallel loops are tiled; the dialect runs the tiles in parallel (OpenMP threads, SYCL groups);
- inside a tile, reduction loops are walked tile by tile; the streamed nodes (and, on the first
  reduction tile, the nodes they need) run per reduction tile, reductions carried across tiles;
- full loops are whole inside a tile; epilogue nodes run once per parallel tile at the end.

Each node runs as its own loop nest over its part of the tile, from its `IterationSpace`: affine
maps become linear indices, the scalar body becomes a C++ expression. Values that stay inside
the kernel live in tile-sized scratch buffers (`buffers.py`); reductions run as register-tiled
micro-kernels (`microkernel.py`). Kernels of kind "attention" are in `attention.py`.
"""
from __future__ import annotations

from collections.abc import Sequence

from tilegraph.ir import TilegraphError
from tilegraph.ir.domain import downstream
from tilegraph.ir.graph import Node, Value
from tilegraph.ir.program import Kernel
from tilegraph.ir.structured import PARALLEL, REDUCTION, AffineMap
from tilegraph.ir.types import DType

from .buffers import Buffer, ConstantBuffer, GlobalBuffer, LocalBuffer, Var, linear, row_major_strides, store
from .code import Code
from .conv import PackedBuffer
from .dialect import Dialect
from .microkernel import MicroKernel, RegisterBlocks
from .names import compute_type, mangle
from .scalar import scalar_expr

FULL = "full"


class KernelEmitter(RegisterBlocks):
    """Emits one structured kernel; `params` names the pointer of each kernel input and output."""

    def __init__(self, kernel: Kernel, domain, dialect: Dialect, params: dict[Value, str],
                 micro: MicroKernel = MicroKernel(), folded: frozenset[Node] = frozenset(),
                 names=None) -> None:
        self.kernel, self.domain, self.dialect, self.micro = kernel, domain, dialect, micro
        # the translation unit's names (source.ProgramNames): an intermediate's tile buffer is
        # called as the tensor is, a kernel output's (a carried reduction) `<tensor>_tile`
        self.names = names
        self.scope = names.table.child() if names is not None else None
        # nodes computed at load time (fold.py): not emitted, their results read as kernel inputs
        self.skipped = {i for i, node in enumerate(domain.nodes) if node in folded}
        self.folded = folded
        sizes = dict(kernel.tiles)
        self.loops = domain.loops
        self.extents = tuple(loop.extent for loop in self.loops)
        self.tile = [min(sizes.get(loop.name, loop.extent), loop.extent) if loop.kind != FULL else loop.extent
                     for loop in self.loops]
        self.tile = [max(1, t) for t in self.tile]
        self.parallel = [k for k, loop in enumerate(self.loops) if loop.kind == PARALLEL]
        self.reduction = [k for k, loop in enumerate(self.loops) if loop.kind == REDUCTION]
        self.channel_plans, self.packs = {}, {}
        if dialect.vector_width and kernel.template is None:
            self.widen_tiles()
            if micro.pack_weights:
                self.plan_channel_blocks(params)
                self.plan_weight_panels(params)
        self.base = {k: self._lo(k) for k in range(len(self.loops))}
        self.outputs = set(kernel.outputs)
        self.global_ptrs = dict(params)
        self.buffers: dict[Value, Buffer] = {v: GlobalBuffer(v, p) for v, p in params.items()}
        for v in params:  # folded constants are read as literals
            constant = ConstantBuffer.of(v) if v.producer in folded else None
            if constant is not None:
                self.buffers[v] = constant
        self.locals: list[LocalBuffer] = []
        self.carried = {i for i in range(len(domain.nodes))
                        if domain.reduces(i) & set(self.reduction) and i not in self.skipped}
        self.chains = self.plan_chains()
        # reduction -> the elementwise run its register block applies as it stores (no scratch)
        self.fused = self.plan_fused_stores() \
            if micro.fused_stores and dialect.vector_width and kernel.template is None else {}
        passed = {v for chain in self.chains for j in chain[:-1] for v in domain.nodes[j].results}
        passed |= {domain.nodes[i].results[0] for i in self.fused}
        skip = self.unbuffered() | self.skipped
        for i, (node, space) in enumerate(zip(domain.nodes, domain.spaces)):
            if i in skip:
                continue
            for value, amap in zip(node.results, space.outputs):
                if (value in self.outputs and i not in self.carried) or value in passed:
                    continue
                # a carried reduction that also runs along another reduction loop keeps all of
                # that loop's tiles: it is complete (and copied out) only after the whole nest
                whole = set(self.reduction) - domain.reduces(i) if i in self.carried else set()
                self._add_local(value, domain.compose_map(i, amap), whole)
        self.copy_out: dict[Value, str] = {}
        for value, pack in self.packs.items():  # read from its repacked copy (conv.py)
            self.buffers[value] = PackedBuffer(value, self.buffers[value].ptr, pack)

    def unbuffered(self) -> set[int]:
        """Nodes whose results need no buffer (attention keeps its softmax in registers)."""
        return set()

    # ----- tiles and ranges --------------------------------------------------------------------
    def _single(self, k: int) -> bool:
        return self.tile[k] >= self.extents[k]

    def _lo(self, k: int) -> str:
        kind = self.loops[k].kind
        if kind == FULL or self._single(k):
            return "0"
        return f"lo{k}" if kind == PARALLEL else f"rlo{k}"

    def _hi(self, k: int) -> str:
        kind = self.loops[k].kind
        if kind == FULL or self._single(k):
            return str(self.extents[k])
        return f"hi{k}" if kind == PARALLEL else f"rhi{k}"

    def _add_local(self, value: Value, amap: AffineMap, whole: set[int] = frozenset()) -> None:
        if self.names is None:
            ptr = f"l{len(self.locals)}"
        elif value in self.global_ptrs:
            ptr = self.scope.take(f"{self.names.values[value]}_tile")
        else:
            ptr = self.names.values[value]
        sizes = {k: self.extents[k] if k in whole else t for k, t in enumerate(self.tile)}
        base = {k: "0" if k in whole else b for k, b in self.base.items()}
        buf = LocalBuffer.for_map(value, ptr, amap, sizes, base)
        offset = sum((b.nbytes + 63) // 64 * 64 for b in self.locals)
        buf.offset = offset
        self.locals.append(buf)
        self.buffers[value] = buf

    @property
    def scratch_bytes(self) -> int:
        return sum((b.nbytes + 63) // 64 * 64 for b in self.locals)

    # ----- the function ------------------------------------------------------------------------
    def tile_vars(self) -> list[tuple[str, int]]:
        return [(f"t{k}", -(-self.extents[k] // self.tile[k])) for k in self.parallel if not self._single(k)]

    def header_comment(self, code: Code) -> None:
        ops = ", ".join(node.op for node in self.domain.nodes)
        loops = ", ".join(f"d{k}<{loop.extent} {loop.kind} tile {self.tile[k]}>" for k, loop in enumerate(self.loops))
        code.line(f"// kernel {mangle(self.kernel.name)} ({self.kernel.kind}): {ops}")
        code.line(f"// loops: {loops or 'none'}")

    def tile_comment(self) -> str:
        """`// tile: d0=32 (parallel), d2=64 (reduction)`: the tile of every loop of the nest, as
        generated (after `widen_tiles`); a loop's extent when the tile covers it whole."""
        parts = [f"d{k}={self.tile[k]} ({loop.kind})" for k, loop in enumerate(self.loops)]
        return f"// tile: {', '.join(parts) or 'none'}"

    def emit_body(self, code: Code) -> None:
        """The tile loop structure and every node, written into the dialect's parallel wrapper.
        Kernels below `MicroKernel.min_parallel_flops` run their tiles on one thread: a fork/join
        costs more than they do."""
        code.line(self.tile_comment())
        tiles = self.tile_vars()
        small = self.kernel.flops < self.micro.min_parallel_flops
        self.dialect.parallel(code, tiles, self.scratch_bytes, self.tile_body, threaded=not small)

    def tile_bounds(self, code: Code) -> None:
        for k in self.parallel:
            if self._single(k):
                continue
            t, e = self.tile[k], self.extents[k]
            code.line(f"const int64_t lo{k} = t{k} * {t};")
            hi = f"lo{k} + {t}" if e % t == 0 else f"tg_lmin(lo{k} + {t}, {e})"
            code.line(f"const int64_t hi{k} = {hi};")
        for buf in self.locals:
            code.line(buf.declaration())

    def tile_body(self, code: Code) -> None:
        self.tile_bounds(code)
        domain = self.domain
        count = len(domain.nodes)
        below = downstream(domain)
        run = [i for i in range(count) if i not in self.skipped]
        after = set().union(*[below[i] for i in run if domain.streamed[i]]) if self.reduction else set()
        looped = [i for i in run if domain.streamed[i] or i not in after]
        epilogue = [i for i in run if not domain.streamed[i] and i in after]
        self._reduction_nest(code, self.reduction, looped)
        for i in sorted(self.carried):
            self._copy_out(code, i)
        self.barrier(code)
        heads = {chain[0]: chain for chain in self.chains}
        inside = {j for chain in self.chains for j in chain[1:]}
        stored = {j for chain in self.fused.values() for j in chain}  # run by the register blocks
        for i in epilogue:
            if i in stored:
                continue
            if i in heads:
                self._chain(code, heads[i], self.ranges(i, streamed=False))
            elif i not in inside:
                self.emit_node(code, i, self.ranges(i, streamed=False), first=None)
            else:
                continue
            self.barrier(code)

    def _epilogue_nodes(self) -> list[int]:
        """The nodes that run once per parallel tile after the reduction nest (see `tile_body`)."""
        domain = self.domain
        if not self.reduction:
            return []
        below = downstream(domain)
        run = [i for i in range(len(domain.nodes)) if i not in self.skipped]
        after = set().union(*[below[i] for i in run if domain.streamed[i]])
        return [i for i in run if not domain.streamed[i] and i in after]

    def plan_chains(self) -> list[tuple[int, ...]]:
        """Runs of elementwise epilogue nodes computed in one loop nest, values passed in
        registers (a conv's batch-norm fold, bias, activation and residual add: one pass over
        the tile instead of one pass and one scratch buffer each). Each node but the last has one
        f32 result, used once, by the next node only, which reads it at the same point over the
        same loops; other operands are kernel inputs or values computed before the run."""
        domain = self.domain
        epilogue = self._epilogue_nodes()
        member = set(epilogue)
        position = {n: k for k, n in enumerate(domain.nodes)}
        chains, taken = [], set()
        for i in epilogue:
            if i in taken or any(init is not None for init in domain.spaces[i].init):
                continue
            chain = [i]
            while True:
                j = chain[-1]
                node, space = domain.nodes[j], domain.spaces[j]
                value = node.results[0]
                if len(node.results) != 1 or value.type.dtype is not DType.f32 or value in self.outputs \
                        or len(value.users) != 1:
                    break
                k = position.get(value.users[0])
                if k is None or k not in member or k in taken or any(x is not None for x in domain.spaces[k].init):
                    break
                user, uspace = domain.nodes[k], domain.spaces[k]
                point = domain.compose_map(j, space.outputs[0]).exprs
                reads = [(v, domain.compose_map(k, m)) for v, m in zip(user.inputs, uspace.inputs)]
                if domain.iterates(k) != domain.iterates(j) or len(user.results) != 1 or any(
                        v is value and m.exprs != point for v, m in reads) or any(
                        v is not value and v.producer in position and position[v.producer] >= i
                        for v, _ in reads):
                    break
                chain.append(k)
            if len(chain) > 1:
                chains.append(tuple(chain))
                taken.update(chain)
        return chains

    def plan_fused_stores(self) -> dict[int, tuple[int, ...]]:
        """Reductions whose register blocks apply their elementwise epilogue (a chain of
        `plan_chains`, or one node) as they store, so the result never goes to scratch and back (a
        conv's batch-norm fold, residual add and ReLU; a matmul's bias and GELU). Only where the
        reduction loops are whole in the tile (the block holds the final sums), the reduction's
        one f32 result is used only by the run's first node, read at the block's point over the
        block's loops, and the run's other operands are kernel inputs."""
        domain = self.domain
        if any(not self._single(k) for k in self.reduction):
            return {}
        position = {n: k for k, n in enumerate(domain.nodes)}
        heads = {chain[0]: chain for chain in self.chains}
        inside = {j for chain in self.chains for j in chain[1:]}
        epilogue = set(self._epilogue_nodes())
        inputs = {v for v in self.global_ptrs if v not in self.outputs}
        fused = {}
        for i, (node, space) in enumerate(zip(domain.nodes, domain.spaces)):
            if i in self.skipped or space is None or not space.init or any(init is None for init in space.init) \
                    or len(node.results) != 1:
                continue
            value = node.results[0]
            if value.type.dtype is not DType.f32 or value in self.outputs or len(value.users) != 1:
                continue
            j = position.get(value.users[0])
            if j is None or j not in epilogue or j in inside:
                continue
            chain = heads.get(j, (j,))
            point = domain.compose_map(i, space.outputs[0]).exprs
            ok = domain.iterates(j) == domain.iterates(i) - domain.reduces(i)
            previous = value
            for k in chain:
                user, uspace = domain.nodes[k], domain.spaces[k]
                if not ok or uspace is None or len(user.results) != 1 or any(x is not None for x in uspace.init):
                    ok = False
                    break
                for v, m in zip(user.inputs, uspace.inputs):
                    if v is previous:
                        ok = ok and domain.compose_map(k, m).exprs == point
                    else:
                        ok = ok and v in inputs
                previous = user.results[0]
            if ok:
                fused[i] = chain
        return fused

    def _chain(self, code: Code, chain: tuple[int, ...], ranges: dict[int, tuple[str, str]]) -> None:
        """A run of elementwise nodes (`plan_chains`) as one loop nest: each value in a register,
        only the last stored."""
        domain = self.domain
        var = lambda k: f"i{k}"  # noqa: E731
        with code.block():
            code.line(f"// {', '.join(domain.nodes[j].op for j in chain)}")
            depth = self._loops(code, [(f"i{k}", *ranges[k], 1) for k in self._order(chain[0], list(ranges))])
            def operand(n: int, m: int, value: Value, j: int) -> str:  # read where the node needs it
                text = self.buffers[value].element(domain.compose_map(j, domain.spaces[j].inputs[m]), var,
                                                   self.extents)
                code.line(f"const {compute_type(value.type.dtype, domain.nodes[j].op)} a{n}_{m} = {text};")
                return f"a{n}_{m}"

            def lvalue(value: Value, j: int) -> str:
                return self.buffers[value].lvalue(domain.compose_map(j, domain.spaces[j].outputs[0]), var)

            with code.block():
                self.chain_values(code, chain, (None, None), var, operand, lvalue)
            self._close(code, depth)

    def _reduction_nest(self, code: Code, loops: Sequence[int], looped: list[int]) -> None:
        if not loops:
            for i in looped:
                skip = [k for k in self.reduction if k not in self.domain.iterates(i) and not self._single(k)]
                first = [k for k in self.reduction if k in self.domain.reduces(i) and not self._single(k)]
                first_text = " && ".join(f"rlo{k} == 0" for k in first) if first else None
                if skip:
                    with code.block(f"if ({' && '.join(f'rlo{k} == 0' for k in skip)})"):
                        self.emit_node(code, i, self.ranges(i, streamed=True), first_text)
                        self.barrier(code)
                else:
                    self.emit_node(code, i, self.ranges(i, streamed=True), first_text)
                    self.barrier(code)
            return
        k, rest = loops[0], loops[1:]
        if self._single(k):
            self._reduction_nest(code, rest, looped)
            return
        t, e = self.tile[k], self.extents[k]
        with code.block(f"for (int64_t rlo{k} = 0; rlo{k} < {e}; rlo{k} += {t})"):
            hi = f"rlo{k} + {t}" if e % t == 0 else f"tg_lmin(rlo{k} + {t}, {e})"
            code.line(f"const int64_t rhi{k} = {hi};")
            self._reduction_nest(code, rest, looped)

    def barrier(self, code: Code) -> None:
        """Work-items of a group wait for each other here (nodes read what others wrote)."""
        text = self.dialect.barrier()
        if text:
            code.line(text)

    def ranges(self, i: int, streamed: bool) -> dict[int, tuple[str, str]]:
        """Per kernel loop node i runs over: its (lo, hi) in the current tile."""
        out = {}
        for k in sorted(self.domain.iterates(i)):
            if self.loops[k].kind == REDUCTION and not streamed:
                out[k] = ("0", str(self.extents[k]))
            else:
                out[k] = (self._lo(k), self._hi(k))
        return out

    # ----- one node -------------------------------------------------------------------------------
    def _operands(self, i: int, var: Var) -> list[str]:
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        out = []
        for value, amap in zip(node.inputs, space.inputs):
            buf = self.buffers.get(value)
            if buf is None:
                raise TilegraphError(f"cpp backend: kernel {self.kernel.name}: no buffer for %{value.name}")
            out.append(buf.element(self.domain.compose_map(i, amap), var, self.extents))
        return out

    def _index_fn(self, i: int, var: Var):
        node_loops = self.domain.node_loops[i]
        return lambda d: "0" if node_loops[d] is None else var(node_loops[d])

    def _order(self, i: int, loops: Sequence[int]) -> list[int]:
        """Output loops outermost-first: by decreasing stride in the first result's row-major index."""
        space = self.domain.spaces[i]
        value = self.domain.nodes[i].results[0]
        coeffs, _ = linear(self.domain.compose_map(i, space.outputs[0]), row_major_strides(value.type.shape))
        return sorted(loops, key=lambda k: (-abs(coeffs.get(k, 0)), k))

    def _point(self, code: Code, i: int, var: Var, results: list[tuple[Value, str]], acc: list[str] | None) -> None:
        """Innermost statement: load operands, evaluate bodies, assign (results or accumulators)."""
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        operands = self._operands(i, var)
        names = []
        with code.block():
            for n, (value, text) in enumerate(zip(node.inputs, operands)):
                code.line(f"const {compute_type(value.type.dtype, node.op)} a{n} = {text};")
                names.append(f"a{n}")
            index = self._index_fn(i, var)
            for r, (value, body) in enumerate(zip(node.results, space.body)):
                dtype = value.type.dtype
                if acc is None:
                    expr = scalar_expr(body, names, dtype, index, op=node.op)
                    code.line(f"{results[r][1]} = {store(value, expr)};")
                else:
                    expr = scalar_expr(body, names, dtype, index, acc=acc[r], op=node.op)
                    code.line(f"{acc[r]} = {expr};")

    def emit_node(self, code: Code, i: int, ranges: dict[int, tuple[str, str]], first: str | None) -> None:
        """Node i over `ranges`; `first`: C condition for "first reduction tile" (None: always)."""
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        reduced = self.domain.reduces(i)
        with code.block():
            code.line(f"// {node.op}")
            if all(init is None for init in space.init):
                self._elementwise(code, i, ranges)
            elif all(init is not None for init in space.init):
                self._reduce(code, i, ranges, reduced, first)
            else:
                raise TilegraphError(f"cpp backend: op {node.op} mixes reduced and plain results")

    def _elementwise(self, code: Code, i: int, ranges: dict[int, tuple[str, str]]) -> None:
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        order = self._order(i, list(ranges))
        var = lambda k: f"i{k}"  # noqa: E731
        depth = self._loops(code, [(f"i{k}", *ranges[k], 1) for k in order])
        results = [(v, self.buffers[v].lvalue(self.domain.compose_map(i, m), var))
                   for v, m in zip(node.results, space.outputs)]
        self._point(code, i, var, results, None)
        self._close(code, depth)

    def _loops(self, code: Code, loops: list[tuple[str, str, str, int]]) -> int:
        """Open `for` loops (var, lo, hi, step), the first one shared among the work-items of a
        work-group when the dialect has them (a loop-less body runs on item 0). Returns the depth
        to close back to."""
        depth = code.depth
        if not loops:
            guard = self.dialect.single_guard()
            if guard:
                code.line(guard + " {")
                code.depth += 1
            return depth
        for n, (name, lo, hi, step) in enumerate(loops):
            head = self.dialect.split_loop(name, lo, hi, step) if n == 0 else None
            code.line((head or f"for (int64_t {name} = {lo}; {name} < {hi}; {name} += {step})") + " {")
            code.depth += 1
        return depth

    @staticmethod
    def _close(code: Code, depth: int) -> None:
        while code.depth > depth:
            code.depth -= 1
            code.line("}")

    def _copy_out(self, code: Code, i: int) -> None:
        """A carried reduction is complete: round it and, if the kernel outputs it, write it out."""
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        for value, amap in zip(node.results, space.outputs):
            if value not in self.outputs and value.type.dtype is not DType.bf16:
                continue
            cmap = self.domain.compose_map(i, amap)
            local = self.buffers[value]
            loops = self._order(i, [k for k in self.ranges(i, streamed=False) if k not in self.domain.reduces(i)])
            ranges = self.ranges(i, streamed=False)
            var = lambda k: f"i{k}"  # noqa: E731
            code.line(f"// complete {node.op}")
            depth = self._loops(code, [(f"i{k}", *ranges[k], 1) for k in loops])
            src = local.lvalue(cmap, var)
            if value in self.outputs:
                target = GlobalBuffer(value, self._param(value))
                code.line(f"{target.lvalue(cmap, var)} = {store(value, src)};")
            elif value.type.dtype is DType.bf16:
                code.line(f"{src} = tg_bf16({src});")
            while code.depth > depth:
                code.depth -= 1
                code.line("}")

    def _param(self, value: Value) -> str:
        return self.global_ptrs[value]
