"""Activations stored channels-last (NHWC) around convolutions (`TritonOptions.channels_last`, the default), as Inductor
lays out a convolutional network on a GPU.

An implicit-GEMM convolution reduces over input channels. Stored NCHW, a block of its input is contiguous along the
output pixels (M) and H x W elements apart along the channels (K): TF32 tensor cores read both operands K-major, and
cuDNN's tensor-core kernels want NHWC (on NCHW tensors torch's convolution is slower or transposes). Stored NHWC,
the same block is contiguous along K. `plan` picks the activations to store so: 4-D intermediates in the arena
that a convolution reads or writes, when every kernel touching them is a generated loop nest (a layout step, a
reshape's view, a template, a matmul's library call read tensors as they are), and the weights of convolutions
whose input is stored so (NHWC's [F, kh, kw, C], K-major for the generated kernel too, and what cuDNN wants
beside an NHWC input). Graph inputs and outputs keep their layout. Like `packing.py`'s parameters, a planned
tensor is held permuted (its storage order as its shape) and every kernel addresses it with the permuted strides.
"""
from __future__ import annotations

from tilegraph.backends.arena import Arena
from tilegraph.ir.graph import Value, ValueKind
from tilegraph.ir.program import Kernel, Program
from tilegraph.ir.types import DType

from .packing import moves

NHWC = (0, 2, 3, 1)  # NCHW's axes in channels-last storage order
FLOATS = (DType.f16, DType.bf16, DType.f32)
PRODUCTS = ("matmul", "batch_matmul")  # read by a library call through views that need their own layout


def plan(program: Program, arena: Arena) -> dict[Value, tuple[int, ...]]:
    """Value -> NHWC, for the activations (and convolution weights) stored channels-last."""
    users: dict[Value, list[Kernel]] = {}
    for kernel in program.kernels:
        for value in (*kernel.inputs, *kernel.outputs):
            users.setdefault(value, []).append(kernel)
    shared = set(arena.views) | set(arena.views.values())
    chosen: dict[Value, tuple[int, ...]] = {}
    for value, kernels in users.items():
        if (value in arena.offsets and value not in shared and value.type.rank == 4
                and value.type.dtype in FLOATS and all(_generated(k) for k in kernels)
                and any(_convolves(k, value) for k in kernels)):
            chosen[value] = NHWC
    for kernel in program.kernels:
        conv = kernel.nodes[0]
        weight = conv.inputs[1] if conv.op == "conv2d" else None
        if weight is not None and conv.inputs[0] in chosen and weight.kind is ValueKind.PARAM \
                and len(users[weight]) == 1 and moves(weight, NHWC):  # (a 1 x 1 or depthwise filter's do not)
            chosen[weight] = NHWC
    return chosen


def _generated(kernel: Kernel) -> bool:
    """Whether the kernel is a generated loop nest that no library call reads through views."""
    return kernel.template is None and kernel.domain.structured and not any(n.op in PRODUCTS for n in kernel.nodes)


def _convolves(kernel: Kernel, value: Value) -> bool:
    """Whether `value` is the input or the result of the convolution `kernel` starts with."""
    conv = kernel.nodes[0]
    return conv.op == "conv2d" and (value is conv.inputs[0] or value in kernel.outputs)


__all__ = ["plan", "NHWC"]
