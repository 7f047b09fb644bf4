"""Layout ops. transpose, broadcast_to, slice and concat (of a few operands) are affine (they have
iteration spaces); reshape and gather are not, and passes treat them as data movement."""
from __future__ import annotations

import math

import numpy as np

from ..structured import PARALLEL, AffineExpr, AffineMap, Arg, Index, IterationSpace, call
from ..types import TensorType, normalize_axis
from .elementwise import broadcast_map
from .registry import LAYOUT, AttrSpec, OpDef, register, same_dtype

# layout ops that only copy: each element of the result is one element of the input, moved (affine through a
# reshape's refinement space). Inside a kernel they are addressing, not storage.
MOVES = ("transpose", "reshape", "slice", "broadcast_to")


def _copy_space(result: TensorType, input_map: AffineMap) -> IterationSpace:
    rank = result.rank
    return IterationSpace(result.shape, (PARALLEL,) * rank, (input_map,), (AffineMap.identity(rank),),
                          (Arg(0),), (None,))


# ----- transpose ------------------------------------------------------------------------------
def _transpose_normalize(in_types, attrs):
    rank = in_types[0].rank
    perm = attrs["perm"]
    if perm is None:
        perm = tuple(reversed(range(rank)))
    perm = tuple(normalize_axis(p, rank) for p in perm)
    if sorted(perm) != list(range(rank)):
        raise ValueError(f"perm {list(attrs['perm'])} is not a permutation of {rank} axes")
    attrs["perm"] = perm
    return attrs


def _transpose_space(ins, attrs, result):
    inverse = {axis: i for i, axis in enumerate(attrs["perm"])}
    return _copy_space(result, AffineMap(tuple(AffineExpr.dim(inverse[a]) for a in range(ins[0].rank))))


register(OpDef(
    name="transpose", category=LAYOUT, arity=(1, 1), attrs=(AttrSpec("perm", "ints", None),),
    doc="permute axes: result axis i is input axis perm[i] (default: reverse)",
    normalize_fn=_transpose_normalize,
    infer_fn=lambda ins, attrs: ins[0].with_shape(tuple(ins[0].shape[p] for p in attrs["perm"])),
    space_fn=_transpose_space,
    reference_fn=lambda a, attrs, r: np.transpose(a[0], attrs["perm"]),
))


# ----- reshape --------------------------------------------------------------------------------
def _reshape_normalize(in_types, attrs):
    (x,) = in_types
    shape = list(attrs["shape"])
    if shape.count(-1) > 1:
        raise ValueError(f"at most one -1 in shape {shape}")
    if any(s < -1 for s in shape):
        raise ValueError(f"negative size in shape {shape}")
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or x.numel % known:
            raise ValueError(f"cannot infer -1 in {shape} for {x.compact()}")
        shape[shape.index(-1)] = x.numel // known
    if math.prod(shape) != x.numel:
        raise ValueError(f"cannot reshape {x.compact()} ({x.numel} elements) to {shape}")
    attrs["shape"] = tuple(shape)
    return attrs


register(OpDef(
    name="reshape", category=LAYOUT, arity=(1, 1), attrs=(AttrSpec("shape", "shape"),),
    doc="same elements in row-major order, new shape (one -1 is inferred)",
    normalize_fn=_reshape_normalize,
    infer_fn=lambda ins, attrs: ins[0].with_shape(attrs["shape"]),
    reference_fn=lambda a, attrs, r: np.reshape(a[0], attrs["shape"]),
))


# ----- broadcast_to ---------------------------------------------------------------------------
def _broadcast_to_infer(in_types, attrs):
    (x,) = in_types
    target = attrs["shape"]
    offset = len(target) - x.rank
    if offset < 0 or any(s not in (1, target[offset + i]) for i, s in enumerate(x.shape)):
        raise ValueError(f"cannot broadcast {x.compact()} to {list(target)}")
    return x.with_shape(target)


