"""Contractions and windows: matmul, batch_matmul, conv2d (NCHW, groups), max/avg pooling."""
from __future__ import annotations

import math

import numpy as np

from ..structured import PARALLEL, REDUCTION, AffineExpr, AffineMap, Acc, Arg, IterationSpace, call
from ..types import TensorType, broadcast_shapes
from .registry import CONTRACTION, WINDOW, AttrSpec, OpDef, register, same_dtype

D = AffineExpr.dim


# ----- matmul ---------------------------------------------------------------------------------
def _matmul_infer(in_types, attrs, strict_batch: bool = False):
    a, b = in_types
    same_dtype(in_types)
    shown = f"{a.compact()} @ {b.compact()}"
    if a.rank < 2 or b.rank < 2:
        raise ValueError(f"operands need rank 2 or more: {shown}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"inner dims differ: {shown}")
    if strict_batch:
        if a.rank != 3 or b.rank != 3 or a.shape[0] != b.shape[0]:
            raise ValueError(f"needs [B,M,K] @ [B,K,N] with one batch size: {shown}")
    try:
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"batch dims do not broadcast: {shown}") from None
    return TensorType(batch + (a.shape[-2], b.shape[-1]), a.dtype)


def _batch_map(operand_batch: tuple[int, ...], batch: tuple[int, ...]) -> list[AffineExpr]:
    offset = len(batch) - len(operand_batch)
    return [AffineExpr.constant(0) if s == 1 and batch[offset + i] != 1 else D(offset + i)
            for i, s in enumerate(operand_batch)]


def matmul_space(ins, attrs, result: TensorType) -> IterationSpace:
    """Loops (batch..., i, j, k): A[b, i, k] * B[b, k, j] summed over k into C[b, i, j]."""
    a, b = ins
    batch = result.shape[:-2]
    nb = len(batch)
    i, j, k = D(nb), D(nb + 1), D(nb + 2)
    return IterationSpace(
        extents=batch + (a.shape[-2], b.shape[-1], a.shape[-1]),
        kinds=(PARALLEL,) * (nb + 2) + (REDUCTION,),
        inputs=(AffineMap(tuple(_batch_map(a.shape[:-2], batch) + [i, k])),
                AffineMap(tuple(_batch_map(b.shape[:-2], batch) + [k, j]))),
        outputs=(AffineMap(tuple(D(d) for d in range(nb)) + (i, j)),),
        body=(call("add", Acc(), call("mul", Arg(0), Arg(1))),),
        init=(0.0,),
    )


register(OpDef(
    name="matmul", category=CONTRACTION, arity=(2, 2), doc="A[..., M, K] @ B[..., K, N], batch dims broadcast",
    infer_fn=_matmul_infer, space_fn=matmul_space,
    reference_fn=lambda a, attrs, r: np.matmul(a[0], a[1]),
))
register(OpDef(
    name="batch_matmul", category=CONTRACTION, arity=(2, 2), doc="A[B, M, K] @ B[B, K, N]",
    infer_fn=lambda ins, attrs: _matmul_infer(ins, attrs, strict_batch=True), space_fn=matmul_space,
    reference_fn=lambda a, attrs, r: np.einsum("bmk,bkn->bmn", a[0], a[1]),
))


# ----- windows: shared output-size arithmetic -------------------------------------------------
def window_out(size: int, kernel: int, stride: int, pad: int, dilation: int = 1, pad_end: int | None = None) -> int:
    """Output positions along one axis (`pad` before the input, `pad_end` after it: `pad` unless given)."""
    pad_end = pad if pad_end is None else pad_end
    return (size + pad + pad_end - dilation * (kernel - 1) - 1) // stride + 1


def _windows(x: np.ndarray, kernel, stride, padding, dilation, pad_value, padding_end=None) -> np.ndarray:
    """[N, C, H, W] -> [N, C, OH, OW, KH, KW] view of the padded input's windows."""
    (ph, pw), (kh, kw), (sh, sw), (dh, dw) = padding, kernel, stride, dilation
    eh, ew = padding if padding_end is None else padding_end
    padded = np.pad(x, ((0, 0), (0, 0), (ph, eh), (pw, ew)), constant_values=pad_value)
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    view = np.lib.stride_tricks.sliding_window_view(padded, (span_h, span_w), axis=(2, 3))
    return view[:, :, ::sh, ::sw, ::dh, ::dw]


