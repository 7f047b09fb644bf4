"""The tiled reference executor: runs a Program kernel by kernel and tile by tile, with numpy.

It proves that fusion and tiling keep the meaning, independently of any code generator. Each
structured node is evaluated from its own `IterationSpace` (affine maps and scalar body) on the
part of its loop nest that falls in the current tile, as vectorised gathers over the tile's index
grid; it never calls the op's whole-tensor numpy reference. Per kernel:

- parallel loops: one tile at a time (tile sizes from `Kernel.tiles`; untiled loops are whole);
- reduction loops: inside each parallel tile, the nodes that run over them (streamed nodes) are
  evaluated tile by tile of those loops, reductions accumulating across tiles;
- full loops: whole inside every tile; the remaining (epilogue) nodes run once per parallel tile;
- attention kernels: the score nodes per key/value tile, then the online-softmax recurrence
  (running max, running sum, rescaled accumulator), the output divided once at the end.

Values passed inside a kernel are checked: a node may only read what the same tile produced
(reading a value another tile computed raises AssertionError), and every kernel output must be
fully written. Layout kernels (reshape, concat, gather) and undecomposed composites run whole
through their reference.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np

from tilegraph.ir.domain import downstream
from tilegraph.ir.graph import Value
from tilegraph.ir.program import Kernel, Program
from tilegraph.ir.structured import PARALLEL, REDUCTION, Acc, AffineMap, Call, Cast, evaluate_scalar
from tilegraph.ir.templates import lowering_for
from tilegraph.ir.templates.attention import attention_layout
from tilegraph.ir.types import DType, to_dtype

from .run import bind_inputs, random_params

_COMBINE = {"add": np.add, "max": np.maximum, "min": np.minimum, "mul": np.multiply}


def run_program(program: Program, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray] = (),
                params: Mapping[str, np.ndarray] | None = None, seed: int = 0) -> list[np.ndarray]:
    """Evaluate a (fused, tiled) Program; same inputs, parameters and seed rules as `reference.run`."""
    graph = program.graph
    env: dict[Value, np.ndarray] = bind_inputs(graph, inputs)
    env.update(random_params(graph, seed, params))
    for kernel in program.kernels:
        run_kernel(kernel, env)
    return [env[v] for v in graph.outputs]


def run_kernel(kernel: Kernel, env: dict[Value, np.ndarray]) -> None:
    """Run one kernel, reading its inputs from `env` and adding its outputs to it."""
    domain = kernel.domain
    if not domain.structured:
        for node in kernel.nodes:
            outs = node.opdef.reference([env[v] for v in node.inputs], node.attrs, node.result_types)
            env.update(zip(node.results, outs))
        return
    run = _KernelRun(kernel, domain, env)
    if kernel.template is None:
        run.generic()
    else:
        lowering_for("reference", kernel.kind, TEMPLATE_RUNS)(run)
    run.finish()


# ----- helpers -------------------------------------------------------------------------------------
def _has_acc(expr) -> bool:
    if isinstance(expr, Acc):
        return True
    if isinstance(expr, Call):
        return any(_has_acc(a) for a in expr.args)
    if isinstance(expr, Cast):
        return _has_acc(expr.arg)
    return False


def split_update(body) -> tuple[str, object] | None:
    """A reduction body `acc <op> expr` as (op, expr), for op in add/max/min/mul."""
    if isinstance(body, Call) and body.fn in _COMBINE and len(body.args) == 2:
        a, b = body.args
        if isinstance(a, Acc) and not _has_acc(b):
            return body.fn, b
        if isinstance(b, Acc) and not _has_acc(a):
            return body.fn, a
    return None


def _fill_value(value: float, dtype: DType):
    """An init or pad value in a tensor's storage type (infinities become the integer extremes)."""
    if math.isinf(value) and dtype.is_int:
        info = np.iinfo(dtype.numpy)
        return info.min if value < 0 else info.max
    if math.isinf(value) and dtype is DType.bool:
        return value > 0
    return value


def _tile_ranges(extent: int, size: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + size, extent)) for lo in range(0, extent, size)]


def _fit(values: np.ndarray, index: tuple) -> np.ndarray:
    """Values for `buffer[index] = ...`: a scalar result takes its region's single element."""
    return np.asarray(values).reshape(()) if not index else values


def _accumulates(space) -> bool:
    """Whether a node's results start at an init value and are updated (reductions, even over nothing)."""
    return any(init is not None for init in space.init)


