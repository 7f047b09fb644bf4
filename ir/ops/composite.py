"""Composite ops: each has its own numpy semantics and a decomposition into structured ops.

canonicalize replaces composites by their decompositions; fusion then re-forms them into
kernels (softmax and layer norm one kernel each, attention one FlashAttention-style kernel).
"""
from __future__ import annotations

import math

import numpy as np

from ..types import DType, normalize_axis
from .registry import COMPOSITE, AttrSpec, OpDef, normalize_axes, register, same_dtype


def _float_only(op_inputs) -> None:
    for t in op_inputs:
        if not t.dtype.is_float:
            raise ValueError(f"needs floating-point operands, got {t.compact()}")


def _axis_normalize(in_types, attrs):
    attrs["axis"] = normalize_axis(attrs["axis"], in_types[0].rank)
    return attrs


def _axes_normalize(in_types, attrs):
    attrs["axes"] = normalize_axes(attrs["axes"], in_types[0].rank)
    return attrs


def _same_type_as_first(in_types, attrs):
    _float_only(in_types)
    same_dtype(in_types)
    return in_types[0]


# ----- softmax / log_softmax ------------------------------------------------------------------
def _softmax_decompose(b, values, attrs):
    (x,) = values
    shifted = b.sub(x, b.max(x, axes=attrs["axis"], keepdims=True))
    exps = b.exp(shifted)
    return [b.div(exps, b.sum(exps, axes=attrs["axis"], keepdims=True))]


def _log_softmax_decompose(b, values, attrs):
    (x,) = values
    shifted = b.sub(x, b.max(x, axes=attrs["axis"], keepdims=True))
    return [b.sub(shifted, b.log(b.sum(b.exp(shifted), axes=attrs["axis"], keepdims=True)))]


def _softmax_reference(arrays, attrs, result, log=False):
    x = arrays[0].astype(np.float64)
    shifted = x - x.max(axis=attrs["axis"], keepdims=True)
    total = np.exp(shifted).sum(axis=attrs["axis"], keepdims=True)
    return shifted - np.log(total) if log else np.exp(shifted) / total


register(OpDef(
    name="softmax", category=COMPOSITE, arity=(1, 1), attrs=(AttrSpec("axis", "int", -1),),
    doc="exp(x - max) / sum(exp(x - max)) along axis",
    normalize_fn=_axis_normalize, infer_fn=_same_type_as_first,
    reference_fn=_softmax_reference, decompose_fn=_softmax_decompose,
))
register(OpDef(
    name="log_softmax", category=COMPOSITE, arity=(1, 1), attrs=(AttrSpec("axis", "int", -1),),
    doc="x - max - log(sum(exp(x - max))) along axis",
    normalize_fn=_axis_normalize, infer_fn=_same_type_as_first,
    reference_fn=lambda a, attrs, r: _softmax_reference(a, attrs, r, log=True),
    decompose_fn=_log_softmax_decompose,
))


# ----- layer_norm / rms_norm ------------------------------------------------------------------
def _norm_infer(in_types, attrs):
    x, *affine = in_types
    _float_only(in_types)
    same_dtype(in_types)
    normalized = tuple(x.shape[a] for a in attrs["axes"])
    if attrs["axes"] != tuple(range(x.rank - len(normalized), x.rank)):
        raise ValueError(f"axes {list(attrs['axes'])} must be the trailing axes of {x.compact()}")
    for t in affine:
        if t.shape != normalized:
            raise ValueError(f"scale/shift {t.compact()} must have the normalized shape {list(normalized)}")
    return x


def _layer_norm_decompose(b, values, attrs):
    x, *affine = values
    axes = attrs["axes"]
    centered = b.sub(x, b.mean(x, axes=axes, keepdims=True))
    variance = b.mean(b.mul(centered, centered), axes=axes, keepdims=True)
    y = b.mul(centered, b.rsqrt(b.add(variance, attrs["eps"])))
    if len(affine) > 0:
        y = b.mul(y, affine[0])
    if len(affine) > 1:
        y = b.add(y, affine[1])
    return [y]


def _layer_norm_reference(arrays, attrs, result):
    x, *affine = (a.astype(np.float64) for a in arrays)
    axes = attrs["axes"]
    mu = x.mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=axes, keepdims=True) + attrs["eps"])
    return y * (affine[0] if affine else 1) + (affine[1] if len(affine) > 1 else 0)


