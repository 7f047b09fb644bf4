"""A kernel that is one convolution, a per-channel affine after it (a batch norm as the canonical passes leave it:
sub, mul, add by [C, 1, 1] parameters; a bias) and up to two elementwise ops (a residual add, ReLU, ...), run by
the vendor's library: torch's convolution (cuDNN on CUDA), as torch.compile's default mode runs convolutions.

The affine part is folded into the call on every call (weights scaled per output channel: a pass over the
weights, which ResNet-50's activations outweigh twenty-fold at batch 32; the shift added as the first pass over
the result), so a changed parameter is read on the next call, CUDA graph replays included. Each op after the
convolution's result (which torch allocates: its out= variant copies anyway) writes the kernel's output, the
first from that result, the rest in place. Like `library.MatmulCall`, a `ConvCall` stands in for the
kernel's @triton.jit function, and the tuner times it beside the generated kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

from tilegraph.ir.graph import Node, Value
from tilegraph.ir.ops.linalg import conv_padding_end
from tilegraph.ir.program import Kernel

from .library import BINARY, DTYPES, MAX_EPILOGUE, UNARY, LibraryCall, Operand, Step, inverse, precision
from .options import TritonOptions

AFFINE = ("add", "sub", "mul")  # per-channel ops folded into the convolution's weights and bias


@dataclass(frozen=True)
class Affine:
    """`result = result <op> other`, other a per-output-channel kernel argument (C elements)."""

    op: str
    other: Operand


@dataclass(frozen=True)
class ConvCall(LibraryCall):
    """`out = epilogue(conv2d(x, w) * scale + shift)`, scale and shift composed from `affine`."""

    library = "torch convolution"

    name: str
    x: Operand
    w: Operand
    out: Operand
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    tf32: bool
    affine: tuple[Affine, ...] = ()
    epilogue: tuple[Step, ...] = ()

    def __call__(self, *args, num_warps: int | None = None, num_stages: int | None = None) -> None:
        import torch

        x, w, out = self.x.of(args), self.w.of(args), self.out.of(args)
        with torch.no_grad(), precision(torch, out, self.tf32, conv=True):
            scale, shift = self.folded(torch, args)
            if scale is not None:
                w = w * scale.view(-1, 1, 1, 1)
            # torch adds a convolution's bias in a pass of its own, so the shift is the first op writing `out`
            y = torch.ops.aten.convolution(x, w, None, self.stride, self.padding, self.dilation, False, (0, 0),
                                           self.groups)
            if shift is not None:
                y = torch.add(y, shift.view(-1, 1, 1), out=out)
            for step in self.epilogue:
                y = step.apply(torch, y, args, out)
            if y is not out:
                out.copy_(y)

    def folded(self, torch, args):
        """(scale, shift) per output channel, or None for an identity part; one small kernel for a batch norm
        ((y - m) * s + b: scale s, shift b - m * s), each one a launch inside a CUDA graph too."""
        if tuple(step.op for step in self.affine) == ("sub", "mul", "add"):
            m, s, b = (step.other.of(args).reshape(-1) for step in self.affine)
            return s, torch.addcmul(b, m, s, value=-1)
        scale = shift = None
        for step in self.affine:
            c = step.other.of(args).reshape(-1)
            if step.op == "mul":
                scale = c if scale is None else scale * c
                shift = None if shift is None else shift * c
            else:
                c = c if step.op == "add" else -c
                shift = c if shift is None else shift + c
        return scale, shift


def conv_call(kernel: Kernel, args: tuple[Value, ...], layouts: dict[Value, tuple[int, ...]],
              options: TritonOptions, name: str) -> ConvCall | None:
    """The library call computing `kernel` (whose generated function takes `args`), or None when the kernel is not
    one 2-D convolution of floats with symmetric padding, followed by per-channel adds, subs and muls of kernel
    arguments and then up to MAX_EPILOGUE elementwise ops."""
    if kernel.template is not None or len(kernel.outputs) != 1:
        return None
    conv, *rest = kernel.nodes
    written = kernel.outputs[0]
    if conv.op != "conv2d" or tuple(conv_padding_end(conv.attrs)) != tuple(conv.attrs["padding"]):
        return None
    result = conv.result
    if result.type.dtype not in DTYPES or any(v.type.dtype != result.type.dtype for v in conv.inputs):
        return None
    channels = result.type.shape[1]
    position = {v: n for n, v in enumerate(args)}

    def operand(value: Value) -> Operand | None:
        if value not in position:
            return None
        order = layouts.get(value)
        return Operand(position[value], None if order is None else inverse(order))

    def other_of(node: Node) -> Value | None:
        """The node's operand beside the running result, when it is one binary op on it."""
        others = [v for v in node.inputs if v is not result]
        return others[0] if len(others) == 1 and node.inputs.count(result) == 1 else None

    affine, steps = [], []
    for node in rest:
        if node.result.type != result.type:
            return None
        other = other_of(node) if node.op in BINARY else None
        per_channel = other is not None and other.type.dtype == result.type.dtype and _per_channel(other, channels)
        if (not steps and per_channel and node.op in AFFINE
                and (node.op != "sub" or node.inputs[0] is result)):  # result - c folds; c - result does not
            found = operand(other)
            if found is None:
                return None
            affine.append(Affine(node.op, found))
        elif node.op in UNARY and node.inputs == (result,):
            steps.append(Step(node.op, node.attrs.get("approximate")))
        elif other is not None and other.type.dtype == result.type.dtype:
            found = operand(other)
            if found is None:
                return None
            steps.append(Step(node.op, None, found, second=node.inputs[1] is not other))
        else:
            return None
        result = node.result
    x, w, out = (operand(v) for v in (*conv.inputs, written))
    if len(steps) > MAX_EPILOGUE or result is not written or None in (x, w, out):
        return None
    attrs = conv.attrs
    return ConvCall(name, x, w, out, tuple(attrs["stride"]), tuple(attrs["padding"]), tuple(attrs["dilation"]),
                    attrs["groups"], options.precision(conv.op) == "tf32", tuple(affine), tuple(steps))


def _per_channel(value: Value, channels: int) -> bool:
    """Whether `value` holds one element per output channel, broadcast over [N, C, H, W] ([C, 1, 1] or [1, C, 1, 1])."""
    shape = value.type.shape
    return len(shape) >= 3 and shape[-3] == channels and all(d == 1 for d in shape[-2:]) \
        and all(d == 1 for d in shape[:-3])


__all__ = ["ConvCall", "Affine", "conv_call"]