register(OpDef(
    name="broadcast_to", category=LAYOUT, arity=(1, 1), attrs=(AttrSpec("shape", "shape"),),
    doc="repeat size-1 (and missing leading) axes to reach shape",
    infer_fn=_broadcast_to_infer,
    space_fn=lambda ins, attrs, r: _copy_space(r, broadcast_map(ins[0].shape, r.shape)),
    reference_fn=lambda a, attrs, r: np.broadcast_to(a[0], attrs["shape"]),
))


# ----- slice ----------------------------------------------------------------------------------
SLICE_ATTRS = (AttrSpec("start", "ints"), AttrSpec("stop", "ints"), AttrSpec("step", "ints", None))


def _slice_normalize(in_types, attrs):
    """Python slice rules per axis (negative indices count from the end, clamped); steps positive."""
    (x,) = in_types
    rank = x.rank
    step = attrs["step"] if attrs["step"] is not None else (1,) * rank
    if not len(attrs["start"]) == len(attrs["stop"]) == len(step) == rank:
        raise ValueError(f"start, stop and step need one entry per axis of {x.compact()}")
    if any(s < 1 for s in step):
        raise ValueError(f"steps must be positive, got {list(step)}")
    bounds = [slice(a, b, s).indices(n) for a, b, s, n in zip(attrs["start"], attrs["stop"], step, x.shape)]
    starts = tuple(b[0] for b in bounds)
    stops = tuple(max(b[1], b[0]) for b in bounds)
    if any(len(range(*b)) == 0 for b in bounds):
        raise ValueError(f"empty slice {list(attrs['start'])}:{list(attrs['stop'])} of {x.compact()}")
    return {"start": starts, "stop": stops, "step": tuple(step)}


def _slice_shape(attrs):
    return tuple(len(range(a, b, s)) for a, b, s in zip(attrs["start"], attrs["stop"], attrs["step"]))


register(OpDef(
    name="slice", category=LAYOUT, arity=(1, 1), attrs=SLICE_ATTRS,
    doc="x[start:stop:step] on every axis",
    normalize_fn=_slice_normalize,
    infer_fn=lambda ins, attrs: ins[0].with_shape(_slice_shape(attrs)),
    space_fn=lambda ins, attrs, r: _copy_space(r, AffineMap(tuple(
        AffineExpr.dim(d, s) + a for d, (a, s) in enumerate(zip(attrs["start"], attrs["step"]))))),
    reference_fn=lambda a, attrs, r: a[0][tuple(slice(*b) for b in zip(attrs["start"], attrs["stop"],
                                                                           attrs["step"]))],
))


# ----- concat ---------------------------------------------------------------------------------
def _concat_normalize(in_types, attrs):
    """Axis in range; `starts` and `sizes` (the window of each operand taken along the axis, by default
    all of it) checked, and dropped when they take every operand whole, so equal concats compare equal."""
    axis = attrs["axis"] = normalize_axis(attrs["axis"], in_types[0].rank)
    extents = tuple(t.shape[axis] for t in in_types)
    starts = tuple(attrs["starts"]) if attrs["starts"] is not None else (0,) * len(in_types)
    sizes = tuple(attrs["sizes"]) if attrs["sizes"] is not None else tuple(e - a for e, a in zip(extents, starts))
    if not len(starts) == len(sizes) == len(in_types):
        raise ValueError(f"starts and sizes need one entry per operand ({len(in_types)})")
    for j, (start, size, extent) in enumerate(zip(starts, sizes, extents)):
        if start < 0 or size < 1 or start + size > extent:
            raise ValueError(f"operand {j}: window [{start}, {start + size}) outside its axis of {extent}")
    whole = all(a == 0 for a in starts) and sizes == extents
    attrs["starts"], attrs["sizes"] = (None, None) if whole else (starts, sizes)
    return attrs


