"""Converters for neural-network layers: `torch.nn` modules, `torch.nn.functional` and their ATen ops.

Layers map to the IR's structured and composite ops: linear -> matmul with the transposed weight
plus a bias add; conv2d gets its bias as a reshaped [C, 1, 1] add; adaptive average pooling is an
avg_pool2d when the sizes divide, else separable slice-means; attention layers map to `attention`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from tilegraph.ir import DType, Value

from .context import ConvertContext, Missing, Unsupported, ir_dtype
from .ops_tensor import A, matmul_values, pad, slice_axis
from .registry import converts, optional


def _pair(value, name: str) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    value = tuple(value)
    if len(value) == 1:
        return (value[0], value[0])
    if len(value) != 2:
        raise Unsupported(f"{name}={list(value)} (expected one or two values)")
    return value


def _batched(cx: ConvertContext, x: Value, rank: int) -> Value:
    """Add the batch dim torch allows leaving out (a [C, H, W] image is one [1, C, H, W])."""
    if x.type.rank == rank - 1:
        return cx.reshape(x, (1,) + x.shape)
    if x.type.rank != rank:
        raise Unsupported(f"a rank-{x.type.rank} input (expected rank {rank - 1} or {rank})")
    return x


def _bind(names, args, kwargs, **defaults) -> dict:
    """Positional and keyword arguments by name, for ops whose torch and ATen signatures differ."""
    bound = dict(defaults)
    bound.update(zip(names, args))
    bound.update(kwargs)
    missing = [n for n in names if n not in bound]
    if missing:
        raise Unsupported(f"missing argument(s) {', '.join(missing)}")
    return bound


def _channel_bias(cx: ConvertContext, y: Value, bias: Value | None) -> Value:
    if bias is None:
        return y
    return cx.b.add(y, cx.reshape(cx.value(bias), (bias.shape[0],) + (1,) * (y.type.rank - 2)))


# ----- linear ---------------------------------------------------------------------------------------
def linear_values(cx: ConvertContext, x: Value, weight: Value, bias: Value | None, out_shape) -> Value:
    """x @ weight^T + bias, for an nn.Linear-style [out, in] weight."""
    w_t = cx.transpose(weight, (1, 0)) if weight.type.rank == 2 else weight
    y = matmul_values(cx, x, w_t, out_shape)
    return y if bias is None else cx.b.add(y, cx.value(bias))


@converts(F.linear, A("linear"))
def linear(cx, x, weight, bias=None):
    return linear_values(cx, cx.value(x), cx.value(weight), bias, cx.out_shape)


@converts(nn.Linear)
def linear_module(cx, m, x):
    return linear_values(cx, cx.value(x), cx.module_param(m, "weight"), cx.module_param(m, "bias"), cx.out_shape)


@converts(nn.Identity)
def identity_module(cx, m, x, *args, **kwargs):
    return cx.value(x)


# ----- convolution ----------------------------------------------------------------------------------
def _conv_padding(padding, kernel, dilation) -> tuple[tuple[int, int], tuple[int, int] | None]:
    """(zeros before, zeros after or None when the same) per spatial axis; 'same' with an even effective
    kernel pads one more after, as torch does."""
    if padding == "valid":
        return (0, 0), None
    if padding == "same":
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        begin = tuple(t // 2 for t in total)
        end = tuple(t - b for t, b in zip(total, begin))
        return begin, (None if end == begin else end)
    return _pair(padding, "padding"), None


def conv2d_values(cx, x, weight, bias, stride=1, padding=0, dilation=1, groups=1) -> Value:
    x = cx.value(x)
    weight = cx.value(weight)
    dilation = _pair(dilation, "dilation")
    padding, padding_end = _conv_padding(padding, weight.shape[2:], dilation)
    y = cx.b.conv2d(_batched(cx, x, 4), weight, stride=_pair(stride, "stride"), padding=padding,
                    dilation=dilation, groups=groups, padding_end=padding_end)
    return cx.reshape(_channel_bias(cx, y, bias), cx.out_shape)


def conv1d_values(cx, x, weight, bias, stride=1, padding=0, dilation=1, groups=1) -> Value:
    """conv1d as a conv2d over [N, C, 1, L]."""
    x = cx.value(x)
    weight = cx.value(weight)
    x = _batched(cx, x, 3)
    (stride,), (dilation,) = _single(stride), _single(dilation)
    begin, end = _conv_padding(padding if isinstance(padding, str) else (0, *_single(padding)),
                               (1, weight.shape[2]), (1, dilation))
    y = cx.b.conv2d(cx.reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2])),
                    cx.reshape(weight, (weight.shape[0], weight.shape[1], 1, weight.shape[2])),
                    stride=(1, stride), padding=(0, begin[1]), dilation=(1, dilation), groups=groups,
                    padding_end=None if end is None else (0, end[1]))
    return cx.reshape(_channel_bias(cx, y, bias), cx.out_shape)


def _single(value) -> tuple[int]:
    value = (value,) if isinstance(value, int) else tuple(value)
    if len(value) != 1:
        raise Unsupported(f"{list(value)} for a 1-d convolution")
    return value


@converts(F.conv2d, A("conv2d"))
def conv2d(cx, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv2d_values(cx, x, weight, bias, stride, padding, dilation, groups)


@converts(F.conv1d, A("conv1d"))
def conv1d(cx, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv1d_values(cx, x, weight, bias, stride, padding, dilation, groups)


@converts(A("convolution"))
def convolution(cx, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        raise Unsupported("transposed convolution")
    convert = {3: conv1d_values, 4: conv2d_values}.get(weight.type.rank)
    if convert is None:
        raise Unsupported(f"a {weight.type.rank - 2}-d convolution")
    return convert(cx, x, weight, bias, stride, padding, dilation, groups)


def _conv_module(convert):
    def convert_module(cx, m, x):
        if m.padding_mode != "zeros":
            raise Unsupported(f"padding_mode={m.padding_mode!r}")
        return convert(cx, x, cx.module_param(m, "weight"), cx.module_param(m, "bias"), m.stride, m.padding,
                       m.dilation, m.groups)

    return convert_module


converts(nn.Conv2d)(_conv_module(conv2d_values))
converts(nn.Conv1d)(_conv_module(conv1d_values))


# ----- normalisation --------------------------------------------------------------------------------
def batch_norm_values(cx, x, mean, var, weight, bias, eps) -> Value:
    x = cx.value(x)
    if mean is None or var is None:
        raise Unsupported("batch norm without running statistics (batch statistics at inference)")
    if x.type.rank < 2:
        raise Unsupported(f"batch norm of a rank-{x.type.rank} input")
    operands = [cx.value(mean, x.dtype), cx.value(var, x.dtype)]
    if weight is not None:
        operands.append(cx.value(weight, x.dtype))
        if bias is not None:
            operands.append(cx.value(bias, x.dtype))
    y = cx.b.batch_norm(x, *operands, eps=float(eps))
    return _channel_bias(cx, y, bias) if weight is None else y


@converts(F.batch_norm, torch.batch_norm, A("batch_norm"))
def batch_norm(cx, x, *args, **kwargs):
    if cx.node.target is F.batch_norm:
        bound = _bind(("running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"), args, kwargs,
                      weight=None, bias=None, training=False, momentum=0.1, eps=1e-5)
    else:  # aten.batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn)
        bound = _bind(("weight", "bias", "running_mean", "running_var", "training", "momentum", "eps",
                       "cudnn_enabled"), args, kwargs)
    if bound["training"]:
        raise Unsupported("batch norm in training mode (call model.eval() first)")
    return batch_norm_values(cx, x, bound["running_mean"], bound["running_var"], bound["weight"], bound["bias"],
                             bound["eps"])


@converts(A("_native_batch_norm_legit_no_training"))
def native_batch_norm_no_training(cx, x, weight, bias, running_mean, running_var, momentum, eps):
    y = batch_norm_values(cx, x, running_mean, running_var, weight, bias, eps)
    saved = Missing("the saved statistics of native batch norm")
    return (y, saved, saved)


@converts(nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
def batch_norm_module(cx, m, x):
    if m.training and m.track_running_stats:
        raise Unsupported(f"{type(m).__name__} in training mode (call model.eval() first)")
    if m.running_mean is None:
        raise Unsupported(f"{type(m).__name__} without running statistics (track_running_stats=False)")
    return batch_norm_values(cx, x, cx.module_param(m, "running_mean"), cx.module_param(m, "running_var"),
                             cx.module_param(m, "weight"), cx.module_param(m, "bias"), m.eps)


def layer_norm_values(cx, x, normalized_shape, weight, bias, eps) -> Value:
    x = cx.value(x)
    axes = tuple(range(x.type.rank - len(tuple(normalized_shape)), x.type.rank))
    if weight is None:
        y = cx.b.layer_norm(x, axes=axes, eps=float(eps))
        return y if bias is None else cx.b.add(y, cx.value(bias, x.dtype))
    operands = [cx.value(weight, x.dtype)] + ([cx.value(bias, x.dtype)] if bias is not None else [])
    return cx.b.layer_norm(x, *operands, axes=axes, eps=float(eps))


@converts(F.layer_norm, torch.layer_norm, A("layer_norm"))
def layer_norm(cx, x, normalized_shape, weight=None, bias=None, eps=1e-5, *rest):
    return layer_norm_values(cx, x, normalized_shape, weight, bias, eps)


@converts(A("native_layer_norm"))
def native_layer_norm(cx, x, normalized_shape, weight, bias, eps):
    """(y, mean, 1/std) as torch saves them for the backward (the statistics are dead code unless used)."""
    y = layer_norm_values(cx, x, normalized_shape, weight, bias, eps)
    x = cx.cast(cx.value(x), ir_dtype(cx.expected[1].dtype))  # in the dtype torch gives the statistics
    axes = tuple(range(x.type.rank - len(tuple(normalized_shape)), x.type.rank))
    mean = cx.b.mean(x, axes=axes, keepdims=True)
    centered = cx.b.sub(x, mean)
    variance = cx.b.mean(cx.b.mul(centered, centered), axes=axes, keepdims=True)
    rstd = cx.b.rsqrt(cx.b.add(variance, cx.value(float(eps), x.dtype)))
    return (y, mean, rstd)


@converts(nn.LayerNorm)
def layer_norm_module(cx, m, x):
    return layer_norm_values(cx, x, m.normalized_shape, cx.module_param(m, "weight"), cx.module_param(m, "bias"),
                             m.eps)


def rms_norm_values(cx, x, normalized_shape, weight, eps) -> Value:
    x = cx.value(x)
    if eps is None:
        eps = torch.finfo(cx.primary.dtype).eps
    axes = tuple(range(x.type.rank - len(tuple(normalized_shape)), x.type.rank))
    operands = [cx.value(weight, x.dtype)] if weight is not None else []
    return cx.b.rms_norm(x, *operands, axes=axes, eps=float(eps))


@converts(optional(F, "rms_norm"), A("rms_norm"))
def rms_norm(cx, x, normalized_shape, weight=None, eps=None):
    return rms_norm_values(cx, x, normalized_shape, weight, eps)


@converts(optional(nn, "RMSNorm"))
def rms_norm_module(cx, m, x):
    return rms_norm_values(cx, x, m.normalized_shape, cx.module_param(m, "weight"), m.eps)


def group_norm_values(cx, x, groups: int, weight, bias, eps) -> Value:
    """Normalise each group of channels over its channels and positions (a layer norm of the grouped
    view), then scale and shift per channel."""
    x = cx.value(x)
    if x.type.rank < 2 or x.shape[1] % groups:
        raise Unsupported(f"group norm of {x.type} with {groups} groups (channels must divide evenly)")
    batch, channels = x.shape[:2]
    grouped = cx.reshape(x, (batch, groups, x.type.numel // (batch * groups)))
    y = cx.reshape(cx.b.layer_norm(grouped, axes=(2,), eps=float(eps)), x.shape)
    per_channel = (channels,) + (1,) * (x.type.rank - 2)
    if weight is not None:
        y = cx.b.mul(y, cx.reshape(cx.value(weight, x.dtype), per_channel))
    if bias is not None:
        y = cx.b.add(y, cx.reshape(cx.value(bias, x.dtype), per_channel))
    return y


@converts(F.group_norm, torch.group_norm, A("group_norm"))
def group_norm(cx, x, num_groups, weight=None, bias=None, eps=1e-5, *rest):
    return group_norm_values(cx, x, num_groups, weight, bias, eps)


@converts(A("native_group_norm"))
def native_group_norm(cx, x, weight, bias, n, c, hw, groups, eps):
    saved = Missing("the saved statistics of native group norm")
    return (group_norm_values(cx, x, groups, weight, bias, eps), saved, saved)


@converts(nn.GroupNorm)
def group_norm_module(cx, m, x):
    return group_norm_values(cx, x, m.num_groups, cx.module_param(m, "weight"), cx.module_param(m, "bias"), m.eps)


def weight_norm_value(cx, v, g, dim: int) -> Value:
    """v * g / ||v||, the norm over every axis but `dim` (over all of them for dim -1)."""
    v = cx.value(v)
    g = cx.value(g, v.dtype)
    rank = v.type.rank
    axes = tuple(range(rank)) if dim == -1 else tuple(a for a in range(rank) if a != dim % rank)
    norm = cx.b.sqrt(cx.b.sum(cx.b.mul(v, v), axes=axes, keepdims=True))
    return cx.b.mul(v, cx.b.div(g, norm))


@converts(optional(torch, "_weight_norm"), A("_weight_norm"))
def weight_norm(cx, v, g, dim=0):
    return weight_norm_value(cx, v, g, dim)


@converts(A("_weight_norm_interface"))
def weight_norm_interface(cx, v, g, dim=0):
    return (weight_norm_value(cx, v, g, dim), Missing("the norms of weight norm"))


@converts(F.normalize)
def normalize(cx, x, p=2.0, dim=1, eps=1e-12, out=None):
    if p != 2:
        raise Unsupported(f"normalize with p={p} (only p=2)")
    x = cx.value(x, cx.out_dtype)
    norm = cx.b.sqrt(cx.b.sum(cx.b.mul(x, x), axes=(dim,), keepdims=True))
    return cx.b.div(x, cx.b.maximum(norm, cx.value(float(eps), x.dtype)))


# ----- embedding and dropout ------------------------------------------------------------------------
def embedding_values(cx, weight, indices, max_norm=None) -> Value:
    if max_norm is not None:
        raise Unsupported("embedding with max_norm (renormalises the weights in place)")
    indices = cx.value(indices)
    if not indices.dtype.is_int:
        raise Unsupported(f"embedding indices of dtype {indices.dtype}")
    return cx.b.gather(cx.value(weight), indices, axis=0)


@converts(F.embedding)
def embedding(cx, x, weight, padding_idx=None, max_norm=None, *args, **kwargs):
    return embedding_values(cx, weight, x, max_norm)


@converts(torch.embedding, A("embedding"))
def aten_embedding(cx, weight, indices, *args):
    return embedding_values(cx, weight, indices)


@converts(nn.Embedding)
def embedding_module(cx, m, x):
    return embedding_values(cx, cx.module_param(m, "weight"), x, m.max_norm)


def _dropout(cx, x, p, training) -> Value:
    if training and p > 0:
        raise Unsupported(f"dropout in training mode (p={p}); call model.eval(), or pass training=self.training "
                          "to F.dropout")
    return cx.value(x)


@converts(F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, torch.dropout, torch.alpha_dropout, torch.feature_dropout,
          torch.feature_alpha_dropout, A("dropout"), A("alpha_dropout"), A("feature_dropout"),
          A("feature_alpha_dropout"))
def dropout(cx, x, p=0.5, training=True, inplace=False, *, train=None):
    return _dropout(cx, x, p, training if train is None else train)


@converts(F.alpha_dropout, F.feature_alpha_dropout)  # these default to training=False
def alpha_dropout(cx, x, p=0.5, training=False, inplace=False):
    return _dropout(cx, x, p, training)


@converts(A("native_dropout"))
def native_dropout(cx, x, p, train):
    return (_dropout(cx, x, p, train), Missing("the mask of native dropout"))


@converts(nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
def dropout_module(cx, m, x):
    return _dropout(cx, x, m.p, m.training)


# ----- activations ----------------------------------------------------------------------------------
def _activation(op: str, functions=(), modules=(), **fixed) -> None:
    def convert(cx, x, *args, **kwargs):
        return cx.b.op(op, cx.value(x, cx.out_dtype), **fixed)

    def convert_module(cx, m, x):
        return cx.b.op(op, cx.value(x, cx.out_dtype), **fixed)

    convert.__name__ = op
    converts(*functions)(convert)
    converts(*modules)(convert_module)


_activation("relu", (torch.relu, torch.relu_, F.relu, F.relu_, "relu", "relu_", A("relu"), A("relu_")), (nn.ReLU,))
_activation("relu6", (F.relu6, optional(torch._C._nn, "relu6"), A("relu6")), ())
_activation("silu", (F.silu, optional(torch._C._nn, "silu"), "silu", A("silu"), A("silu_")), (nn.SiLU,))
_activation("tanh", (), (nn.Tanh,))
_activation("sigmoid", (), (nn.Sigmoid,))


def gelu_value(cx, x, approximate="none") -> Value:
    return cx.b.gelu(cx.value(x, cx.out_dtype), approximate=approximate)


@converts(F.gelu, "gelu", A("gelu"))
def gelu(cx, x, approximate="none"):
    return gelu_value(cx, x, approximate)


@converts(nn.GELU)
def gelu_module(cx, m, x):
    return gelu_value(cx, x, m.approximate)


def hardtanh_value(cx, x, low, high) -> Value:
    x = cx.value(x, cx.out_dtype)
    if (low, high) == (0, 6):
        return cx.b.relu6(x)
    if (low, high) == (0, math.inf):
        return cx.b.relu(x)
    return cx.b.minimum(cx.b.maximum(x, cx.value(float(low), x.dtype)), cx.value(float(high), x.dtype))


@converts(F.hardtanh, F.hardtanh_, optional(torch._C._nn, "hardtanh"), A("hardtanh"), A("hardtanh_"))
def hardtanh(cx, x, min_val=-1.0, max_val=1.0, inplace=False):
    return hardtanh_value(cx, x, min_val, max_val)


@converts(nn.Hardtanh)  # nn.ReLU6 is a Hardtanh(0, 6)
def hardtanh_module(cx, m, x):
    return hardtanh_value(cx, x, m.min_val, m.max_val)


def leaky_relu_value(cx, x, slope) -> Value:
    x = cx.value(x, cx.out_dtype)
    return cx.b.where(cx.b.gt(x, cx.value(0.0, x.dtype)), x, cx.b.mul(x, cx.value(float(slope), x.dtype)))


@converts(F.leaky_relu, optional(torch._C._nn, "leaky_relu"), A("leaky_relu"))
def leaky_relu(cx, x, negative_slope=0.01, inplace=False):
    return leaky_relu_value(cx, x, negative_slope)


@converts(nn.LeakyReLU)
def leaky_relu_module(cx, m, x):
    return leaky_relu_value(cx, x, m.negative_slope)


def elu_value(cx, x, alpha=1.0, scale=1.0, input_scale=1.0) -> Value:
    """scale * (x if x > 0 else alpha * expm1(input_scale * x)): ELU, SELU and CELU."""
    x = cx.value(x, cx.out_dtype)
    inner = x if input_scale == 1 else cx.b.mul(x, cx.value(float(input_scale), x.dtype))
    negative = cx.b.mul(cx.b.expm1(inner), cx.value(float(alpha), x.dtype))
    y = cx.b.where(cx.b.gt(x, cx.value(0.0, x.dtype)), x, negative)
    return y if scale == 1 else cx.b.mul(y, cx.value(float(scale), x.dtype))


SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805


@converts(F.elu, F.elu_, optional(torch._C._nn, "elu"), A("elu"))
def elu(cx, x, alpha=1.0, inplace=False, scale=1.0, input_scale=1.0):
    return elu_value(cx, x, alpha, scale, input_scale)


@converts(F.selu, torch.selu, A("selu"))
def selu(cx, x, inplace=False):
    return elu_value(cx, x, SELU_ALPHA, SELU_SCALE)


@converts(F.celu, torch.celu, A("celu"))
def celu(cx, x, alpha=1.0, inplace=False):
    return elu_value(cx, x, alpha, 1.0, 1.0 / alpha)


@converts(nn.ELU)
def elu_module(cx, m, x):
    return elu_value(cx, x, m.alpha)


@converts(nn.SELU)
def selu_module(cx, m, x):
    return elu_value(cx, x, SELU_ALPHA, SELU_SCALE)


@converts(nn.CELU)
def celu_module(cx, m, x):
    return elu_value(cx, x, m.alpha, 1.0, 1.0 / m.alpha)


def softplus_value(cx, x, beta=1.0, threshold=20.0) -> Value:
    """log1p(exp(beta x)) / beta, and x itself where beta x > threshold (as torch)."""
    x = cx.value(x, cx.out_dtype)
    scaled = x if beta == 1 else cx.b.mul(x, cx.value(float(beta), x.dtype))
    soft = cx.b.log1p(cx.b.exp(scaled))
    if beta != 1:
        soft = cx.b.div(soft, cx.value(float(beta), x.dtype))
    return cx.b.where(cx.b.gt(scaled, cx.value(float(threshold), x.dtype)), x, soft)


@converts(F.softplus, optional(torch._C._nn, "softplus"), A("softplus"))
def softplus(cx, x, beta=1.0, threshold=20.0):
    return softplus_value(cx, x, beta, threshold)


@converts(nn.Softplus)
def softplus_module(cx, m, x):
    return softplus_value(cx, x, m.beta, m.threshold)


def mish_value(cx, x) -> Value:
    x = cx.value(x, cx.out_dtype)
    return cx.b.mul(x, cx.b.tanh(softplus_value(cx, x)))


@converts(F.mish, optional(torch._C._nn, "mish"), A("mish"))
def mish(cx, x, inplace=False):
    return mish_value(cx, x)


@converts(nn.Mish)
def mish_module(cx, m, x):
    return mish_value(cx, x)


def log_sigmoid_value(cx, x) -> Value:
    """min(x, 0) - log1p(exp(-|x|)): no overflow for large |x|."""
    x = cx.value(x, cx.out_dtype)
    zero = cx.value(0.0, x.dtype)
    return cx.b.sub(cx.b.minimum(x, zero), cx.b.log1p(cx.b.exp(cx.b.neg(cx.b.abs(x)))))


@converts(F.logsigmoid, optional(torch._C._nn, "log_sigmoid"), A("log_sigmoid"))
def log_sigmoid(cx, x):
    return log_sigmoid_value(cx, x)


@converts(nn.LogSigmoid)
def log_sigmoid_module(cx, m, x):
    return log_sigmoid_value(cx, x)


def hardsigmoid_value(cx, x) -> Value:
    x = cx.value(x, cx.out_dtype)
    return cx.b.div(cx.b.relu6(cx.b.add(x, cx.value(3.0, x.dtype))), cx.value(6.0, x.dtype))


@converts(F.hardsigmoid, optional(torch._C._nn, "hardsigmoid"), A("hardsigmoid"))
def hardsigmoid(cx, x, inplace=False):
    return hardsigmoid_value(cx, x)


@converts(F.hardswish, optional(torch._C._nn, "hardswish"), A("hardswish"))
def hardswish(cx, x, inplace=False):
    return cx.b.mul(cx.value(x, cx.out_dtype), hardsigmoid_value(cx, x))


@converts(nn.Hardsigmoid)
def hardsigmoid_module(cx, m, x):
    return hardsigmoid_value(cx, x)


@converts(nn.Hardswish)
def hardswish_module(cx, m, x):
    return cx.b.mul(cx.value(x, cx.out_dtype), hardsigmoid_value(cx, x))


# ----- softmax --------------------------------------------------------------------------------------
def softmax_value(cx, op: str, x, dim) -> Value:
    x = cx.value(x, cx.out_dtype)
    if dim is None:  # torch's legacy implicit dim
        dim = 0 if x.type.rank in (0, 1, 3) else 1
    if x.type.rank == 0:
        raise Unsupported(f"{op} of a scalar")
    return cx.b.op(op, x, axis=dim)


@converts(torch.softmax, F.softmax, "softmax", A("softmax"), A("_softmax"))
def softmax(cx, x, dim=None, *args, **kwargs):
    return softmax_value(cx, "softmax", x, dim)


@converts(torch.log_softmax, F.log_softmax, "log_softmax", A("log_softmax"), A("_log_softmax"))
def log_softmax(cx, x, dim=None, *args, **kwargs):
    return softmax_value(cx, "log_softmax", x, dim)


@converts(nn.Softmax)
def softmax_module(cx, m, x):
    return softmax_value(cx, "softmax", x, m.dim)


@converts(nn.LogSoftmax)
def log_softmax_module(cx, m, x):
    return softmax_value(cx, "log_softmax", x, m.dim)


# ----- pooling --------------------------------------------------------------------------------------
def _floor_size(size, kernel, stride, padding, dilation=1) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _ceil_extra(size: int, out: int, kernel: int, stride: int, padding: int) -> int:
    """Elements to append so that floor-mode pooling gives `out` windows (ceil_mode's last window)."""
    return max(0, (out - 1) * stride + kernel - (size + 2 * padding))


def _pad_after(cx, x: Value, extra: tuple[int, int], fill: float) -> Value:
    for axis, amount in zip((2, 3), extra):
        if amount:
            shape = x.shape[:axis] + (amount,) + x.shape[axis + 1:]
            x = cx.b.concat(x, cx.b.constant(fill, x.dtype, shape), axis=axis)
    return x


def pool_values(cx, op, x, kernel_size, stride, padding, ceil_mode, dilation=1, count_include_pad=True,
                divisor_override=None, out_hw=None) -> Value:
    """Max or average pooling to torch's output size. ceil_mode's partial last windows pool over an
    input extended with -inf (max) or zeros (average, then rescaled to torch's divisor)."""
    x = cx.value(x)
    kernel = _pair(kernel_size, "kernel_size")
    stride = _pair(stride, "stride") if stride not in (None, []) else kernel
    padding = _pair(padding, "padding")
    if _pair(dilation, "dilation") != (1, 1):
        raise Unsupported(f"{op} with dilation {dilation}")
    if divisor_override is not None:
        raise Unsupported(f"{op} with divisor_override")
    batched = _batched(cx, x, 4)
    out_hw = tuple(out_hw or cx.out_shape[-2:])
    extra = tuple(_ceil_extra(batched.shape[2 + a], out_hw[a], kernel[a], stride[a], padding[a]) for a in (0, 1))
    fill = 0.0 if op == "avg_pool2d" else -math.inf if batched.dtype.is_float else \
        int(np.iinfo(batched.dtype.numpy).min)
    y = cx.b.op(op, _pad_after(cx, batched, extra, fill), kernel=kernel, stride=stride, padding=padding)
    if op == "avg_pool2d":
        y = _rescale_average(cx, y, batched.shape[2:], kernel, stride, padding, extra, ceil_mode, count_include_pad)
    return y


def _rescale_average(cx, y: Value, size, kernel, stride, padding, extra, ceil_mode, count_include_pad) -> Value:
    """The IR divides every window by kernel area; torch divides by the window's real (or padded) size."""
    if not any(extra) and (count_include_pad or padding == (0, 0)):
        return y
    ones = torch.ones((1, 1) + tuple(size), dtype=torch.float64)
    want = F.avg_pool2d(ones, kernel, stride, padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    have = F.avg_pool2d(F.pad(ones, (0, extra[1], 0, extra[0])), kernel, stride, padding, count_include_pad=True)
    factor = torch.where(have > 0, want / have.clamp_min(1e-30), 0.0).float()
    return cx.b.mul(y, cx.value(cx.param(f"{cx.node.name}_window_scale", factor), y.dtype))


def _pool_1d(cx, op, x, kernel_size, stride, padding, ceil_mode, count_include_pad=True) -> Value:
    """1-d pooling as 2-d pooling over [N, C, 1, L]."""
    x = cx.value(x)
    x = cx.reshape(x, x.shape[:-1] + (1, x.shape[-1]))
    (kernel,), (padding,) = _single(kernel_size), _single(padding)
    stride = kernel if stride in (None, []) else _single(stride)[0]
    y = pool_values(cx, op, x, (1, kernel), (1, stride), (0, padding), ceil_mode, 1, count_include_pad,
                    out_hw=(1, cx.out_shape[-1]))
    return cx.reshape(y, cx.out_shape)


@converts(F.avg_pool1d, torch.avg_pool1d, A("avg_pool1d"))
def avg_pool1d(cx, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    return _pool_1d(cx, "avg_pool2d", x, kernel_size, stride, padding, ceil_mode, count_include_pad)


@converts(F.max_pool1d, torch.max_pool1d, A("max_pool1d"))
def max_pool1d(cx, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    if _single(dilation) != (1,):
        raise Unsupported(f"max_pool1d with dilation {dilation}")
    y = _pool_1d(cx, "max_pool2d", x, kernel_size, stride, padding, ceil_mode)
    return (y, Missing("max-pool indices")) if return_indices else y


@converts(nn.AvgPool1d)
def avg_pool1d_module(cx, m, x):
    return _pool_1d(cx, "avg_pool2d", x, m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad)


@converts(nn.MaxPool1d)
def max_pool1d_module(cx, m, x):
    return max_pool1d(cx, x, m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode, m.return_indices)


@converts(F.max_pool2d, torch.max_pool2d, optional(F, "_max_pool2d"), A("max_pool2d"))
def max_pool2d(cx, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    y = pool_values(cx, "max_pool2d", x, kernel_size, stride, padding, ceil_mode, dilation)
    y = cx.reshape(y, cx.out_shape)
    return (y, Missing("max-pool indices")) if return_indices else y


@converts(A("max_pool2d_with_indices"), optional(F, "max_pool2d_with_indices"))
def max_pool2d_with_indices(cx, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, *args):
    y = pool_values(cx, "max_pool2d", x, kernel_size, stride, padding, ceil_mode, dilation)
    y = cx.reshape(y, cx.out_shape)
    window = PoolWindow.of(kernel_size, stride, padding, dilation)
    indices = max_pool_indices(cx, cx.value(x), window, tuple(cx.out_shape[-2:]))
    return (y, cx.reshape(indices, tuple(cx.expected[1].shape)))  # dead code unless the backward saves them


@dataclass(frozen=True)
class PoolWindow:
    """A 2-d pooling window's geometry, per spatial axis (torch's defaults filled in)."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]

    @classmethod
    def of(cls, kernel_size, stride, padding, dilation=1) -> PoolWindow:
        kernel = _pair(kernel_size, "kernel_size")
        stride = _pair(stride, "stride") if stride not in (None, []) else kernel
        return cls(kernel, stride, _pair(padding, "padding"), _pair(dilation, "dilation"))

    def rows(self, axis: int, k: int, out: int) -> np.ndarray:
        """The input row (or column) that window element `k` of each of the `out` windows reads."""
        return np.arange(out) * self.stride[axis] + k * self.dilation[axis] - self.padding[axis]

    def positions(self, size: tuple[int, int], out: tuple[int, int], kh: int, kw: int) -> np.ndarray:
        """Flat position in the [H, W] plane of window element (kh, kw) per window, -1 in the padding."""
        rows, cols = self.rows(0, kh, out[0]), self.rows(1, kw, out[1])
        valid = ((rows >= 0) & (rows < size[0]))[:, None] & ((cols >= 0) & (cols < size[1]))[None, :]
        return np.where(valid, rows[:, None] * size[1] + cols[None, :], -1).astype(np.int64)

    def first_valid(self, size: tuple[int, int], out: tuple[int, int]) -> np.ndarray:
        """Each window's first element inside the input: where torch's max-pool index starts."""
        firsts = []
        for axis in (0, 1):
            start = self.rows(axis, 0, out[axis])
            step = self.dilation[axis]
            firsts.append(np.where(start < 0, start + (-start + step - 1) // step * step, start))
        return (firsts[0][:, None] * size[1] + firsts[1][None, :]).astype(np.int64)


def max_pool_indices(cx, x: Value, window: PoolWindow, out_hw: tuple[int, int]) -> Value:
    """max_pool2d's indices as torch's CPU kernel picks them: each window scanned row by row from its
    first element inside the input, a later element winning only if larger (or NaN); i64 [N, C, Ho, Wo]."""
    x = _batched(cx, x, 4)
    size = x.shape[2:]
    fill = -math.inf if x.dtype.is_float else int(np.iinfo(x.dtype.numpy).min)
    needed = [(out_hw[a] - 1) * window.stride[a] + (window.kernel[a] - 1) * window.dilation[a] + 1 for a in (0, 1)]
    after = [needed[a] - size[a] - window.padding[a] for a in (0, 1)]
    padded = pad(cx, x, [window.padding[1], after[1], window.padding[0], after[0]], value=fill)
    best = cx.value(fill, x.dtype)
    index = cx.param(f"{cx.node.name}_first", torch.from_numpy(window.first_valid(size, out_hw)))
    for kh in range(window.kernel[0]):
        for kw in range(window.kernel[1]):
            start = (0, 0, kh * window.dilation[0], kw * window.dilation[1])
            stop = x.shape[:2] + tuple(start[2 + a] + (out_hw[a] - 1) * window.stride[a] + 1 for a in (0, 1))
            element = cx.b.slice(padded, start=start, stop=stop, step=(1, 1) + window.stride)
            better = cx.b.gt(element, best)
            if x.dtype.is_float:  # NaN wins, as in torch
                better = cx.b.where(better, cx.value(True, DType.bool), cx.b.ne(element, element))
            position = cx.param(f"{cx.node.name}_pos{kh}_{kw}",
                                torch.from_numpy(window.positions(size, out_hw, kh, kw)))
            best = cx.b.where(better, element, best)
            index = cx.b.where(better, position, index)
    return index


@converts(nn.MaxPool2d)
def max_pool2d_module(cx, m, x):
    y = pool_values(cx, "max_pool2d", x, m.kernel_size, m.stride, m.padding, m.ceil_mode, m.dilation)
    y = cx.reshape(y, cx.out_shape)
    return (y, Missing("max-pool indices")) if m.return_indices else y


@converts(F.avg_pool2d, A("avg_pool2d"))
def avg_pool2d(cx, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return cx.reshape(pool_values(cx, "avg_pool2d", x, kernel_size, stride, padding, ceil_mode, 1, count_include_pad,
                                  divisor_override), cx.out_shape)


@converts(nn.AvgPool2d)
def avg_pool2d_module(cx, m, x):
    return cx.reshape(pool_values(cx, "avg_pool2d", x, m.kernel_size, m.stride, m.padding, m.ceil_mode, 1,
                                  m.count_include_pad, m.divisor_override), cx.out_shape)


def adaptive_pool_values(cx, reduce: str, x, out_hw=None) -> Value:
    """Adaptive pooling to the output size torch produced: one pooling op where the sizes divide,
    else (the windows overlap or vary) a mean/max over each window's rows, then over its columns."""
    x = cx.value(x)
    batched = _batched(cx, x, 4)
    out_hw = tuple(out_hw or cx.out_shape[-2:])
    in_hw = batched.shape[2:]
    if all(i % o == 0 for i, o in zip(in_hw, out_hw)):
        if out_hw == (1, 1):
            y = cx.b.op("mean" if reduce == "mean" else "max", batched, axes=(2, 3), keepdims=True)
        else:
            kernel = tuple(i // o for i, o in zip(in_hw, out_hw))
            y = cx.b.op("avg_pool2d" if reduce == "mean" else "max_pool2d", batched, kernel=kernel, stride=kernel)
        return cx.reshape(y, cx.out_shape)
    y = batched
    for axis, (size, out) in zip((2, 3), zip(in_hw, out_hw)):
        pieces = []
        for i in range(out):
            start, stop = (i * size) // out, -(-((i + 1) * size) // out)
            window = slice_axis(cx, y, axis, start, stop)
            pieces.append(cx.b.op(reduce, window, axes=(axis,), keepdims=True))
        y = pieces[0] if len(pieces) == 1 else cx.b.concat(*pieces, axis=axis)
    return cx.reshape(y, cx.out_shape)


@converts(F.adaptive_avg_pool2d, torch._C._nn.adaptive_avg_pool2d, A("adaptive_avg_pool2d"),
          A("_adaptive_avg_pool2d"))
def adaptive_avg_pool2d(cx, x, output_size):
    return adaptive_pool_values(cx, "mean", x)


@converts(A("adaptive_max_pool2d"))
def aten_adaptive_max_pool2d(cx, x, output_size):
    return (adaptive_pool_values(cx, "max", x), Missing("max-pool indices"))


@converts(F.adaptive_max_pool2d, optional(F, "adaptive_max_pool2d_with_indices"))
def adaptive_max_pool2d(cx, x, output_size, return_indices=False):
    y = adaptive_pool_values(cx, "max", x)
    return (y, Missing("max-pool indices")) if return_indices else y


@converts(nn.AdaptiveAvgPool2d)
def adaptive_avg_pool2d_module(cx, m, x):
    return adaptive_pool_values(cx, "mean", x)


@converts(nn.AdaptiveMaxPool2d)
def adaptive_max_pool2d_module(cx, m, x):
    y = adaptive_pool_values(cx, "max", x)
    return (y, Missing("max-pool indices")) if m.return_indices else y


def adaptive_pool_1d(cx, reduce: str, x) -> Value:
    """1-d adaptive pooling as 2-d over [N, C, 1, L]."""
    x = cx.value(x)
    x4 = cx.reshape(x, x.shape[:-1] + (1, x.shape[-1]))
    return cx.reshape(adaptive_pool_values(cx, reduce, x4, (1, cx.out_shape[-1])), cx.out_shape)


@converts(F.adaptive_avg_pool1d, torch.adaptive_avg_pool1d, A("adaptive_avg_pool1d"))
def adaptive_avg_pool1d(cx, x, output_size):
    return adaptive_pool_1d(cx, "mean", x)


@converts(F.adaptive_max_pool1d, torch.adaptive_max_pool1d, A("adaptive_max_pool1d"))
def adaptive_max_pool1d(cx, x, output_size, return_indices=False):
    y = adaptive_pool_1d(cx, "max", x)
    if cx.node.target is torch.adaptive_max_pool1d or return_indices:
        return (y, Missing("max-pool indices"))
    return y


@converts(nn.AdaptiveAvgPool1d)
def adaptive_avg_pool1d_module(cx, m, x):
    return adaptive_pool_1d(cx, "mean", x)


@converts(nn.AdaptiveMaxPool1d)
def adaptive_max_pool1d_module(cx, m, x):
    y = adaptive_pool_1d(cx, "max", x)
    return (y, Missing("max-pool indices")) if m.return_indices else y


@converts(nn.Flatten, nn.Unflatten)
def flatten_module(cx, m, x):
    return cx.reshape(cx.value(x), cx.out_shape)


# ----- resampling -------------------------------------------------------------------------------------
def _axis_weights(resample, size: tuple[int, ...], axis: int) -> torch.Tensor:
    """The [out, in] matrix `resample` applies along spatial `axis` (modes are separable): resample
    `size[axis]` probe channels, channel j one along that axis at j and constant along the others."""
    n = size[axis]
    view = (1, n) + tuple(n if a == axis else 1 for a in range(len(size)))
    probe = torch.eye(n, dtype=torch.float64).reshape(view).expand((1, n) + tuple(size)).contiguous()
    out = resample(probe)[0]  # [n, *out_size]
    picked = out[(slice(None),) + tuple(slice(None) if a == axis else 0 for a in range(len(size)))]
    return picked.transpose(0, 1)  # [out, in]


def resample_values(cx, x, resample) -> Value:
    """Interpolation along each spatial axis as its own linear map: a matmul by the [out, in] weights,
    or a gather where each output copies one input (nearest modes)."""
    x = cx.value(x)
    spatial = x.shape[2:]
    if x.type.rank not in (3, 4, 5):
        raise Unsupported(f"interpolation of a rank-{x.type.rank} input")
    weights = [_axis_weights(resample, spatial, k) for k in range(len(spatial))]
    y = x
    for k, w in enumerate(weights):
        axis = 2 + k
        copies = (w == 1).sum(dim=1) == 1
        if bool(copies.all()) and bool(((w == 0) | (w == 1)).all()):
            index = torch.argmax(w, dim=1)
            y = cx.b.gather(y, cx.param(f"{cx.node.name}_source{k}", index), axis=axis)
            continue
        if not y.dtype.is_float:
            raise Unsupported(f"interpolation of a {y.dtype} tensor other than nearest")
        w_t = cx.value(cx.param(f"{cx.node.name}_weights{k}", w.t().float().contiguous()), y.dtype)  # [in, out]
        last = y.type.rank - 1
        moved = cx.transpose(y, [a for a in range(y.type.rank) if a != axis] + [axis]) if axis != last else y
        product = cx.b.matmul(moved, w_t)
        y = cx.transpose(product, list(range(axis)) + [last] + list(range(axis, last))) if axis != last else product
    return cx.reshape(y, cx.out_shape)


@converts(F.interpolate, F.upsample)
def interpolate(cx, x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    if antialias:
        raise Unsupported("interpolate with antialias=True")
    if mode not in ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area"):
        raise Unsupported(f"interpolate mode {mode!r}")

    def resample(probe):
        return F.interpolate(probe, size=size, scale_factor=scale_factor, mode=mode, align_corners=align_corners,
                             recompute_scale_factor=recompute_scale_factor)

    return resample_values(cx, x, resample)


@converts(nn.Upsample)
def upsample_module(cx, m, x):
    return resample_values(cx, x, m)


@converts(A("upsample_nearest1d"), A("upsample_nearest2d"), A("upsample_nearest3d"), A("_upsample_nearest_exact1d"),
          A("_upsample_nearest_exact2d"), A("upsample_linear1d"), A("upsample_bilinear2d"), A("upsample_bicubic2d"),
          A("upsample_trilinear3d"))
def aten_upsample(cx, x, *args, **kwargs):
    target = cx.node.target
    return resample_values(cx, x, lambda probe: target(probe, *args, **kwargs))


# ----- sliding windows -------------------------------------------------------------------------------
@converts(F.unfold, A("im2col"))
def unfold(cx, x, kernel_size, dilation=1, padding=0, stride=1):
    """im2col: each window's C x kh x kw values as one column of [N, C * kh * kw, L], by one strided slice of the
    zero-padded input per kernel offset (ConvBERT's span-based dynamic convolution takes 9 x 1 windows)."""
    x = _batched(cx, cx.value(x), 4)
    (kh, kw), (dh, dw) = _pair(kernel_size, "kernel_size"), _pair(dilation, "dilation")
    (ph, pw), (sh, sw) = _pair(padding, "padding"), _pair(stride, "stride")
    n, c, h, w = x.shape
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    x = pad(cx, x, (pw, pw, ph, ph))
    columns = []
    for i in range(kh):
        for j in range(kw):
            window = slice_axis(cx, x, 2, i * dh, i * dh + sh * (oh - 1) + 1, sh)
            window = slice_axis(cx, window, 3, j * dw, j * dw + sw * (ow - 1) + 1, sw)
            columns.append(cx.reshape(window, (n, c, 1, oh * ow)))
    y = columns[0] if len(columns) == 1 else cx.b.concat(*columns, axis=2)  # [N, C, kh * kw, L]
    return cx.reshape(y, cx.out_shape)


# ----- attention ------------------------------------------------------------------------------------
def _repeat_heads(cx, x: Value, heads: int) -> Value:
    """[..., Hk, S, D] -> [..., Hk * r, S, D], each head repeated r times (grouped-query attention)."""
    *batch, hk, s, d = x.shape
    if hk == heads:
        return x
    if heads % hk:
        raise Unsupported(f"grouped-query attention with {heads} query heads and {hk} key/value heads")
    batch = tuple(batch)
    y = cx.broadcast(cx.reshape(x, batch + (hk, 1, s, d)), batch + (hk, heads // hk, s, d))
    return cx.reshape(y, batch + (heads, s, d))


def attention_values(cx, q, k, v, mask=None, *, causal=False, scale=None, enable_gqa=False) -> Value:
    q, k, v = cx.value(q), cx.value(k), cx.value(v)
    dtype = q.dtype
    k, v = cx.value(k, dtype), cx.value(v, dtype)
    if enable_gqa and q.type.rank >= 3:
        k, v = _repeat_heads(cx, k, q.shape[-3]), _repeat_heads(cx, v, q.shape[-3])
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        try:
            batch = tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
        except RuntimeError:
            raise Unsupported(f"attention batch dims {q.shape[:-2]}, {k.shape[:-2]}, {v.shape[:-2]} "
                              "do not broadcast") from None
        q, k, v = (cx.broadcast(t, batch + t.shape[-2:]) for t in (q, k, v))
    operands = [q, k, v]
    if mask is not None:
        mask = cx.value(mask)
        operands.append(mask if mask.dtype is DType.bool else cx.cast(mask, dtype))
    return cx.b.attention(*operands, causal=bool(causal), scale=None if scale is None else float(scale))


@converts(F.scaled_dot_product_attention, A("scaled_dot_product_attention"))
def scaled_dot_product_attention(cx, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    if dropout_p > 0:
        raise Unsupported(f"scaled_dot_product_attention with dropout_p={dropout_p} (random)")
    return attention_values(cx, query, key, value, attn_mask, causal=is_causal, scale=scale, enable_gqa=enable_gqa)


def _projection(cx, x: Value, weight: Value, bias: Value | None, index: int, parts: int) -> Value:
    """x @ W_i^T + b_i where W_i is the i-th of `parts` row blocks of a packed in-projection weight."""
    rows = weight.shape[0] // parts
    w = slice_axis(cx, weight, 0, index * rows, (index + 1) * rows) if parts > 1 else weight
    b = slice_axis(cx, bias, 0, index * rows, (index + 1) * rows) if bias is not None and parts > 1 else bias
    y = cx.b.matmul(x, cx.transpose(w, (1, 0)))
    return y if b is None else cx.b.add(y, b)


def multi_head_attention(cx, query, key, value, heads, in_weight, in_bias, out_weight, out_bias, *,
                         separate_weights=None, mask=None, causal=False) -> Value:
    """nn.MultiheadAttention on batch-first [B, L, E] inputs; `mask` is additive or bool-keep."""
    batch, length, embed = query.shape
    source = key.shape[1]
    head_dim = embed // heads
    if separate_weights is not None:
        (wq, bq), (wk, bk), (wv, bv) = separate_weights
        q, k, v = (_projection(cx, x, w, b, 0, 1) for x, w, b in ((query, wq, bq), (key, wk, bk), (value, wv, bv)))
    else:
        q, k, v = (_projection(cx, x, in_weight, in_bias, i, 3) for i, x in enumerate((query, key, value)))

    def heads_first(t: Value, size: int) -> Value:
        return cx.transpose(cx.reshape(t, (batch, size, heads, head_dim)), (0, 2, 1, 3))

    y = attention_values(cx, heads_first(q, length), heads_first(k, source), heads_first(v, source), mask,
                         causal=causal)
    y = cx.reshape(cx.transpose(y, (0, 2, 1, 3)), (batch, length, embed))
    return linear_values(cx, y, out_weight, out_bias, (batch, length, embed))


def _mha_mask(cx, attn_mask, key_padding_mask, batch, heads, length, source, dtype) -> Value | None:
    """Fold nn.MultiheadAttention's masks (bool: True = masked out) into one additive mask."""
    total = None
    for mask, shape in ((attn_mask, None), (key_padding_mask, (batch, 1, 1, source))):
        if mask is None:
            continue
        mask = cx.value(mask)
        if mask.dtype is DType.bool:
            mask = cx.b.where(mask, cx.value(-math.inf, dtype), cx.value(0.0, dtype))
        else:
            mask = cx.cast(mask, dtype)
        if shape is None:
            shape = (length, source) if mask.type.rank == 2 else (batch, heads, length, source)
        mask = cx.reshape(mask, shape)
        total = mask if total is None else cx.b.add(total, mask)
    return total


def mha_forward(cx, query, key, value, num_heads, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, *,
                batch_first=False, bias_k=None, add_zero_attn=False, dropout_p=0.0, training=False,
                key_padding_mask=None, need_weights=True, attn_mask=None, separate_weights=None, is_causal=False):
    """nn.MultiheadAttention's forward (F.multi_head_attention_forward when not batch_first)."""
    if training and dropout_p > 0:
        raise Unsupported("multi-head attention with dropout in training mode (call model.eval() first)")
    if bias_k is not None or add_zero_attn:
        raise Unsupported("multi-head attention with add_bias_kv or add_zero_attn")
    query, key, value = cx.value(query), cx.value(key), cx.value(value)
    unbatched = query.type.rank == 2
    if unbatched:
        query, key, value = (cx.reshape(t, (1,) + t.shape) for t in (query, key, value))
    elif not batch_first:
        query, key, value = (cx.transpose(t, (1, 0, 2)) for t in (query, key, value))
    batch, length, _ = query.shape
    mask = _mha_mask(cx, attn_mask, key_padding_mask, batch, num_heads, length, key.shape[1], query.dtype)
    y = multi_head_attention(cx, query, key, value, num_heads, in_proj_weight, in_proj_bias, out_proj_weight,
                             out_proj_bias, separate_weights=separate_weights, mask=mask,
                             causal=bool(is_causal) and mask is None)
    if unbatched:
        y = cx.reshape(y, y.shape[1:])
    elif not batch_first:
        y = cx.transpose(y, (1, 0, 2))
    weights = Missing("the attention weights of multi-head attention (pass need_weights=False)") \
        if need_weights else None
    return (y, weights)


@converts(F.multi_head_attention_forward)
def multi_head_attention_forward(cx, query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                                 bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
                                 training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                                 is_causal=False):
    if static_k is not None or static_v is not None:
        raise Unsupported("multi-head attention with static_k/static_v")
    separate = None
    if use_separate_proj_weight:
        separate = _separate_weights(cx, (q_proj_weight, k_proj_weight, v_proj_weight), in_proj_bias,
                                     embed_dim_to_check)
    return mha_forward(cx, query, key, value, num_heads, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
                       bias_k=bias_k, add_zero_attn=add_zero_attn, dropout_p=dropout_p, training=training,
                       key_padding_mask=key_padding_mask, need_weights=need_weights, attn_mask=attn_mask,
                       separate_weights=separate, is_causal=is_causal)


def _separate_weights(cx, weights, in_proj_bias, embed_dim):
    pairs = []
    for i, w in enumerate(weights):
        bias = None if in_proj_bias is None else slice_axis(cx, cx.value(in_proj_bias), 0, i * embed_dim,
                                                              (i + 1) * embed_dim)
        pairs.append((cx.value(w), bias))
    return pairs


@converts(nn.MultiheadAttention)
def multi_head_attention_module(cx, m, query, key, value, key_padding_mask=None, need_weights=True,
                                attn_mask=None, average_attn_weights=True, is_causal=False):
    separate = None
    if not m._qkv_same_embed_dim:
        weights = [cx.module_param(m, f"{p}_proj_weight") for p in "qkv"]
        separate = _separate_weights(cx, weights, cx.module_param(m, "in_proj_bias"), m.embed_dim)
    out_path = f"{cx.module_path}.out_proj" if cx.module_path else "out_proj"
    out_bias = None if m.out_proj.bias is None else cx.param(f"{out_path}.bias", m.out_proj.bias)
    return mha_forward(cx, query, key, value, m.num_heads, cx.module_param(m, "in_proj_weight"),
                       cx.module_param(m, "in_proj_bias"), cx.param(f"{out_path}.weight", m.out_proj.weight),
                       out_bias, batch_first=m.batch_first, bias_k=m.bias_k, add_zero_attn=m.add_zero_attn,
                       dropout_p=m.dropout, training=m.training, key_padding_mask=key_padding_mask,
                       need_weights=need_weights, attn_mask=attn_mask, separate_weights=separate,
                       is_causal=is_causal)


@converts(optional(torch, "_transformer_encoder_layer_fwd"), A("_transformer_encoder_layer_fwd"))
def transformer_encoder_layer_fast_path(cx, src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                        use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                                        norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                                        mask_type=None):
    """The fused eval-mode nn.TransformerEncoderLayer (what torch runs under no_grad with batch_first)."""
    if mask is not None:
        raise Unsupported("the fused transformer encoder layer with a mask")
    x = cx.value(src)
    if x.type.rank != 3:
        raise Unsupported(f"the fused transformer encoder layer on a rank-{x.type.rank} input")

    def attend(t):
        return multi_head_attention(cx, t, t, t, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias)

    def feed_forward(t):
        hidden = linear_values(cx, t, ffn_weight_1, ffn_bias_1, t.shape[:-1] + (ffn_weight_1.shape[0],))
        hidden = cx.b.gelu(hidden) if use_gelu else cx.b.relu(hidden)
        return linear_values(cx, hidden, ffn_weight_2, ffn_bias_2, t.shape)

    def norm(t, w, b):
        return layer_norm_values(cx, t, (embed_dim,), w, b, eps)

    if norm_first:
        x = cx.b.add(x, attend(norm(x, norm_weight_1, norm_bias_1)))
        return cx.b.add(x, feed_forward(norm(x, norm_weight_2, norm_bias_2)))
    x = norm(cx.b.add(x, attend(x)), norm_weight_1, norm_bias_1)
    return norm(cx.b.add(x, feed_forward(x)), norm_weight_2, norm_bias_2)


# ----- losses ----------------------------------------------------------------------------------------
def _pointwise_loss(cx, error, input, target, size_average, reduce, reduction) -> Value:
    """mean/sum/none of error(input - target), in the result's dtype (f32 inside a CPU autocast region,
    where torch runs losses in f32)."""
    if size_average is not None or reduce is not None:
        raise Unsupported("the deprecated size_average/reduce arguments (use reduction=)")
    if reduction not in ("mean", "sum", "none"):
        raise Unsupported(f"reduction={reduction!r}")
    dtype = cx.out_dtype
    input, target = cx.value(input, dtype), cx.value(target, dtype)
    shape = np.broadcast_shapes(input.shape, target.shape)
    per_element = error(cx.b.sub(cx.broadcast(input, shape), cx.broadcast(target, shape)))
    if reduction == "none" or not shape:
        return per_element
    return cx.b.op(reduction, per_element, axes=tuple(range(len(shape))), keepdims=False)


@converts(F.mse_loss)
def mse_loss(cx, input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    if weight is not None:
        raise Unsupported("mse_loss with weight=")
    return _pointwise_loss(cx, lambda d: cx.b.mul(d, d), input, target, size_average, reduce, reduction)


@converts(F.l1_loss)
def l1_loss(cx, input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    if weight is not None:
        raise Unsupported("l1_loss with weight=")
    return _pointwise_loss(cx, cx.b.abs, input, target, size_average, reduce, reduction)
