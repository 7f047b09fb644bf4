"""The layout pass: the storage order of tensors between kernels (`Program.layouts`), decided before tiling so
that the tile model counts each tile's contiguous runs in the order its tensor is stored.

Channels-last (`LayoutOptions.channels_last`): a 4-D float tensor that a convolution reads or writes is stored
NHWC, as Inductor lays out a convolutional network on a GPU, when every kernel touching it is a structured loop
nest of its own (not a reshape's view or a layout step, not a kernel template, not a matmul that a library call
may run through views). An implicit-GEMM convolution reduces over input channels: stored NCHW, a block of its
input is H x W elements apart along the channels; stored NHWC, contiguous (tensor cores and cuDNN both want
that). A depthwise convolution then tiles its channels, not its image rows, to keep its loads whole (the tile
model sees the contiguous axis). Graph inputs and outputs keep the caller's layout.

    layout{channels_last=false}   # no layouts: every tensor row-major
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tilegraph.ir.graph import Value
from tilegraph.ir.program import Kernel, Program
from tilegraph.ir.types import DType

from .registry import PassContext, register_pass

NHWC = (0, 2, 3, 1)  # NCHW's axes in channels-last storage order
FLOATS = (DType.f16, DType.bf16, DType.f32)
PRODUCTS = ("matmul", "batch_matmul")  # may run as library calls reading tensors through views


@dataclass(frozen=True)
class LayoutOptions:
    channels_last: bool = True  # store convolutions' 4-D activations NHWC


def channels_last(program: Program) -> tuple[tuple[Value, tuple[int, ...]], ...]:
    """(value, NHWC) for each tensor between kernels that a convolution reads or writes and that only
    structured loop nests touch, in the order kernels first write them."""
    users: dict[Value, list[Kernel]] = {}
    for kernel in program.kernels:
        for value in (*kernel.inputs, *kernel.outputs):
            users.setdefault(value, []).append(kernel)
    returned = set(program.graph.outputs)
    between = [v for kernel in program.kernels for v in kernel.outputs if v not in returned]
    return tuple((value, NHWC) for value in between
                 if value.type.rank == 4 and value.type.dtype in FLOATS
                 and all(_structured(k) for k in users[value]) and any(_convolves(k, value) for k in users[value]))


def _structured(kernel: Kernel) -> bool:
    """Whether the kernel is a generated loop nest that no library call reads through views."""
    return kernel.template is None and kernel.domain.structured and not any(n.op in PRODUCTS for n in kernel.nodes)


def _convolves(kernel: Kernel, value: Value) -> bool:
    """Whether `value` is the input or the result of the convolution `kernel` starts with."""
    conv = kernel.nodes[0]
    return conv.op == "conv2d" and (value is conv.inputs[0] or value in kernel.outputs)


@register_pass("layout", LayoutOptions, requires={"fused"}, ensures={"laid_out"},
               preserves={"canonical", "decomposed", "fused"})
def layout(program: Program, options: LayoutOptions, ctx: PassContext) -> Program:
    """Choose the storage order of the tensors between kernels (channels-last around convolutions)."""
    layouts = channels_last(program) if options.channels_last else ()
    ctx.stat("layout", "channels-last tensors", len(layouts))
    return replace(program, layouts=layouts)


__all__ = ["layout", "LayoutOptions", "channels_last", "NHWC"]