def concat_windows(operands, attrs) -> tuple[tuple[int, int], ...]:
    """(start, size) taken from each operand (a type or an array: anything with a shape) along the axis."""
    axis = attrs["axis"]
    if attrs.get("starts") is None:
        return tuple((0, t.shape[axis]) for t in operands)
    return tuple(zip(attrs["starts"], attrs["sizes"]))


def _concat_infer(in_types, attrs):
    axis = attrs["axis"]
    first = in_types[0]
    same_dtype(in_types)
    for t in in_types[1:]:
        if t.rank != first.rank or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis):
            shown = ", ".join(x.compact() for x in in_types)
            raise ValueError(f"operands differ outside axis {axis}: {shown}")
    size = sum(size for _, size in concat_windows(in_types, attrs))
    return first.with_shape(first.shape[:axis] + (size,) + first.shape[axis + 1:])


def _concat_reference(arrays, attrs, result):
    windows = concat_windows(arrays, attrs)
    axis = attrs["axis"]
    return np.concatenate([np.take(a, range(start, start + size), axis=axis)
                           for a, (start, size) in zip(arrays, windows)], axis=axis)


# A concat of at most this many operands is structured: every output element reads each operand (masked
# outside it) and selects one, so it fuses with what reads it; a wider one stays a copy.
CONCAT_READS = 4


def _concat_space(ins, attrs, result):
    """Operand j read at the output's index less its offset along the axis, plus its window's start (zero
    outside the operand: a padded read), the value taken from the operand whose range holds the index (a
    select, not a sum: -0.0 + 0 would lose the sign)."""
    if len(ins) > CONCAT_READS:
        return None
    axis, rank = attrs["axis"], result.rank
    offsets, maps = [0], []
    for start, size in concat_windows(ins, attrs):
        shift = start - offsets[-1]
        maps.append(AffineMap(tuple(AffineExpr.dim(d) + (shift if d == axis else 0) for d in range(rank)), 0.0))
        offsets.append(offsets[-1] + size)
    body = Arg(len(ins) - 1)
    for j in reversed(range(len(ins) - 1)):
        body = call("select", call("lt", Index(axis), offsets[j + 1]), Arg(j), body)
    return IterationSpace(result.shape, (PARALLEL,) * rank, tuple(maps), (AffineMap.identity(rank),), (body,),
                          (None,))


register(OpDef(
    name="concat", category=LAYOUT, arity=(1, 64),
    attrs=(AttrSpec("axis", "int", 0), AttrSpec("starts", "ints", None), AttrSpec("sizes", "ints", None)),
    doc="join operands along axis (of each, the window `sizes` long from `starts`; by default all of it)",
    normalize_fn=_concat_normalize, infer_fn=_concat_infer, space_fn=_concat_space,
    reference_fn=_concat_reference,
))


# ----- gather ---------------------------------------------------------------------------------
def _gather_normalize(in_types, attrs):
    attrs["axis"] = normalize_axis(attrs["axis"], in_types[0].rank)
    return attrs


def _gather_infer(in_types, attrs):
    table, indices = in_types
    if not indices.dtype.is_int:
        raise ValueError(f"indices must be i32 or i64, got {indices.compact()}")
    axis = attrs["axis"]
    return table.with_shape(table.shape[:axis] + indices.shape + table.shape[axis + 1:])


def _gather_reference(arrays, attrs, result):
    table, indices = arrays
    size = table.shape[attrs["axis"]]
    if indices.size and (indices.min() < -size or indices.max() >= size):
        raise IndexError(f"gather: index out of range for axis of size {size}")
    return np.take(table, indices, axis=attrs["axis"])


register(OpDef(
    name="gather", category=LAYOUT, arity=(2, 2), attrs=(AttrSpec("axis", "int", 0),),
    doc="pick slices of the first operand by integer indices along axis (embedding lookup)",
    normalize_fn=_gather_normalize, infer_fn=_gather_infer, reference_fn=_gather_reference,
))