# ----- conv2d ---------------------------------------------------------------------------------
CONV_ATTRS = (AttrSpec("stride", "pair", (1, 1)), AttrSpec("padding", "pair", (0, 0)),
              AttrSpec("dilation", "pair", (1, 1)), AttrSpec("groups", "int", 1),
              AttrSpec("padding_end", "pair", None))  # zeros after the input (None: `padding`, symmetric)


def conv_padding_end(attrs) -> tuple[int, int]:
    """A conv2d's zeros after the input per spatial axis: `padding_end`, else `padding` (symmetric)."""
    return tuple(attrs["padding"] if attrs.get("padding_end") is None else attrs["padding_end"])


def _conv_infer(in_types, attrs):
    x, w = in_types
    same_dtype(in_types)
    shown = f"input {x.compact()}, weight {w.compact()}"
    if x.rank != 4 or w.rank != 4:
        raise ValueError(f"needs input [N,C,H,W] and weight [F,C/groups,KH,KW]: {shown}")
    groups = attrs["groups"]
    if groups < 1 or x.shape[1] % groups or w.shape[0] % groups:
        raise ValueError(f"groups={groups} must divide input channels {x.shape[1]} and filters {w.shape[0]}")
    if w.shape[1] * groups != x.shape[1]:
        raise ValueError(f"weight has {w.shape[1]} channels per group, input has "
                         f"{x.shape[1]} channels in {groups} group(s): {shown}")
    end = conv_padding_end(attrs)
    if min(attrs["stride"]) < 1 or min(attrs["dilation"]) < 1 or min(*attrs["padding"], *end) < 0:
        raise ValueError("stride and dilation must be positive and padding non-negative")
    out_hw = [window_out(x.shape[2 + a], w.shape[2 + a], attrs["stride"][a], attrs["padding"][a],
                         attrs["dilation"][a], end[a]) for a in (0, 1)]
    if min(out_hw) < 1:
        raise ValueError(f"kernel larger than padded input: {shown}")
    return TensorType((x.shape[0], w.shape[0], *out_hw), x.dtype)


def conv2d_space(ins, attrs, result: TensorType) -> IterationSpace:
    """Loops (n, g, f, oh, ow, c, kh, kw): channel index g*Cg + c keeps groups affine."""
    x, w = ins
    groups = attrs["groups"]
    (sh, sw), (ph, pw), (dh, dw) = attrs["stride"], attrs["padding"], attrs["dilation"]
    cg, fg = x.shape[1] // groups, w.shape[0] // groups
    n, g, f, oh, ow, c, kh, kw = (D(i) for i in range(8))
    return IterationSpace(
        extents=(x.shape[0], groups, fg, result.shape[2], result.shape[3], cg, w.shape[2], w.shape[3]),
        kinds=(PARALLEL,) * 5 + (REDUCTION,) * 3,
        inputs=(AffineMap((n, g * cg + c, oh * sh + kh * dh + (-ph), ow * sw + kw * dw + (-pw)), pad=0.0),
                AffineMap((g * fg + f, c, kh, kw))),
        outputs=(AffineMap((n, g * fg + f, oh, ow)),),
        body=(call("add", Acc(), call("mul", Arg(0), Arg(1))),),
        init=(0.0,),
    )