class _KernelRun:
    """The buffers and bookkeeping of one kernel execution."""

    def __init__(self, kernel: Kernel, domain, env: dict[Value, np.ndarray]) -> None:
        self.kernel, self.domain, self.env = kernel, domain, env
        sizes = dict(kernel.tiles)
        self.tile = [min(sizes.get(loop.name, loop.extent), loop.extent) for loop in domain.loops]
        self.buffers: dict[Value, np.ndarray] = {}
        self.valid: dict[Value, np.ndarray] = {}
        self.written: dict[Value, np.ndarray] = {}
        for node in domain.nodes:
            for value in node.results:
                self.buffers[value] = np.zeros(value.type.shape, dtype=value.type.dtype.numpy)
                self.valid[value] = np.zeros(value.type.shape, dtype=bool)
                self.written[value] = np.zeros(value.type.shape, dtype=bool)
        self.rank = len(domain.loops)

    # ----- index grids in kernel space: one axis per kernel loop ----------------------------------
    def grids(self, ranges: Sequence[tuple[int, int]]) -> list[np.ndarray]:
        out = []
        for k, (lo, hi) in enumerate(ranges):
            shape = [1] * self.rank
            shape[k] = hi - lo
            out.append(np.arange(lo, hi).reshape(shape))
        return out

    def node_grids(self, i: int, kgrids: list[np.ndarray]) -> list[np.ndarray]:
        zero = np.zeros((1,) * self.rank, dtype=np.int64)
        return [zero if loop is None else kgrids[loop] for loop in self.domain.node_loops[i]]

    def region_shape(self, i: int, kgrids: list[np.ndarray]) -> tuple[int, ...]:
        shape = [1] * self.rank
        for loop in self.domain.iterates(i):
            shape[loop] = kgrids[loop].size
        return tuple(shape)

    def read(self, value: Value, amap: AffineMap, ngrids: list[np.ndarray]) -> np.ndarray:
        """The elements of `value` a map selects at the grid's points (pad outside, where allowed)."""
        internal = value in self.buffers
        array = self.buffers[value] if internal else self.env[value]
        index = [np.asarray(e.evaluate(ngrids)) for e in amap.exprs]
        if not index:
            if internal:
                assert self.valid[value][()], f"kernel {self.kernel.name}: %{value.name} read before it is computed"
            return np.asarray(array[()])
        inside = None
        if amap.pad is not None:
            inside = np.ones((), dtype=bool)
            for idx, size in zip(index, array.shape):
                inside = inside & (idx >= 0) & (idx < size)
            index = [np.clip(idx, 0, size - 1) for idx, size in zip(index, array.shape)]
        if internal:
            ok = self.valid[value][tuple(index)]
            if inside is not None:
                ok = ok | ~inside
            assert np.all(ok), (f"kernel {self.kernel.name}: %{value.name} is read where this tile has not "
                                "computed it (fusion or tiling broke a dependence)")
        out = array[tuple(index)]
        if inside is not None:
            dtype = value.type.dtype
            out = np.where(inside, out, np.asarray(_fill_value(amap.pad, dtype)).astype(array.dtype))
        return out

    def out_index(self, i: int, amap: AffineMap, ngrids: list[np.ndarray], shape: tuple[int, ...]) -> tuple:
        """Index arrays of the elements a result map writes over a region (`()` for a scalar result)."""
        return tuple(np.broadcast_to(np.asarray(e.evaluate(ngrids)), shape) for e in amap.exprs)


    # ----- one node on one region ---------------------------------------------------------------------
    def evaluate(self, i: int, kgrids: list[np.ndarray], first: bool = True) -> None:
        """Node `i` over the region of the grids; `first`: the first reduction tile of this region."""
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        ngrids = self.node_grids(i, kgrids)
        shape = self.region_shape(i, kgrids)
        args = [self.read(v, m, ngrids) for v, m in zip(node.inputs, space.inputs)]
        reduced = tuple(sorted(self.domain.reduces(i)))
        for value, amap, body, init in zip(node.results, space.outputs, space.body, space.init):
            dtype = value.type.dtype
            buffer = self.buffers[value]
            if init is None:
                result = evaluate_scalar(body, args, None, dtype, ngrids)
                result = to_dtype(np.broadcast_to(np.asarray(result), shape), dtype)
                index = self.out_index(i, amap, ngrids, shape)
                buffer[index] = _fit(result, index)
                self.valid[value][index] = True
                self.written[value][index] = True
                continue
            split = split_update(body)
            if split is None:
                raise NotImplementedError(f"{node.op}: reduction body {body} is not `acc op expr`")
            fn, expr = split
            part = np.broadcast_to(np.asarray(evaluate_scalar(expr, args, None, dtype, ngrids)), shape)
            part = _COMBINE[fn].reduce(part, axis=reduced, keepdims=True) if reduced else part
            index = self.out_index(i, amap, ngrids, part.shape)
            if first:
                buffer[index] = _fill_value(init, dtype)
            buffer[index] = _COMBINE[fn](buffer[index], _fit(part, index))

    def complete(self, i: int, kgrids: list[np.ndarray]) -> None:
        """A reduction has seen all its tiles: round its region and make it readable."""
        node, space = self.domain.nodes[i], self.domain.spaces[i]
        ngrids = self.node_grids(i, kgrids)
        shape = list(self.region_shape(i, kgrids))
        for loop in self.domain.reduces(i):
            shape[loop] = 1
        for value, amap in zip(node.results, space.outputs):
            index = self.out_index(i, amap, ngrids, tuple(shape))
            buffer = self.buffers[value]
            buffer[index] = to_dtype(buffer[index], value.type.dtype)
            self.valid[value][index] = True
            self.written[value][index] = True

    # ----- schedules ------------------------------------------------------------------------------
    def parallel_tiles(self, kinds=(PARALLEL,)):
        loops = self.domain.loops
        axes = [k for k, loop in enumerate(loops) if loop.kind in kinds]
        choices = [_tile_ranges(loops[k].extent, self.tile[k]) for k in axes]
        for combo in itertools.product(*choices):
            ranges = [(0, loop.extent) for loop in loops]
            for k, r in zip(axes, combo):
                ranges[k] = r
            yield ranges

    def reset(self) -> None:
        for mask in self.valid.values():
            mask[...] = False

    def generic(self) -> None:
        """Per parallel tile: the loop over reduction tiles runs the streamed nodes (and, at its first
        step, the nodes they depend on); nodes after a streamed node run once it is done."""
        domain = self.domain
        count = len(domain.nodes)
        reduction = domain.loops_of_kind(REDUCTION)
        below = downstream(domain)
        after = set().union(*[below[i] for i in range(count) if domain.streamed[i]]) if reduction else set()
        looped = [i for i in range(count) if domain.streamed[i] or i not in after]
        epilogue = [i for i in range(count) if not domain.streamed[i] and i in after]
        reducers = {i for i in range(count) if _accumulates(domain.spaces[i])}
        carried = {i for i in reducers if domain.reduces(i) & set(reduction)}  # done after the loop
        for ranges in self.parallel_tiles():
            self.reset()
            choices = [_tile_ranges(domain.loops[k].extent, self.tile[k]) for k in reduction]
            for combo in itertools.product(*choices):
                inner = list(ranges)
                for k, r in zip(reduction, combo):
                    inner[k] = r
                kgrids = self.grids(inner)
                for i in looped:
                    mine, reduces = domain.iterates(i), domain.reduces(i)
                    if any(combo[n][0] != 0 for n, k in enumerate(reduction) if k not in mine):
                        continue
                    first = all(combo[n][0] == 0 for n, k in enumerate(reduction) if k in reduces)
                    self.evaluate(i, kgrids, first)
                    if i in reducers and i not in carried:
                        self.complete(i, kgrids)
            whole = self.grids(ranges)
            for i in sorted(carried):
                self.complete(i, whole)
            for i in epilogue:
                self.evaluate(i, whole)
                if i in reducers:
                    self.complete(i, whole)

    def attention(self) -> None:
        domain = self.domain
        layout = attention_layout(domain, self.kernel.nodes)
        match, scores, kv, mx, pv = layout.match, layout.scores, layout.kv, layout.max, layout.pv
        out = match.output  # o, or the copies of it that joined the kernel (written through their maps)
        dtype = out.type.dtype
        work = np.float32 if dtype.numpy.itemsize <= 4 else dtype.numpy
        for ranges in self.parallel_tiles():
            whole = self.grids(ranges)
            rows = list(self.region_shape(mx, whole))
            rows[kv] = 1
            m = np.full(rows, -np.inf, dtype=work)
            total = np.zeros(rows, dtype=work)
            acc = None
            for lo, hi in _tile_ranges(domain.loops[kv].extent, self.tile[kv]):
                self.reset()
                inner = list(ranges)
                inner[kv] = (lo, hi)
                kgrids = self.grids(inner)
                for i in scores:
                    self.evaluate(i, kgrids)
                    if _accumulates(domain.spaces[i]):
                        self.complete(i, kgrids)
                s = self.read(match.score, domain.spaces[mx].inputs[0], self.node_grids(mx, kgrids))
                s = np.broadcast_to(s, self.region_shape(mx, kgrids)).astype(work)
                m_new = np.maximum(m, s.max(axis=kv, keepdims=True))
                shift = np.where(np.isneginf(m_new), 0, m_new)
                p = np.exp(s - shift)
                scale = np.exp(m - shift)
                total = total * scale + p.sum(axis=kv, keepdims=True)
                pv_grids = self.node_grids(pv, kgrids)
                v = self.read(match.pv.inputs[1], domain.spaces[pv].inputs[1], pv_grids).astype(work)
                step = (p * v).sum(axis=kv, keepdims=True)
                acc = step if acc is None else acc * scale + step
                m = m_new
            with np.errstate(all="ignore"):
                result = acc / total
            shape = list(self.region_shape(pv, whole))
            shape[kv] = 1
            result = np.broadcast_to(result, shape)
            written = layout.written
            index = self.out_index(written, domain.spaces[written].outputs[0], self.node_grids(written, whole),
                                   tuple(shape))
            self.buffers[out][index] = _fit(to_dtype(result, dtype), index)
            self.written[out][index] = True

    def finish(self) -> None:
        for value in self.kernel.outputs:
            assert self.written[value].all(), (f"kernel {self.kernel.name}: tiles left part of %{value.name} "
                                               "unwritten")
            self.env[value] = self.buffers[value]


__all__ = ["run_program", "run_kernel", "split_update"]


TEMPLATE_RUNS = {"attention": _KernelRun.attention}  # kernel template -> how this executor runs it
