"""Converters for the ATen backward ops that remain after core-ATen decomposition (training under
torch.compile, `training.py`): convolution, max-pool and average-pool backward, var_mean, and torch's
fused attention ops (CPU flash; CUDA flash, memory-efficient and cuDNN) forward and backward.

The IR has no scatter, so each backward is written with ops it has:
- convolution_backward: the input gradient is a stride-1 convolution of the output gradient, spread
  to every `stride`-th position (zeros between), with the weights flipped and their channels swapped
  per group; the weight gradient is a convolution of the input by the output gradient (the two swap
  roles: batch becomes channels, stride becomes dilation); the bias gradient is a sum.
- pooling backward: each window element's share of the output gradient (max pool: where the saved
  index is that element; average pool: scaled by torch's divisor for the window) is placed back on the
  input grid by two matmuls with constant 0/1 matrices, one per spatial axis.
"""
from __future__ import annotations

import math
import operator

import numpy as np
import torch

from tilegraph.ir import DType, Value

from .context import ConvertContext, Missing, Unsupported
from .ops_nn import PoolWindow, _batched, _pair
from .ops_tensor import A, pad
from .registry import converts


def _not_requested(what: str) -> Missing:
    return Missing(f"the {what} gradient, which the graph did not ask convolution_backward for")


def spread(cx: ConvertContext, x: Value, axis: int, stride: int, offset: int, size: int) -> Value:
    """`out[offset + i * stride] = x[i]` along `axis`, zeros elsewhere, `size` long (what falls outside
    [0, size) is dropped)."""
    length = x.shape[axis]
    if stride > 1:  # interleave stride - 1 zeros after every element
        column = cx.reshape(x, x.shape[:axis + 1] + (1,) + x.shape[axis + 1:])
        zeros = cx.b.constant(0, x.dtype, x.shape[:axis + 1] + (stride - 1,) + x.shape[axis + 1:])
        spread_shape = x.shape[:axis] + (length * stride,) + x.shape[axis + 1:]
        x = cx.reshape(cx.b.concat(column, zeros, axis=axis + 1), spread_shape)
    widths = [0] * (2 * x.type.rank)
    last = x.type.rank - 1 - axis  # torch's pad lists the last axis first
    widths[2 * last], widths[2 * last + 1] = offset, size - offset - x.shape[axis]
    return pad(cx, x, widths)


def _flip(cx: ConvertContext, x: Value, axes: tuple[int, ...]) -> Value:
    for axis in axes:
        if x.shape[axis] > 1:
            reverse = cx.param(f"{cx.node.name}_reverse{axis}", torch.arange(x.shape[axis] - 1, -1, -1))
            x = cx.b.gather(x, reverse, axis=axis)
    return x