NORM_ATTRS = (AttrSpec("axes", "axes", (-1,)), AttrSpec("eps", "float", 1e-5))
register(OpDef(
    name="layer_norm", category=COMPOSITE, arity=(1, 3), attrs=NORM_ATTRS,
    doc="layer_norm(x, [scale, [shift]]): normalise over the trailing axes",
    normalize_fn=_axes_normalize, infer_fn=_norm_infer,
    reference_fn=_layer_norm_reference, decompose_fn=_layer_norm_decompose,
))


def _rms_norm_decompose(b, values, attrs):
    x, *scale = values
    mean_square = b.mean(b.mul(x, x), axes=attrs["axes"], keepdims=True)
    y = b.mul(x, b.rsqrt(b.add(mean_square, attrs["eps"])))
    return [b.mul(y, scale[0]) if scale else y]


def _rms_norm_reference(arrays, attrs, result):
    x, *scale = (a.astype(np.float64) for a in arrays)
    y = x / np.sqrt((x * x).mean(axis=attrs["axes"], keepdims=True) + attrs["eps"])
    return y * scale[0] if scale else y


register(OpDef(
    name="rms_norm", category=COMPOSITE, arity=(1, 2),
    attrs=(AttrSpec("axes", "axes", (-1,)), AttrSpec("eps", "float", 1e-6)),
    doc="rms_norm(x, [scale]): x / sqrt(mean(x*x) + eps) over the trailing axes",
    normalize_fn=_axes_normalize, infer_fn=_norm_infer,
    reference_fn=_rms_norm_reference, decompose_fn=_rms_norm_decompose,
))


# ----- batch_norm (inference) -----------------------------------------------------------------
def _batch_norm_infer(in_types, attrs):
    x, *stats = in_types
    _float_only(in_types)
    same_dtype(in_types)
    if x.rank < 2:
        raise ValueError(f"needs an [N, C, ...] input, got {x.compact()}")
    for t in stats:
        if t.shape != (x.shape[1],):
            raise ValueError(f"statistics {t.compact()} must have shape [{x.shape[1]}] (channels of {x.compact()})")
    return x


def _channel_view(b, value, rank):
    return b.reshape(value, shape=(value.shape[0],) + (1,) * (rank - 2))


def _batch_norm_decompose(b, values, attrs):
    x, mean, var, *affine = values
    rank = x.type.rank
    inv_std = b.rsqrt(b.add(var, attrs["eps"]))
    scale = b.mul(inv_std, affine[0]) if affine else inv_std
    y = b.mul(b.sub(x, _channel_view(b, mean, rank)), _channel_view(b, scale, rank))
    return [b.add(y, _channel_view(b, affine[1], rank)) if len(affine) > 1 else y]


def _batch_norm_reference(arrays, attrs, result):
    x, mean, var, *affine = (a.astype(np.float64) for a in arrays)
    view = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - mean.reshape(view)) / np.sqrt(var.reshape(view) + attrs["eps"])
    if affine:
        y = y * affine[0].reshape(view)
    if len(affine) > 1:
        y = y + affine[1].reshape(view)
    return y


register(OpDef(
    name="batch_norm", category=COMPOSITE, arity=(3, 5), attrs=(AttrSpec("eps", "float", 1e-5),),
    doc="batch_norm(x, mean, var, [scale, [shift]]): inference-mode normalisation over channel axis 1",
    infer_fn=_batch_norm_infer, reference_fn=_batch_norm_reference, decompose_fn=_batch_norm_decompose,
))