def _conv_reference(arrays, attrs, result):
    x, w = arrays
    groups = attrs["groups"]
    windows = _windows(x, w.shape[2:], attrs["stride"], attrs["padding"], attrs["dilation"], 0, conv_padding_end(attrs))
    n, c, oh, ow, kh, kw = windows.shape
    windows = windows.reshape(n, groups, c // groups, oh, ow, kh, kw)
    weights = w.reshape(groups, w.shape[0] // groups, c // groups, kh, kw)
    out = np.einsum("ngchwyx,gfcyx->ngfhw", windows, weights, dtype=np.float64)
    return out.reshape(result.shape)


register(OpDef(
    name="conv2d", category=WINDOW, arity=(2, 2), attrs=CONV_ATTRS,
    doc="2-D convolution, NCHW input, [F, C/groups, KH, KW] weight, no bias; `padding` zeros before the input "
        "and `padding_end` after it (default: `padding`)",
    infer_fn=_conv_infer, space_fn=conv2d_space, reference_fn=_conv_reference,
))


# ----- pooling --------------------------------------------------------------------------------
def lowest(dtype: np.dtype):
    """The padding value max pooling ignores: -inf, or the smallest integer, or False."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    return False if dtype == np.bool_ else -np.inf


POOL_ATTRS = (AttrSpec("kernel", "pair"), AttrSpec("stride", "pair", None), AttrSpec("padding", "pair", (0, 0)))


def _pool_normalize(in_types, attrs):
    if attrs["stride"] is None:
        attrs["stride"] = attrs["kernel"]
    return attrs


def _pool_infer(in_types, attrs, float_only=False):
    (x,) = in_types
    if float_only and not x.dtype.is_float:
        raise ValueError(f"needs a floating-point operand, got {x.compact()}")
    if x.rank != 4:
        raise ValueError(f"needs an [N,C,H,W] input, got {x.compact()}")
    (kh, kw), (sh, sw), (ph, pw) = attrs["kernel"], attrs["stride"], attrs["padding"]
    if min(kh, kw, sh, sw) < 1 or min(ph, pw) < 0:
        raise ValueError("kernel and stride must be positive and padding non-negative")
    if ph > kh // 2 or pw > kw // 2:
        raise ValueError(f"padding {[ph, pw]} must be at most half the kernel {[kh, kw]}")
    out_hw = (window_out(x.shape[2], kh, sh, ph), window_out(x.shape[3], kw, sw, pw))
    if min(out_hw) < 1:
        raise ValueError(f"kernel {[kh, kw]} larger than padded input {x.compact()}")
    return x.with_shape(x.shape[:2] + out_hw)


def pool_space(ins, attrs, result, update, init, pad) -> IterationSpace:
    (sh, sw), (ph, pw) = attrs["stride"], attrs["padding"]
    n, c, oh, ow, kh, kw = (D(i) for i in range(6))
    return IterationSpace(
        extents=result.shape + tuple(attrs["kernel"]),
        kinds=(PARALLEL,) * 4 + (REDUCTION,) * 2,
        inputs=(AffineMap((n, c, oh * sh + kh + (-ph), ow * sw + kw + (-pw)), pad=pad),),
        outputs=(AffineMap((n, c, oh, ow)),),
        body=(update,),
        init=(init,),
    )


register(OpDef(
    name="max_pool2d", category=WINDOW, arity=(1, 1), attrs=POOL_ATTRS, doc="max over KHxKW windows",
    normalize_fn=_pool_normalize, infer_fn=_pool_infer,
    space_fn=lambda ins, attrs, r: pool_space(ins, attrs, r, call("max", Acc(), Arg(0)), -math.inf, -math.inf),
    reference_fn=lambda a, attrs, r: _windows(a[0], attrs["kernel"], attrs["stride"], attrs["padding"], (1, 1),
                                              lowest(a[0].dtype)).max(axis=(4, 5)),
))


def _avg_update(attrs):
    return call("add", Acc(), call("mul", Arg(0), 1.0 / math.prod(attrs["kernel"])))


register(OpDef(
    name="avg_pool2d", category=WINDOW, arity=(1, 1), attrs=POOL_ATTRS,
    doc="mean over KHxKW windows; padding counts as zeros (count_include_pad)",
    normalize_fn=_pool_normalize, infer_fn=lambda ins, attrs: _pool_infer(ins, attrs, float_only=True),
    space_fn=lambda ins, attrs, r: pool_space(ins, attrs, r, _avg_update(attrs), 0.0, 0.0),
    reference_fn=lambda a, attrs, r: _windows(a[0], attrs["kernel"], attrs["stride"], attrs["padding"], (1, 1),
                                              0).mean(axis=(4, 5), dtype=np.float64),
))
