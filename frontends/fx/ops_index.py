"""Converters for indexing and index results: item access, torch.gather, index_put and item
assignment, cumsum/cumprod, roll, argmax/argmin, max/min with indices, topk.

The IR's one data-dependent op is `gather` (whole slices along one axis, `np.take`). So:
- element gathers (torch.gather, several index tensors) gather from the flattened tensor at
  linear positions computed with iota arithmetic (or in numpy, when the indices are constants);
- writes (index_put, `x[i] = v`) gather, for every position, the last value written to it and keep
  the old element where nothing was written (`where`); accumulating writes sum the hits;
- scans are log-step shifted adds; arg-reductions and topk compare against the reduced value.
"""
from __future__ import annotations

import math
import operator
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from tilegraph.ir import DType, Value, ValueKind

from .context import ConvertContext, Unsupported
from .ops_tensor import A, slice_axis
from .registry import converts

I64 = DType.i64
MAX_TOPK = 64  # topk is k rounds of (reduce, mask): beyond this a sort would be needed

# What max(x, dim), topk and sort return: `.values` and `.indices` work as on torch's result.
ValuesIndices = namedtuple("ValuesIndices", "values indices")


# ----- helpers --------------------------------------------------------------------------------------
def strides_of(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of a shape."""
    strides, step = [], 1
    for size in reversed(tuple(shape)):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def known(value: Value) -> np.ndarray | None:
    """The data of an integer or bool constant parameter (folded indices, index buffers), else None."""
    if value.kind is ValueKind.PARAM and value.data is not None and not value.dtype.is_float:
        return np.asarray(value.data)
    return None


def constant_index(cx: ConvertContext, array: np.ndarray, what: str) -> Value:
    """An i64 parameter holding indices computed at conversion time."""
    tensor = torch.from_numpy(np.ascontiguousarray(np.asarray(array, dtype=np.int64)))
    return cx.param(f"{cx.node.name}_{what}", tensor)


def nonnegative(cx: ConvertContext, index: Value, size: int) -> Value:
    """i64 indices with negative ones counting from the end (as torch indexes)."""
    data = known(index)
    if data is not None:
        if (data >= 0).all() and index.dtype is I64:
            return index
        return constant_index(cx, np.where(data < 0, data + size, data), "index")
    index = cx.cast(index, I64)
    zero, extent = cx.value(0, I64), cx.value(size, I64)
    return cx.b.where(cx.b.lt(index, zero), cx.b.add(index, extent), index)


def _scaled_add(cx: ConvertContext, total: Value | None, term: Value, scale: int) -> Value:
    term = term if scale == 1 else cx.b.mul(term, cx.value(scale, I64))
    return term if total is None else cx.b.add(total, term)


def broadcast_shape(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    try:
        return tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError:
        raise Unsupported(f"index tensors of shapes {', '.join(map(str, shapes))} do not broadcast") from None


def linear_positions(cx: ConvertContext, indices: Sequence[Value], sizes: Sequence[int]) -> Value:
    """Row-major positions in a [*sizes] block of the broadcast index tuples (negatives wrapped)."""
    shape = broadcast_shape([i.shape for i in indices])
    strides = strides_of(sizes)
    data = [known(i) for i in indices]
    if all(d is not None for d in data):
        wrapped = [np.where(d < 0, d + n, d).astype(np.int64) for d, n in zip(data, sizes)]
        return constant_index(cx, sum(np.broadcast_to(w, shape) * s for w, s in zip(wrapped, strides)), "positions")
    total = None
    for index, size, stride in zip(indices, sizes, strides):
        total = _scaled_add(cx, total, cx.broadcast(nonnegative(cx, index, size), shape), stride)
    return total


def flatten(cx: ConvertContext, x: Value) -> Value:
    return cx.reshape(x, (x.type.numel,))


# ----- torch.gather -----------------------------------------------------------------------------------
def gather_elements(cx: ConvertContext, x: Value, axis: int, index: Value) -> Value:
    """out[p] = x[p with index[p] on `axis`]: one gather from the flattened x at linear positions."""
    rank = x.type.rank
    if rank == 0 or index.type.rank != rank:
        raise Unsupported(f"torch.gather of a {x.type} input with a {index.type} index (ranks must match, >= 1)")
    axis %= rank
    if any(i > s for a, (i, s) in enumerate(zip(index.shape, x.shape)) if a != axis):
        raise Unsupported(f"torch.gather index {index.type} larger than the input {x.type} off axis {axis}")
    strides = strides_of(x.shape)
    data = known(index)
    if data is not None:
        data = np.where(data < 0, data + x.shape[axis], data).astype(np.int64)
        positions = data * strides[axis]
        for k, size in enumerate(index.shape):
            if k != axis:
                positions = positions + np.arange(size).reshape([-1 if a == k else 1 for a in range(rank)]) * strides[k]
        linear = constant_index(cx, positions, "positions")
    else:
        linear = _scaled_add(cx, None, nonnegative(cx, index, x.shape[axis]), strides[axis])
        for k, size in enumerate(index.shape):
            if k != axis and size > 1:
                linear = _scaled_add(cx, linear, cx.b.iota(shape=index.shape, axis=k, dtype=I64), strides[k])
    return cx.b.gather(flatten(cx, x), linear, axis=0)


@converts(torch.gather, "gather", A("gather"))
def gather(cx, x, dim, index, *, sparse_grad=False, out=None):
    index = cx.value(index)
    if not index.dtype.is_int:
        raise Unsupported(f"torch.gather with a {index.dtype} index (needs int64)")
    return gather_elements(cx, cx.value(x), dim, index)


@converts(torch.take_along_dim, "take_along_dim")
def take_along_dim(cx, x, indices, dim=None, *, out=None):
    x, indices = cx.value(x), cx.value(indices)
    if dim is None:
        return gather_elements(cx, flatten(cx, x), 0, flatten(cx, indices))
    axis = dim % x.type.rank
    others = broadcast_shape([t.shape[:axis] + t.shape[axis + 1:] for t in (x, indices)])
    x = cx.broadcast(x, others[:axis] + (x.shape[axis],) + others[axis:])
    indices = cx.broadcast(indices, others[:axis] + (indices.shape[axis],) + others[axis:])
    return gather_elements(cx, x, axis, indices)


# ----- indexing with tensors ---------------------------------------------------------------------------
def index_arrays(cx: ConvertContext, item: Any) -> list[Value]:
    """The integer index tensors an index item stands for: itself, or a constant bool mask's nonzero
    positions (one tensor per mask dim). A mask computed at run time has a data-dependent shape."""
    if isinstance(item, (list, tuple)):
        item = torch.tensor(item)
        if item.dtype is not torch.bool and item.dtype.is_floating_point:
            raise Unsupported("indexing with a list of floats")
    value = cx.value(item)
    if value.dtype is DType.bool:
        data = known(value)
        if data is None:
            raise Unsupported("boolean mask indexing with a mask computed at run time (the result shape depends "
                              "on the data)")
        return [constant_index(cx, positions, "mask_positions") for positions in np.nonzero(data)]
    if not value.dtype.is_int:
        raise Unsupported(f"indexing with a {value.dtype} tensor")
    return [value]


def _adjacent(axes: Sequence[int]) -> bool:
    return list(axes) == list(range(axes[0], axes[-1] + 1))


def index_tensors(cx: ConvertContext, x: Value, positions: dict[int, Value]) -> Value:
    """x[..., i0, ..., i1, ...] with index tensors on some axes (numpy rules: the broadcast index dims
    replace adjacent indexed axes in place, else lead the result)."""
    axes = sorted(positions)
    if len(axes) == 1:
        axis = axes[0]
        return cx.b.gather(x, nonnegative(cx, positions[axis], x.shape[axis]), axis=axis)
    rest = [a for a in range(x.type.rank) if a not in positions]
    rest_shape = tuple(x.shape[a] for a in rest)
    sizes = [x.shape[a] for a in axes]
    linear = linear_positions(cx, [positions[a] for a in axes], sizes)
    flat = cx.reshape(cx.transpose(x, axes + rest), (math.prod(sizes),) + rest_shape)
    y = cx.b.gather(flat, linear, axis=0)  # [*batch, *rest]
    lead = axes[0]
    if _adjacent(axes) and lead > 0:
        nb = linear.type.rank
        y = cx.transpose(y, [nb + i for i in range(lead)] + list(range(nb)) +
                         [nb + i for i in range(lead, len(rest))])
    return y


def _item_rank(item: Any) -> int:
    """How many input axes an index item consumes."""
    if item is None or item is Ellipsis:
        return 0
    if isinstance(item, Value) and item.dtype is DType.bool:
        return item.type.rank
    if isinstance(item, torch.Tensor) and item.dtype is torch.bool:
        return item.dim()
    return 1


def _expand_ellipsis(items: list, rank: int) -> list:
    if items.count(Ellipsis) > 1:
        raise Unsupported("more than one Ellipsis in an index")
    consumed = sum(_item_rank(i) for i in items)
    if consumed > rank:
        raise Unsupported(f"too many indices ({consumed}) for a rank-{rank} tensor")
    fill = [slice(None)] * (rank - consumed)
    if Ellipsis in items:
        at = items.index(Ellipsis)
        return items[:at] + fill + items[at + 1:]
    return items + fill


def _slice_bounds(item: slice, size: int) -> tuple[int, int, int]:
    if not all(v is None or isinstance(v, int) for v in (item.start, item.stop, item.step)):
        raise Unsupported("slice bounds that are not integers")
    if item.step is not None and item.step < 1:
        raise Unsupported("slices with a step below 1")
    return item.indices(size)


def basic_index(cx: ConvertContext, x: Value, index: Any) -> tuple[Value | None, dict[int, Value]]:
    """Apply the ints, slices and Nones of an index (torch does these first) and say which axes of
    the result the index tensors apply to; (None, {}) when the result is empty."""
    items = list(index) if isinstance(index, tuple) else [index]
    if any(isinstance(i, bool) for i in items):
        raise Unsupported("indexing with a Python bool")
    items = _expand_ellipsis(items, x.type.rank)
    starts, stops, steps, shape, positions = [], [], [], [], {}
    axis = 0
    for item in items:
        if item is None:
            shape.append(1)
            continue
        if isinstance(item, int):
            size = x.shape[axis]
            if not -size <= item < size:
                raise Unsupported(f"index {item} out of range for an axis of size {size}")
            bounds = (item % size, item % size + 1, 1)
        elif isinstance(item, slice):
            bounds = _slice_bounds(item, x.shape[axis])
            shape.append(len(range(*bounds)))
        else:
            arrays = index_arrays(cx, item)
            for k, array in enumerate(arrays):
                positions[len(shape)] = array
                shape.append(x.shape[axis + k])
                starts.append(0), stops.append(x.shape[axis + k]), steps.append(1)
            axis += len(arrays)
            continue
        starts.append(bounds[0]), stops.append(bounds[1]), steps.append(bounds[2])
        axis += 1
    if any(len(range(a, b, s)) == 0 for a, b, s in zip(starts, stops, steps)):
        return None, {}
    y = x
    if (tuple(starts), tuple(stops), tuple(steps)) != ((0,) * x.type.rank, x.shape, (1,) * x.type.rank):
        y = cx.b.slice(x, start=starts, stop=stops, step=steps)
    return cx.reshape(y, shape), positions


@converts(operator.getitem, "__getitem__")
def getitem(cx, x, index):
    if not isinstance(x, Value):  # a tuple of results (split, max with dim), a shape, ...
        return x[index]
    y, positions = basic_index(cx, x, index)
    if y is None:  # an empty result (x[..., n:] of a size-n axis): only concatenation can use it
        return cx.b.constant(0, x.dtype, cx.out_shape)
    return cx.reshape(index_tensors(cx, y, positions) if positions else y, cx.out_shape)


def aten_positions(cx: ConvertContext, indices: Sequence[Any]) -> dict[int, Value]:
    """aten.index's list of optional index tensors as {axis: integer index tensor}."""
    positions, axis = {}, 0
    for item in indices:
        if item is None:
            axis += 1
            continue
        for array in index_arrays(cx, item):
            positions[axis] = array
            axis += 1
    if not positions:
        raise Unsupported("aten.index without index tensors")
    return positions


@converts(A("index"))
def aten_index(cx, x, indices):
    return cx.reshape(index_tensors(cx, cx.value(x), aten_positions(cx, indices)), cx.out_shape)


@converts(torch.index_select, "index_select", A("index_select"))
def index_select(cx, x, dim, index):
    x = cx.value(x)
    if x.type.rank == 0:
        return x
    (array,) = index_arrays(cx, index)
    axis = dim % x.type.rank
    return cx.reshape(cx.b.gather(x, nonnegative(cx, array, x.shape[axis]), axis=axis), cx.out_shape)


# ----- writes: index_put and item assignment -------------------------------------------------------------
def last_writer(cx: ConvertContext, linear: Value, count: int) -> Value:
    """For each of `count` positions, the number of the last index tuple writing it, -1 if none."""
    data = known(linear)
    if data is not None:
        last = np.full(count, -1, dtype=np.int64)
        np.maximum.at(last, data.reshape(-1), np.arange(data.size))
        return constant_index(cx, last, "last_write")
    writes = linear.type.numel
    hits = cx.b.eq(cx.reshape(linear, (1, writes)), cx.b.iota(shape=(count, 1), axis=0, dtype=I64))
    numbers = cx.b.iota(shape=(1, writes), axis=1, dtype=I64)
    return cx.b.max(cx.b.where(hits, numbers, cx.value(-1, I64)), axes=(1,))


def put_rows(cx: ConvertContext, rows: Value, linear: Value, values: Value, accumulate: bool) -> Value:
    """rows[linear[i]] = values[i] (last write wins), or += with accumulate; rows is [N, *rest]."""
    count, rest = rows.shape[0], rows.shape[1:]
    linear = flatten(cx, linear)
    tail = (1,) * len(rest)
    if accumulate:
        writes = linear.type.numel
        hits = cx.b.eq(cx.reshape(linear, (1, writes) + tail), cx.b.iota(shape=(count, 1) + tail, axis=0, dtype=I64))
        spread = cx.b.where(hits, cx.reshape(values, (1,) + values.shape), cx.value(0, rows.dtype))
        return cx.b.add(rows, cx.b.sum(spread, axes=(1,)))
    last = last_writer(cx, linear, count)
    picked = cx.b.gather(values, cx.b.maximum(last, cx.value(0, I64)), axis=0)
    written = cx.reshape(cx.b.ge(last, cx.value(0, I64)), (count,) + tail)
    return cx.b.where(written, picked, rows)


def put(cx: ConvertContext, x: Value, positions: dict[int, Value], values: Value, accumulate: bool,
        layout: str = "torch") -> Value:
    """x with x[positions] = values. `values` broadcasts to x[positions]'s shape (layout "torch"), or
    is already [*index batch, *other axes] (layout "batch")."""
    axes = sorted(positions)
    rest = [a for a in range(x.type.rank) if a not in positions]
    rest_shape = tuple(x.shape[a] for a in rest)
    sizes = [x.shape[a] for a in axes]
    linear = linear_positions(cx, [positions[a] for a in axes], sizes)
    batch = linear.shape
    if layout == "torch":
        lead = axes[0] if _adjacent(axes) else 0
        view = rest_shape[:lead] + batch + rest_shape[lead:]
        values = cx.broadcast(values, view)
        nb = len(batch)
        values = cx.transpose(values, list(range(lead, lead + nb)) + list(range(lead)) +
                              list(range(lead + nb, len(view))))
    values = cx.reshape(cx.broadcast(values, batch + rest_shape), (math.prod(batch),) + rest_shape)
    order = axes + rest
    rows = cx.reshape(cx.transpose(x, order), (math.prod(sizes),) + rest_shape)
    y = cx.reshape(put_rows(cx, rows, linear, values, accumulate), tuple(sizes) + rest_shape)
    return cx.transpose(y, [order.index(a) for a in range(x.type.rank)])


def runtime_mask(cx: ConvertContext, items: Sequence[Any]) -> tuple[int, Value] | None:
    """(axis, mask) when the index is one bool mask computed at run time, the rest `:` or None."""
    masks = [(k, i) for k, i in enumerate(items) if isinstance(i, Value) and i.dtype is DType.bool
             and known(i) is None]
    others = [i for i in items if not (i is None or (isinstance(i, slice) and i == slice(None)))]
    if len(masks) != 1 or len(others) != 1:
        return None
    return masks[0]


def masked_assign(cx: ConvertContext, x: Value, axis: int, mask: Value, value: Value, accumulate: bool) -> Value:
    """x[mask] = value for a run-time mask: a where, if one value is written everywhere."""
    if value.type.numel != 1:
        raise Unsupported("assignment of a tensor of values through a boolean mask computed at run time (which "
                          "value goes where depends on the data)")
    rank = x.type.rank
    mask = cx.reshape(mask, (1,) * axis + mask.shape + (1,) * (rank - axis - mask.type.rank))
    value = cx.reshape(value, ())
    if accumulate:
        return cx.b.add(x, cx.b.where(mask, value, cx.value(0, x.dtype)))
    return cx.b.where(mask, value, x)


@converts(torch.index_put, "index_put", "index_put_", A("index_put"), A("_unsafe_index_put"))
def index_put(cx, x, indices, values, accumulate=False):
    x = cx.value(x)
    values = cx.value(values, x.dtype)
    masked = runtime_mask(cx, indices)
    if masked is not None:
        return masked_assign(cx, x, masked[0], masked[1], values, bool(accumulate))
    return put(cx, x, aten_positions(cx, indices), values, bool(accumulate))


# ----- scatter: writes along one axis ---------------------------------------------------------------------
def scatter_values(cx: ConvertContext, x: Value, axis: int, index: Value, values: Value, accumulate: bool) -> Value:
    """x with x[.., index[p], ..] = values[p] along `axis` (torch.scatter; += for scatter_add): every
    output position compares its coordinate with the J indices of its line, O(numel(x) * J). With
    repeated indices the last write wins (torch leaves that order undefined)."""
    rank = x.type.rank
    axis %= max(rank, 1)
    if rank == 0 or index.type.rank != rank or any(i != s for a, (i, s) in enumerate(zip(index.shape, x.shape))
                                                   if a != axis):
        raise Unsupported(f"scatter into {x.type} with a {index.type} index (only an index as large as the "
                          f"input off axis {axis})")
    if values.type.rank == rank and values.shape != index.shape:  # torch reads src only where index is
        values = cx.b.slice(values, start=(0,) * rank, stop=index.shape, step=(1,) * rank)
    values = cx.broadcast(values, index.shape)
    order = [a for a in range(rank) if a != axis] + [axis]
    line, index, values = cx.transpose(x, order), cx.transpose(index, order), cx.transpose(values, order)
    lead, size, count = line.shape[:-1], line.shape[-1], index.shape[-1]
    hits = cx.b.eq(cx.reshape(cx.cast(index, I64), lead + (1, count)),
                   cx.b.iota(shape=(size, 1), axis=0, dtype=I64))  # [.., size, count]
    if accumulate:
        spread = cx.b.where(hits, cx.reshape(values, lead + (1, count)), cx.value(0, x.dtype))
        y = cx.b.add(line, cx.b.sum(spread, axes=(rank,)))
    else:
        numbers = cx.b.iota(shape=(1, count), axis=1, dtype=I64)
        last = cx.b.max(cx.b.where(hits, numbers, cx.value(-1, I64)), axes=(rank,))  # [.., size]
        picked = gather_elements(cx, values, rank - 1, cx.b.maximum(last, cx.value(0, I64)))
        y = cx.b.where(cx.b.ge(last, cx.value(0, I64)), picked, line)
    return cx.transpose(y, [order.index(a) for a in range(rank)])


@converts(torch.scatter, "scatter", "scatter_", A("scatter"))
def scatter(cx, x, dim, index, src=None, *, value=None, reduce=None):
    if reduce is not None:
        raise Unsupported(f"scatter with reduce={reduce!r}")
    x = cx.value(x)
    source = src if src is not None else value
    return scatter_values(cx, x, dim, cx.value(index), cx.value(source, x.dtype), accumulate=False)


@converts(torch.scatter_add, "scatter_add", "scatter_add_", A("scatter_add"))
def scatter_add(cx, x, dim, index, src):
    x = cx.value(x)
    return scatter_values(cx, x, dim, cx.value(index), cx.value(src, x.dtype), accumulate=True)


def _box_positions(cx: ConvertContext, x: Value, items: list) -> tuple[dict[int, Value], tuple[int, ...], tuple]:
    """For a basic index (ints, slices, None): the written box as constant per-axis positions on the
    axes it restricts, the box shape (one entry per input axis), and torch's shape of x[index]."""
    positions, box, view = {}, [], []
    axis = 0
    ranges = []
    for item in items:
        if item is None:
            view.append(1)
            continue
        size = x.shape[axis]
        if isinstance(item, int):
            if not -size <= item < size:
                raise Unsupported(f"index {item} out of range for an axis of size {size}")
            picked = range(item % size, item % size + 1)
        else:
            picked = range(*_slice_bounds(item, size))
            view.append(len(picked))
        ranges.append((axis, picked))
        box.append(len(picked))
        axis += 1
    restricted = [(a, r) for a, r in ranges if len(r) != x.shape[a]]
    grids = np.ix_(*[np.asarray(r, dtype=np.int64) for _, r in restricted]) if restricted else ()
    for (a, _), grid in zip(restricted, grids):
        positions[a] = constant_index(cx, grid, f"rows{a}")
    return positions, tuple(box), tuple(view)


@converts(operator.setitem, "__setitem__")
def setitem(cx, x, index, value):
    """x[index] = value: the new x (the converter rebinds x for later readers)."""
    x = cx.value(x)
    items = list(index) if isinstance(index, tuple) else [index]
    if any(isinstance(i, bool) for i in items):
        raise Unsupported("assignment with a Python bool index")
    items = _expand_ellipsis(items, x.type.rank)
    value = cx.value(value, x.dtype)
    masked = runtime_mask(cx, items)
    if masked is not None and None not in items:
        return masked_assign(cx, x, masked[0], masked[1], value, accumulate=False)
    basic = [i is None or isinstance(i, (int, slice)) for i in items]
    if not all(basic):
        if any(b and i != slice(None) for b, i in zip(basic, items)):
            raise Unsupported("assignment through index tensors mixed with ints, partial slices or None")
        positions, axis = {}, 0
        for item in items:
            if isinstance(item, slice):
                axis += 1
                continue
            for array in index_arrays(cx, item):
                positions[axis] = array
                axis += 1
        return put(cx, x, positions, value, accumulate=False)
    positions, box, view = _box_positions(cx, x, items)
    if math.prod(box) == 0:
        return x
    patch = cx.reshape(cx.broadcast(value, view), box)
    if not positions:  # the whole tensor
        return patch
    axes = sorted(positions)
    rest = [a for a in range(x.type.rank) if a not in positions]
    patch = cx.transpose(patch, axes + rest)
    return put(cx, x, positions, patch, accumulate=False, layout="batch")


# ----- scans and rolls -------------------------------------------------------------------------------------
def scan(cx: ConvertContext, x: Value, dim: int, op: str, identity: int) -> Value:
    """Inclusive prefix `op` along `dim` in ceil(log2 n) shifted steps (Hillis-Steele)."""
    if x.type.rank == 0:
        return x
    axis = dim % x.type.rank
    n = x.shape[axis]
    shift = 1
    while shift < n:
        filler = cx.b.constant(identity, x.dtype, x.shape[:axis] + (shift,) + x.shape[axis + 1:])
        moved = cx.b.concat(filler, slice_axis(cx, x, axis, 0, n - shift), axis=axis)
        x = cx.b.op(op, x, moved)
        shift *= 2
    return x


@converts(torch.cumsum, "cumsum", "cumsum_", A("cumsum"))
def cumsum(cx, x, dim, *, dtype=None, out=None):
    return scan(cx, cx.value(x, cx.out_dtype), dim, "add", 0)


@converts(torch.cumprod, "cumprod", "cumprod_", A("cumprod"))
def cumprod(cx, x, dim, *, dtype=None, out=None):
    return scan(cx, cx.value(x, cx.out_dtype), dim, "mul", 1)


def roll_axis(cx: ConvertContext, x: Value, shift: int, axis: int) -> Value:
    n = x.shape[axis]
    shift %= n if n else 1
    if shift == 0:
        return x
    return cx.b.concat(slice_axis(cx, x, axis, n - shift, n), slice_axis(cx, x, axis, 0, n - shift), axis=axis)


@converts(torch.roll, "roll", A("roll"))
def roll(cx, x, shifts, dims=None):
    x = cx.value(x)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        if len(shifts) != 1:
            raise Unsupported(f"roll with shifts={list(shifts)} and no dims")
        return cx.reshape(roll_axis(cx, flatten(cx, x), shifts[0], 0), x.shape)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(dims) != len(shifts):
        raise Unsupported(f"roll with {len(shifts)} shifts for {len(dims)} dims")
    for shift, dim in zip(shifts, dims):
        x = roll_axis(cx, x, shift, dim % x.type.rank)
    return x


# ----- arg-reductions, max/min with indices, topk ---------------------------------------------------------
def _extreme(cx: ConvertContext, x: Value, axis: int, largest: bool) -> Value:
    return cx.b.op("max" if largest else "min", x, axes=(axis,), keepdims=True)


def arg_extreme(cx: ConvertContext, x: Value, axis: int, largest: bool, best: Value | None = None) -> Value:
    """The first index of the max (min) along `axis`, keepdims; a NaN counts as the extreme, as in torch."""
    best = best if best is not None else _extreme(cx, x, axis, largest)
    hit = cx.b.eq(x, best)
    if x.dtype.is_float:
        hit = cx.b.where(cx.b.ne(x, x), cx.value(True, DType.bool), hit)
    positions = cx.b.iota(shape=x.shape, axis=axis, dtype=I64)
    candidates = cx.b.where(hit, positions, cx.value(x.shape[axis], I64))
    return cx.b.min(candidates, axes=(axis,), keepdims=True)


def _reduce_with_index(cx, x, dim, keepdim, largest: bool) -> ValuesIndices:
    x = cx.value(x)
    if x.type.rank == 0:
        return ValuesIndices(x, cx.b.constant(0, I64))
    axis = dim % x.type.rank
    best = _extreme(cx, x, axis, largest)
    index = arg_extreme(cx, x, axis, largest, best)
    if not keepdim:
        shape = x.shape[:axis] + x.shape[axis + 1:]
        best, index = cx.reshape(best, shape), cx.reshape(index, shape)
    return ValuesIndices(best, index)


def _argument(cx, x, dim, keepdim, largest: bool) -> Value:
    x = cx.value(x)
    if dim is None:
        x, dim = flatten(cx, x), 0
    if x.type.rank == 0:
        return cx.b.constant(0, I64)
    return cx.reshape(arg_extreme(cx, x, dim % x.type.rank, largest), cx.out_shape)


@converts(torch.argmax, "argmax", A("argmax"))
def argmax(cx, x, dim=None, keepdim=False):
    return _argument(cx, x, dim, keepdim, largest=True)


@converts(torch.argmin, "argmin", A("argmin"))
def argmin(cx, x, dim=None, keepdim=False):
    return _argument(cx, x, dim, keepdim, largest=False)


def _max_or_min(cx, op: str, elementwise: str, x, dim=None, keepdim=False):
    if isinstance(dim, Value) or isinstance(dim, torch.Tensor):  # torch.max(a, b)
        dtype = cx.out_dtype
        return cx.b.op(elementwise, cx.value(x, dtype), cx.value(dim, dtype))
    if dim is None:
        x = cx.value(x)
        return x if x.type.rank == 0 else cx.b.op(op, x, axes=None, keepdims=False)
    return _reduce_with_index(cx, x, dim, keepdim, largest=op == "max")


@converts(torch.max, "max", A("max"))
def max_(cx, x, dim=None, keepdim=False):
    return _max_or_min(cx, "max", "maximum", x, dim, keepdim)


@converts(torch.min, "min", A("min"))
def min_(cx, x, dim=None, keepdim=False):
    return _max_or_min(cx, "min", "minimum", x, dim, keepdim)


def _worst(dtype: DType, largest: bool) -> float | int | bool:
    """A value no element beats (what topk writes over the elements it has taken)."""
    if dtype.is_float:
        return -math.inf if largest else math.inf
    if dtype is DType.bool:
        return not largest
    info = np.iinfo(dtype.numpy)
    return int(info.min) if largest else int(info.max)


@converts(torch.topk, "topk", A("topk"))
def topk(cx, x, k, dim=-1, largest=True, sorted=True, *, out=None):
    """k rounds of (extreme, its first index, mask it out): the k largest (smallest) in order."""
    x = cx.value(x)
    if x.type.rank == 0:
        return ValuesIndices(x, cx.b.constant(0, I64))
    if k > MAX_TOPK:
        raise Unsupported(f"topk with k={k} (at most {MAX_TOPK}: the IR has no sort)")
    axis = dim % x.type.rank
    positions = cx.b.iota(shape=x.shape, axis=axis, dtype=I64)
    remaining, values, indices = x, [], []
    for step in range(k):
        best = _extreme(cx, remaining, axis, largest)
        index = arg_extreme(cx, remaining, axis, largest, best)
        values.append(best)
        indices.append(index)
        if step + 1 < k:
            taken = cx.b.eq(positions, index)
            remaining = cx.b.where(taken, cx.value(_worst(x.dtype, largest), x.dtype), remaining)
    if k == 0:
        raise Unsupported("topk with k=0 (an empty result)")
    join = (lambda parts: parts[0] if len(parts) == 1 else cx.b.concat(*parts, axis=axis))
    return ValuesIndices(join(values), join(indices))


@converts(torch.sort, "sort", A("sort"))
def sort(cx, x, dim=-1, descending=False, stable=False, *, out=None):
    x = cx.value(x)
    if x.type.rank == 0:
        return ValuesIndices(x, cx.b.constant(0, I64))
    return topk(cx, x, x.shape[dim % x.type.rank], dim, largest=bool(descending))


@converts(torch.argsort, "argsort", A("argsort"))
def argsort(cx, x, dim=-1, descending=False, stable=False):
    return sort(cx, x, dim, descending)[1]

