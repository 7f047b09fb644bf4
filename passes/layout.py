"""The layout pass: the storage order of tensors between kernels (`Program.layouts`), decided before tiling so
that the tile model counts each tile's contiguous runs in the order its tensor is stored.

Channels-last (`LayoutOptions.channels_last`): a 4-D float tensor that a convolution reads or writes is stored
NHWC, as Inductor lays out a convolutional network on a GPU, when every kernel touching it is a structured loop
nest of its own (not a reshape's view or a layout step, not a kernel template, not a matmul that a library call
may run through views). An implicit-GEMM convolution reduces over input channels: stored NCHW, a block of its
input is H x W elements apart along the channels; stored NHWC, contiguous (tensor cores and cuDNN both want
that). A depthwise convolution then tiles its channels, not its image rows, to keep its loads whole (the tile
model sees the contiguous axis). Graph inputs and outputs keep the caller's layout.

A graph input that a convolution reads (`copy_inputs_from` bytes or more, its channels whole 16-byte vectors) is
copied NHWC first, by a kernel of its own (`<input>_nhwc`: a `cast` to its own dtype, stored channels-last), and the
convolution reads the copy. Read NCHW, a window shifted by one pixel along the image row leaves the loads
misaligned: on an H200 the ResNet-18 block's first 3x3 convolution, over its NCHW input, took 0.087 ms (f32, batch
32; 96 of its loads one element wide) where the second, over the block's NHWC activations, took 0.063 (bf16:
0.077 against 0.036); the copy moves the input twice at copy bandwidth (0.012 ms f32). Small inputs stay as they
are: at batch 1 the two convolutions differ by 1 us, less than the copy's launch.

    layout{channels_last=false}   # no layouts: every tensor row-major
    layout{copy_inputs_from=0}    # copy every eligible graph input, whatever its size
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


VECTOR_BYTES = 16  # a channels-last pixel of whole vectors keeps a shifted window's loads aligned


@dataclass(frozen=True)
class LayoutOptions:
    channels_last: bool = True  # store convolutions' 4-D activations NHWC
    copy_inputs_from: int = 4 << 20  # bytes: a graph input a convolution reads, this big or bigger, copied NHWC


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


def inputs_to_copy(program: Program, smallest: int) -> tuple[Value, ...]:
    """The graph inputs of `smallest` bytes or more that a structured kernel's leading convolution reads, 4-D floats
    whose channels fill whole vectors, in graph order."""
    read = {k.nodes[0].inputs[0] for k in program.kernels if _structured(k) and k.nodes[0].op == "conv2d"}
    return tuple(v for v in program.graph.inputs
                 if v in read and v.type.rank == 4 and v.type.dtype in FLOATS and v.type.nbytes >= smallest
                 and v.type.shape[1] * v.type.dtype.itemsize % VECTOR_BYTES == 0)


def copy_inputs(program: Program, inputs: tuple[Value, ...]) -> Program:
    """`program` on a clone of its graph where each of `inputs` is copied (a `cast` to its own dtype, a kernel of its
    own, just before the first kernel reading it) and every leading convolution reading it reads the copy."""
    graph = program.graph.clone()  # (a pass works on a clone; Graph.clone keeps the order of values and nodes)
    node_of = dict(zip(program.graph.nodes, graph.nodes))
    value_of = dict(zip((*program.graph.inputs, *program.graph.params), (*graph.inputs, *graph.params)))
    kernels = [Kernel(k.name, tuple(node_of[n] for n in k.nodes), k.tiles, k.kind) for k in program.kernels]
    for original in inputs:
        value = value_of[original]
        convs = [k for k in kernels if k.nodes[0].op == "conv2d" and k.nodes[0].inputs[0] is value and _structured(k)]
        first = min(kernels.index(k) for k in kernels if value in k.inputs)
        copy = graph.create_node("cast", (value,), {"dtype": value.type.dtype}, name=f"{value.name}_nhwc",
                                 before=kernels[first].nodes[0], loc=convs[0].nodes[0].loc)
        for kernel in convs:
            graph.set_input(kernel.nodes[0], 0, copy.result)
        kernels.insert(first, Kernel(copy.result.name, (copy,)))  # (value names are unique, kernels' k<n>)
        kernels = [Kernel(k.name, k.nodes, k.tiles, k.kind) for k in kernels]  # (their inputs changed: no cache)
    return replace(program, graph=graph, kernels=tuple(kernels))


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
    """Choose the storage order of the tensors between kernels (channels-last around convolutions, big graph
    inputs they read copied channels-last first)."""
    if not options.channels_last:
        return replace(program, layouts=())
    copied = inputs_to_copy(program, options.copy_inputs_from)
    if copied:
        program = copy_inputs(program, copied)
    layouts = channels_last(program)
    ctx.stat("layout", "channels-last tensors", len(layouts))
    ctx.stat("layout", "graph inputs copied channels-last", len(copied))
    return replace(program, layouts=layouts)


__all__ = ["layout", "LayoutOptions", "channels_last", "inputs_to_copy", "copy_inputs", "NHWC"]
