"""Reductions over axes (sum, max, min, mean), with keepdims."""
from __future__ import annotations

import math

import numpy as np

from ..structured import PARALLEL, REDUCTION, AffineExpr, AffineMap, Acc, Arg, IterationSpace, call
from .registry import REDUCTION as REDUCTION_CATEGORY
from .registry import AttrSpec, OpDef, normalize_axes, register

REDUCE_ATTRS = (AttrSpec("axes", "axes", None), AttrSpec("keepdims", "bool", False))


def _normalize(in_types, attrs):
    attrs["axes"] = normalize_axes(attrs["axes"], in_types[0].rank)
    return attrs


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if a in axes else s for a, s in enumerate(shape))
    return tuple(s for a, s in enumerate(shape) if a not in axes)


def _infer(in_types, attrs, float_only=False):
    (x,) = in_types
    if float_only and not x.dtype.is_float:
        raise ValueError(f"needs a floating-point operand, got {x.compact()}")
    return x.with_shape(reduced_shape(x.shape, attrs["axes"], attrs["keepdims"]))


def reduction_space(shape, axes, keepdims, update, init) -> IterationSpace:
    out_exprs = []
    for axis in range(len(shape)):
        if axis not in axes:
            out_exprs.append(AffineExpr.dim(axis))
        elif keepdims:
            out_exprs.append(AffineExpr.constant(0))
    return IterationSpace(
        extents=tuple(shape),
        kinds=tuple(REDUCTION if a in axes else PARALLEL for a in range(len(shape))),
        inputs=(AffineMap.identity(len(shape)),),
        outputs=(AffineMap(tuple(out_exprs)),),
        body=(update,),
        init=(init,),
    )


def _reduction(name: str, update, init: float, reference, doc: str, float_only: bool = False) -> None:
    def space(ins, attrs, result):
        (x,) = ins
        body = update(x, attrs) if callable(update) else update
        return reduction_space(x.shape, attrs["axes"], attrs["keepdims"], body, init)

    register(OpDef(
        name=name, category=REDUCTION_CATEGORY, arity=(1, 1), attrs=REDUCE_ATTRS, doc=doc,
        normalize_fn=_normalize, infer_fn=lambda ins, attrs: _infer(ins, attrs, float_only), space_fn=space,
        reference_fn=lambda a, attrs, r: reference(a[0], axis=attrs["axes"], keepdims=attrs["keepdims"]),
    ))


def _mean_update(x, attrs):
    count = math.prod(x.shape[a] for a in attrs["axes"])
    return call("add", Acc(), call("mul", Arg(0), 1.0 / max(count, 1)))


_reduction("sum", call("add", Acc(), Arg(0)), 0.0, np.sum, "sum over axes")
_reduction("max", call("max", Acc(), Arg(0)), -math.inf, np.max, "maximum over axes")
_reduction("min", call("min", Acc(), Arg(0)), math.inf, np.min, "minimum over axes")
_reduction("mean", _mean_update, 0.0, lambda a, axis, keepdims: np.mean(a, axis=axis, keepdims=keepdims, dtype=np.float64),
           "arithmetic mean over axes", float_only=True)