def _conv_input_grad(cx, grad: Value, weight: Value, size, stride, padding, dilation, groups) -> Value:
    """The gradient of conv2d's input: a transposed convolution of the output gradient."""
    cout, cin_group, kh, kw = weight.shape
    kernel = (kh, kw)
    offsets = [dilation[a] * (kernel[a] - 1) - padding[a] for a in (0, 1)]
    swapped = cx.reshape(weight, (groups, cout // groups, cin_group) + kernel)
    swapped = cx.reshape(cx.transpose(swapped, (0, 2, 1, 3, 4)), (groups * cin_group, cout // groups) + kernel)
    flipped = _flip(cx, swapped, (2, 3))
    if stride == (1, 1) and min(offsets) >= 0:  # the spread is plain symmetric padding
        return cx.b.conv2d(grad, flipped, stride=(1, 1), padding=tuple(offsets), dilation=dilation, groups=groups)
    for a in (0, 1):
        grad = spread(cx, grad, 2 + a, stride[a], offsets[a], size[a] + dilation[a] * (kernel[a] - 1))
    return cx.b.conv2d(grad, flipped, stride=(1, 1), padding=(0, 0), dilation=dilation, groups=groups)


def _conv_weight_grad(cx, grad: Value, x: Value, kernel, stride, padding, dilation, groups) -> Value:
    """The gradient of conv2d's weight: the input convolved with the output gradient as the kernel."""
    n, cin, height, width = x.shape
    cout = grad.shape[1]
    images = cx.reshape(x, (n, groups, cin // groups, height, width))
    images = cx.reshape(cx.transpose(images, (2, 1, 0, 3, 4)), (cin // groups, groups * n, height, width))
    kernels = cx.transpose(grad, (1, 0, 2, 3))
    full = cx.b.conv2d(images, kernels, stride=dilation, padding=padding, dilation=stride, groups=groups)
    full = cx.b.slice(full, start=(0, 0, 0, 0), stop=(cin // groups, cout) + tuple(kernel), step=(1, 1, 1, 1)) \
        if full.shape[2:] != tuple(kernel) else full
    return cx.transpose(full, (1, 0, 2, 3))


@converts(A("convolution_backward"))
def convolution_backward(cx, grad_output, x, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    if transposed:
        raise Unsupported("the backward of a transposed convolution")
    grad, x, weight = cx.value(grad_output), cx.value(x), cx.value(weight)
    rank = weight.type.rank
    if rank not in (3, 4):
        raise Unsupported(f"the backward of a {rank - 2}-d convolution")
    input_shape, weight_shape = x.shape, weight.shape
    if rank == 3:  # conv1d as a conv2d over [N, C, 1, L]
        def lift(v: Value) -> Value:
            return cx.reshape(v, v.shape[:-1] + (1, v.shape[-1]))

        x, grad, weight = lift(_batched(cx, x, 3)), lift(_batched(cx, grad, 3)), lift(weight)
        stride, padding, dilation = ((fill,) + tuple(p)[:1] for fill, p in ((1, stride), (0, padding), (1, dilation)))
    else:
        x, grad = _batched(cx, x, 4), _batched(cx, grad, 4)
    stride, padding, dilation = _pair(stride, "stride"), _pair(padding, "padding"), _pair(dilation, "dilation")
    results: list = [_not_requested("input"), _not_requested("weight"), _not_requested("bias")]
    if output_mask[0]:
        got = _conv_input_grad(cx, grad, weight, x.shape[2:], stride, padding, dilation, groups)
        results[0] = cx.reshape(got, input_shape)
    if output_mask[1]:
        got = _conv_weight_grad(cx, grad, x, weight.shape[2:], stride, padding, dilation, groups)
        results[1] = cx.reshape(got, weight_shape)
    if output_mask[2]:
        results[2] = cx.b.sum(grad, axes=(0, 2, 3), keepdims=False)
    return tuple(results)


# ----- pooling --------------------------------------------------------------------------------------
def _placement(window: PoolWindow, axis: int, size: int, out: int, elements: int) -> torch.Tensor:
    """[elements * out, size] 0/1: row (k, y) has a 1 at the input position window element k of window y reads."""
    matrix = np.zeros((elements * out, size), dtype=np.float32)
    for k in range(elements):
        rows = window.rows(axis, k, out)
        valid = (rows >= 0) & (rows < size)
        matrix[k * out + np.arange(out)[valid], rows[valid]] = 1.0
    return torch.from_numpy(matrix)


def _place(cx, shares: Value, window: PoolWindow, size: tuple[int, int], out: tuple[int, int],
           elements: tuple[int, int]) -> Value:
    """Sum each window element's share ([N, C, KH * Ho, KW * Wo]) into the input grid [N, C, H, W]."""
    n, c = shares.shape[:2]
    rows, cols = shares.shape[2:]
    dtype = shares.dtype
    along_w = cx.value(cx.param(f"{cx.node.name}_place_w", _placement(window, 1, size[1], out[1], elements[1])),
                       dtype)
    along_h = cx.value(cx.param(f"{cx.node.name}_place_h", _placement(window, 0, size[0], out[0], elements[0])),
                       dtype)
    y = cx.b.matmul(cx.reshape(shares, (n * c * rows, cols)), along_w)  # [N*C*rows, W]
    y = cx.transpose(cx.reshape(y, (n, c, rows, size[1])), (0, 1, 3, 2))  # [N, C, W, rows]
    y = cx.b.matmul(cx.reshape(y, (n * c * size[1], rows)), along_h)  # [N*C*W, H]
    return cx.transpose(cx.reshape(y, (n, c, size[1], size[0])), (0, 1, 3, 2))


@converts(A("max_pool2d_with_indices_backward"))
def max_pool2d_with_indices_backward(cx, grad_output, x, kernel_size, stride, padding, dilation, ceil_mode,
                                     indices):
    x, grad, indices = cx.value(x), _batched(cx, cx.value(grad_output), 4), _batched(cx, cx.value(indices), 4)
    window = PoolWindow.of(kernel_size, stride, padding, dilation)
    size, out = _batched(cx, x, 4).shape[2:], grad.shape[2:]
    n, c = grad.shape[:2]
    kh, kw = window.kernel
    positions = np.stack([np.stack([window.positions(size, out, i, j) for j in range(kw)], axis=1)
                          for i in range(kh)])  # [KH, Ho, KW, Wo]
    positions = cx.param(f"{cx.node.name}_positions", torch.from_numpy(positions))
    hits = cx.b.eq(cx.reshape(indices, (n, c, 1, out[0], 1, out[1])), positions)
    shares = cx.b.where(hits, cx.reshape(grad, (n, c, 1, out[0], 1, out[1])), cx.value(0.0, grad.dtype))
    shares = cx.reshape(shares, (n, c, kh * out[0], kw * out[1]))
    return cx.reshape(_place(cx, shares, window, size, out, window.kernel), cx.out_shape)


@converts(A("avg_pool2d_backward"))
def avg_pool2d_backward(cx, grad_output, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    x, grad = cx.value(x), _batched(cx, cx.value(grad_output), 4)
    window = PoolWindow.of(kernel_size, stride, padding)
    size, out = _batched(cx, x, 4).shape[2:], grad.shape[2:]
    # 1 / torch's divisor per window: the average of ones over the count of inputs the window holds
    ones = torch.ones((1, 1) + tuple(size), dtype=torch.float64)
    pool = dict(kernel_size=window.kernel, stride=window.stride, padding=window.padding, ceil_mode=ceil_mode)
    average = torch.nn.functional.avg_pool2d(ones, count_include_pad=count_include_pad,
                                             divisor_override=divisor_override, **pool)
    count = torch.nn.functional.avg_pool2d(ones, divisor_override=1, **pool)
    scale = cx.value(cx.param(f"{cx.node.name}_scale", (average / count)[0, 0].float()), grad.dtype)
    scaled = cx.b.mul(grad, scale)
    n, c = grad.shape[:2]
    kh, kw = window.kernel
    shares = cx.broadcast(cx.reshape(scaled, (n, c, 1, out[0], 1, out[1])), (n, c, kh, out[0], kw, out[1]))
    shares = cx.reshape(shares, (n, c, kh * out[0], kw * out[1]))
    return cx.reshape(_place(cx, shares, window, size, out, window.kernel), cx.out_shape)


# ----- attention -------------------------------------------------------------------------------------
# torch's fused attention ops save each query row's logsumexp for the backward; the CPU flash op and
# the CUDA flash, memory-efficient and cuDNN ops differ only in their argument order, the layout of that
# statistic (efficient pads the query axis to a multiple of 32) and the random-number state they return.
_RNG_READERS = ("_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention_backward",
                "_scaled_dot_product_cudnn_attention_backward")


def _scores(cx, q: Value, k: Value, batch: tuple[int, ...], mask, causal: bool, scale: float) -> Value:
    """scale * q k^T (+ mask; causal: -inf above the diagonal) over [B*H, L, S] (`batch` is [B, H])."""
    scores = cx.b.mul(cx.b.batch_matmul(q, cx.transpose(k, (0, 2, 1))), cx.value(scale, q.dtype))
    length, source = scores.shape[1:]
    if mask is not None:
        mask = cx.value(mask)
        if mask.dtype is DType.bool:  # True where attention is allowed
            mask = cx.b.where(mask, cx.value(0.0, q.dtype), cx.value(-math.inf, q.dtype))
        mask = cx.cast(mask, q.dtype)
        if mask.type.rank > 2:  # per batch or head: laid out as the scores are
            mask = cx.reshape(cx.broadcast(mask, batch + (length, source)), scores.shape)
        scores = cx.b.add(scores, mask)
    if causal:
        allowed = cx.param(f"{cx.node.name}_causal", torch.ones(length, source, dtype=torch.bool).tril())
        scores = cx.b.where(allowed, scores, cx.value(-math.inf, q.dtype))
    return scores


def _flat_heads(cx, *tensors: Value) -> list[Value]:
    """[B, H, L, D] as [B*H, L, D]."""
    return [cx.reshape(t, (math.prod(t.shape[:-2]),) + t.shape[-2:]) for t in tensors]


def _scale(q: Value, scale) -> float:
    return 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def _no_dropout(dropout_p) -> None:
    if dropout_p:
        raise Unsupported(f"attention with dropout p={dropout_p} (random)")


def _same_heads(q: Value, k: Value) -> None:
    """Memory-efficient attention has no grouped-query form (its backward gives dk the query's heads)."""
    if q.shape[-3] != k.shape[-3]:
        raise Unsupported(f"memory-efficient attention with {q.shape[-3]} query heads and {k.shape[-3]} "
                          "key/value heads")


def _logsumexp(cx, q: Value, k: Value, mask, causal: bool, scale: float, wide: DType) -> Value:
    """[B, H, L]: the logsumexp of each query row's scaled, masked scores, in `wide` (f32)."""
    from .ops_nn import _repeat_heads

    k = _repeat_heads(cx, k, q.shape[-3]) if q.type.rank >= 3 else k
    flat_q, flat_k = _flat_heads(cx, cx.cast(q, wide), cx.cast(k, wide))
    scores = _scores(cx, flat_q, flat_k, q.shape[:-2], mask, causal, scale)
    top = cx.b.max(scores, axes=(2,), keepdims=True)
    total = cx.b.sum(cx.b.exp(cx.b.sub(scores, top)), axes=(2,), keepdims=True)
    return cx.reshape(cx.b.add(cx.b.log(total), top), q.shape[:-1])


def _attention(cx, q, k, v, mask, causal: bool, scale) -> tuple[Value, Value, float]:
    """(output, [B, H, L] f32 logsumexp, scale) of the fused attention forward ops."""
    from .ops_nn import attention_values

    q, k, v = cx.value(q), cx.value(k), cx.value(v)
    scale = _scale(q, scale)
    gqa = q.type.rank >= 3 and k.type.rank >= 3 and q.shape[-3] != k.shape[-3]
    out = attention_values(cx, q, k, v, mask, causal=causal, scale=scale, enable_gqa=gqa)
    # f32 statistics for f16/bf16 attention too, as torch keeps them
    return out, _logsumexp(cx, q, k, mask, causal, scale, DType.f32), scale


def _attention_grads(cx, grad, q, k, v, out, logsumexp: Value, mask, causal: bool, scale) -> tuple[Value, ...]:
    """(dq, dk, dv, dscores) from the probabilities recomputed with the saved [B, H, L] logsumexp:
    dV = P^T dO, dS = P * (dO V^T - rowsum(dO * O)), dQ = scale dS K, dK = scale dS^T Q; grouped-query
    key/value heads sum the gradients of the query heads that share them. dscores ([B, H, L, S], the
    gradient of the additive mask) is in the statistics' dtype (f32)."""
    from .ops_nn import _repeat_heads

    wide = logsumexp.dtype  # computed in the statistics' dtype (f32), the gradients cast back
    q, k, v, grad, out = (cx.value(t) for t in (q, k, v, grad, out))
    scale = _scale(q, scale)
    heads, kv_heads = q.shape[-3], k.shape[-3]
    if q.shape[:-3] != k.shape[:-3] or k.shape[:-2] != v.shape[:-2] or heads % kv_heads:
        raise Unsupported(f"attention backward with query {q.shape}, key {k.shape}, value {v.shape}")
    wide_k, wide_v = (_repeat_heads(cx, cx.cast(t, wide), heads) for t in (k, v))
    flat_q, flat_k, flat_v, flat_grad, flat_out = _flat_heads(cx, cx.cast(q, wide), wide_k, wide_v,
                                                              cx.cast(grad, wide), cx.cast(out, wide))
    scores = _scores(cx, flat_q, flat_k, q.shape[:-2], mask, causal, scale)
    probs = cx.b.exp(cx.b.sub(scores, cx.reshape(logsumexp, scores.shape[:2] + (1,))))
    dv = cx.b.batch_matmul(cx.transpose(probs, (0, 2, 1)), flat_grad)
    dprobs = cx.b.batch_matmul(flat_grad, cx.transpose(flat_v, (0, 2, 1)))
    rows = cx.b.sum(cx.b.mul(flat_grad, flat_out), axes=(2,), keepdims=True)
    dmask = cx.b.mul(probs, cx.b.sub(dprobs, rows))
    dscores = cx.b.mul(dmask, cx.value(scale, wide))
    dq = cx.b.batch_matmul(dscores, flat_k)
    dk = cx.b.batch_matmul(cx.transpose(dscores, (0, 2, 1)), flat_q)

    def kv_grad(d: Value, t: Value) -> Value:  # [B*H, S, D] -> t's shape, query heads per group summed
        d = cx.reshape(d, t.shape[:-3] + (kv_heads, heads // kv_heads) + t.shape[-2:])
        if heads != kv_heads:
            d = cx.b.sum(d, axes=(t.type.rank - 2,), keepdims=False)
        return cx.cast(cx.reshape(d, t.shape), t.dtype)

    dmask = cx.reshape(dmask, q.shape[:-2] + scores.shape[1:])
    return cx.cast(cx.reshape(dq, q.shape), q.dtype), kv_grad(dk, k), kv_grad(dv, v), dmask


def _bias_grad(cx, dmask: Value, bias: Value) -> Value:
    """The gradient of an additive attention bias: dS summed over the axes the bias broadcast along."""
    rank = dmask.type.rank
    shape = (1,) * (rank - bias.type.rank) + tuple(bias.shape)
    axes = tuple(a for a in range(rank) if shape[a] == 1 and dmask.shape[a] != 1)
    if axes:
        dmask = cx.b.sum(dmask, axes=axes, keepdims=True)
    return cx.cast(cx.reshape(dmask, bias.shape), bias.dtype)


def _rng_state(cx, index: int, what: str):
    """Result `index` (a random-number seed or offset, or the debug mask), which tilegraph does not
    produce: an i64 zero where only the graph's output (saved for the backward) or an attention backward
    reads it (with dropout p=0 they ignore it), else Missing, so that any other reader is reported."""
    expected = cx.expected[index]
    readers = [user for getter in cx.node.users
               if getter.target is operator.getitem and getter.args[1] == index for user in getter.users]
    harmless = all(user.op == "output" or getattr(getattr(user.target, "overloadpacket", None), "__name__", "")
                   in _RNG_READERS for user in readers)
    if harmless and expected.dtype is torch.int64:
        return cx.b.constant(0, DType.i64, tuple(expected.shape))
    return Missing(f"the {what} of fused attention ({str(expected.dtype).replace('torch.', '')} "
                   f"{tuple(expected.shape)}), which tilegraph does not produce")


def attention_backward_without_rng(op, rng: tuple, *args, **kwargs):
    """`op` (a CUDA attention backward) with empty random state at the argument positions of `rng`
    ((position, shape, dtype), ...): training.py calls this in place of the op where the forward ran
    without dropout, so that the random state (uint64 for flash) is no graph input."""
    args = list(args)
    for position, shape, dtype in rng:
        args[position] = torch.empty(shape, dtype=dtype, device=args[1].device)
    return op(*args, **kwargs)


@converts(attention_backward_without_rng)
def _attention_backward_without_rng(cx, op, rng, *args, **kwargs):
    """The backward op's own converter, with None for the random state (it reads none without dropout)."""
    from .registry import function_converter

    return function_converter(op)(cx, *args, **kwargs)


@converts(A("_scaled_dot_product_flash_attention_for_cpu"))
def flash_attention_cpu(cx, q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    """(output, logsumexp of each query's scores): the fused attention op, and the statistic the
    backward reads (dead code unless the graph saves it)."""
    _no_dropout(dropout_p)
    out, logsumexp, _ = _attention(cx, q, k, v, attn_mask, is_causal, scale)
    return out, logsumexp


@converts(A("_scaled_dot_product_flash_attention_for_cpu_backward"))
def flash_attention_cpu_backward(cx, grad_out, q, k, v, out, logsumexp, dropout_p=0.0, is_causal=False, *,
                                 attn_mask=None, scale=None):
    """(dq, dk, dv) from the probabilities recomputed with the saved logsumexp."""
    _no_dropout(dropout_p)
    return _attention_grads(cx, grad_out, q, k, v, out, cx.value(logsumexp), attn_mask, is_causal, scale)[:3]


@converts(A("_scaled_dot_product_flash_attention"))
def flash_attention(cx, q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    """CUDA's flash attention: (output, [B, H, L] logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
    rng_state, unused, debug_attn_mask); the last three are the random state and debug mask."""
    _no_dropout(dropout_p)
    out, logsumexp, _ = _attention(cx, q, k, v, None, is_causal, scale)
    length, source = cx.expected[4], cx.expected[5]
    return (out, logsumexp, None, None, length, source, _rng_state(cx, 6, "random-number state"),
            _rng_state(cx, 7, "random-number offset"), _rng_state(cx, 8, "debug attention mask"))


@converts(A("_scaled_dot_product_flash_attention_backward"))
def flash_attention_backward(cx, grad_out, q, k, v, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
                             is_causal, philox_seed, philox_offset, *, scale=None):
    """(dq, dk, dv) of CUDA's flash attention (the random state is not read: no dropout)."""
    _no_dropout(dropout_p)
    return _attention_grads(cx, grad_out, q, k, v, out, cx.value(logsumexp), None, is_causal, scale)[:3]


@converts(A("_scaled_dot_product_efficient_attention"))
def efficient_attention(cx, q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *, scale=None):
    """CUDA's memory-efficient attention: (output, logsumexp, philox_seed, philox_offset); the logsumexp
    is [B, H, L rounded up to 32] (+inf in the padding, as torch's kernel writes it), or empty."""
    _no_dropout(dropout_p)
    _same_heads(q, k)
    out, logsumexp, _ = _attention(cx, q, k, v, attn_bias, is_causal, scale)
    padded = cx.expected[1].shape[-1]
    length = logsumexp.shape[-1]
    if not compute_log_sumexp or padded == 0:
        logsumexp = Missing("the logsumexp of memory-efficient attention called with compute_log_sumexp=False")
    elif padded != length:
        fill = cx.b.constant(math.inf, logsumexp.dtype, logsumexp.shape[:-1] + (padded - length,))
        logsumexp = cx.b.concat(logsumexp, fill, axis=logsumexp.type.rank - 1)
    return out, logsumexp, _rng_state(cx, 2, "philox seed"), _rng_state(cx, 3, "philox offset")


@converts(A("_scaled_dot_product_efficient_attention_backward"))
def efficient_attention_backward(cx, grad_out, q, k, v, attn_bias, out, logsumexp, philox_seed, philox_offset,
                                 dropout_p, grad_input_mask, is_causal=False, *, scale=None):
    """(dq, dk, dv, d attn_bias or None) of CUDA's memory-efficient attention; the saved logsumexp's
    query padding is dropped."""
    _no_dropout(dropout_p)
    _same_heads(q, k)
    logsumexp = cx.value(logsumexp)
    length = cx.value(q).shape[-2]
    if logsumexp.shape[-1] != length:
        rank = logsumexp.type.rank
        logsumexp = cx.b.slice(logsumexp, start=(0,) * rank, stop=logsumexp.shape[:-1] + (length,), step=(1,) * rank)
    dq, dk, dv, dmask = _attention_grads(cx, grad_out, q, k, v, out, logsumexp, attn_bias, is_causal, scale)
    wants_bias = attn_bias is not None and len(grad_input_mask) > 3 and grad_input_mask[3]
    return dq, dk, dv, (_bias_grad(cx, dmask, cx.value(attn_bias)) if wants_bias else None)


@converts(A("_scaled_dot_product_cudnn_attention"))
def cudnn_attention(cx, q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
                    return_debug_mask=False, *, scale=None):
    """CUDA's cuDNN attention: (output, [B, H, L, 1] logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
    philox_seed, philox_offset, debug_attn_mask)."""
    _no_dropout(dropout_p)
    out, logsumexp, _ = _attention(cx, q, k, v, attn_bias, is_causal, scale)
    logsumexp = cx.reshape(logsumexp, tuple(cx.expected[1].shape))
    return (out, logsumexp, None, None, cx.expected[4], cx.expected[5], _rng_state(cx, 6, "philox seed"),
            _rng_state(cx, 7, "philox offset"), None)


@converts(A("_scaled_dot_product_cudnn_attention_backward"))
def cudnn_attention_backward(cx, grad_out, q, k, v, out, logsumexp, philox_seed, philox_offset, attn_bias,
                             cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, *, scale=None):
    """(dq, dk, dv) of CUDA's cuDNN attention."""
    _no_dropout(dropout_p)
    logsumexp = cx.value(logsumexp)
    logsumexp = cx.reshape(logsumexp, logsumexp.shape[:3])
    return _attention_grads(cx, grad_out, q, k, v, out, logsumexp, attn_bias, is_causal, scale)[:3]


# ----- statistics ------------------------------------------------------------------------------------
@converts(torch.var_mean, A("var_mean"))
def var_mean(cx, x, dim=None, *args, correction=None, keepdim=False, unbiased=None):
    """(variance, mean) over `dim`; the correction as torch.var takes it (default 1)."""
    if args:  # var_mean(x, dim, unbiased, keepdim) or var_mean(x, unbiased)
        unbiased, *rest = args
        keepdim = rest[0] if rest else keepdim
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    if correction is None:
        correction = 0 if unbiased is False else 1
    x = cx.value(x, cx.out_dtype)
    axes = tuple(d % x.type.rank for d in ((dim,) if isinstance(dim, int) else dim)) if dim not in (None, [], ()) \
        else tuple(range(x.type.rank))
    count = int(np.prod([x.shape[a] for a in axes]))
    mean = cx.b.mean(x, axes=axes, keepdims=True)
    centered = cx.b.sub(x, mean)
    total = cx.b.sum(cx.b.mul(centered, centered), axes=axes, keepdims=bool(keepdim))
    variance = cx.b.div(total, cx.value(float(max(count - correction, 0)), x.dtype))
    return variance, (mean if keepdim else cx.reshape(mean, tuple(cx.expected[1].shape)))