# ----- scaled dot-product attention -----------------------------------------------------------
def _attention_infer(in_types, attrs):
    q, k, v, *mask = in_types
    _float_only((q, k, v))
    same_dtype((q, k, v))
    shown = f"q {q.compact()}, k {k.compact()}, v {v.compact()}"
    if q.rank < 2 or k.rank != q.rank or v.rank != q.rank:
        raise ValueError(f"q, k, v need one rank of at least 2: {shown}")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        raise ValueError(f"batch dims differ: {shown}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"need q[..., L, D], k[..., S, D], v[..., S, Dv]: {shown}")
    scores = q.shape[:-1] + (k.shape[-2],)
    if mask:
        (m,) = mask
        if m.dtype is not DType.bool and m.dtype is not q.dtype:
            raise ValueError(f"mask must be bool or {q.dtype}, got {m.compact()}")
        try:
            np.broadcast_shapes(m.shape, scores)
        except ValueError:
            raise ValueError(f"mask {m.compact()} does not broadcast to scores {list(scores)}") from None
        if attrs["causal"]:
            raise ValueError("give either a mask or causal=true, not both")
    return q.with_shape(q.shape[:-1] + (v.shape[-1],))


def _attention_scale(q_type, attrs) -> float:
    return attrs["scale"] if attrs["scale"] is not None else 1.0 / math.sqrt(q_type.shape[-1])


def _grouped(value, heads: int) -> tuple[object, int] | None:
    """(the [..., G, R, S, D] broadcast, R) when `value` [..., G * R, S, D] is a group's keys or values repeated R
    times (grouped-query attention, as transformers' repeat_kv writes it: reshape(broadcast_to(x [..., G, 1, S, D]))),
    else None."""
    merge = value.producer
    if merge is None or merge.op != "reshape":
        return None
    expanded = merge.inputs[0]
    spread = expanded.producer
    if spread is None or spread.op != "broadcast_to" or expanded.type.rank != value.type.rank + 1:
        return None
    shape, source = expanded.type.shape, spread.inputs[0].type.shape
    lead = value.type.shape[:-3]
    if shape[:-4] != lead or shape[-2:] != value.type.shape[-2:] or shape[-4] * shape[-3] != heads:
        return None
    if len(source) < 4 or source[-3] != 1 or source[-4] != shape[-4] or shape[-3] == 1:
        return None
    return expanded, shape[-3]


def _group_heads(b, value, groups: int, repeats: int):
    """`value` [..., H, L, X] (H = groups * repeats, or 1 broadcast over the heads) as [..., G, R, L, X]."""
    shape = value.type.shape
    if len(shape) < 3:  # a mask over [L, S] alone: broadcast as it is
        return value
    heads = shape[-3]
    parts = (groups, repeats) if heads == groups * repeats else (1, 1)
    return b.reshape(value, shape=shape[:-3] + parts + shape[-2:])


def _attention_decompose(b, values, attrs):
    q, k, v, *mask = values
    rank = q.type.rank
    grouped = [_grouped(x, q.type.shape[-3]) for x in (k, v)] if rank >= 4 else [None, None]
    if all(grouped) and grouped[0][1] == grouped[1][1]:
        # grouped-query attention: run it over [..., G, R, L, D], reading each group's keys and values through
        # the broadcast (no copy of them per head), and merge the heads of the result back
        (k, repeats), (v, _) = grouped
        groups = k.type.shape[-4]
        q = _group_heads(b, q, groups, repeats)
        mask = [_group_heads(b, m, groups, repeats) for m in mask]
        (out,) = _attention_decompose(b, [q, k, v, *mask], attrs)
        return [b.reshape(out, shape=out.type.shape[:-4] + (groups * repeats,) + out.type.shape[-2:])]
    perm = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    scores = b.mul(b.matmul(q, b.transpose(k, perm=perm)), _attention_scale(q.type, attrs))
    if attrs["causal"]:
        grid = scores.shape[-2:]
        rows = b.iota(shape=grid, axis=0, dtype=DType.i64)
        cols = b.iota(shape=grid, axis=1, dtype=DType.i64)
        mask = [b.le(cols, rows)]
    if mask:
        if mask[0].dtype is DType.bool:
            scores = b.where(mask[0], scores, -math.inf)
        else:
            scores = b.add(scores, mask[0])
    return [b.matmul(b.softmax(scores, axis=-1), v)]


def _attention_reference(arrays, attrs, result):
    q, k, v, *mask = arrays
    scores = np.matmul(q.astype(np.float64), np.swapaxes(k, -1, -2).astype(np.float64))
    scores *= attrs["scale"] if attrs["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    if attrs["causal"]:
        length, source = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((length, source), dtype=bool)), scores, -np.inf)
    if mask:
        scores = np.where(mask[0], scores, -np.inf) if mask[0].dtype == np.bool_ else scores + mask[0]
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ v.astype(np.float64)


register(OpDef(
    name="attention", category=COMPOSITE, arity=(3, 4),
    attrs=(AttrSpec("scale", "float", None), AttrSpec("causal", "bool", False)),
    doc="attention(q, k, v, [mask]): softmax(q @ k^T * scale + mask) @ v; bool masks keep where true",
    infer_fn=_attention_infer, reference_fn=_attention_reference, decompose_fn=_attention_decompose,
))
