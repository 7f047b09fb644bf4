"""A kernel that starts with one convolution, run as torch.compile's default mode runs it: the convolution by the
vendor's library (torch's convolution: cuDNN on CUDA), then the kernel's other ops (a batch norm, a bias, a
residual add, ReLU, ...) as one generated Triton kernel over its result.

The epilogue kernel (`epilogue.py`) is the Program's own kernel without its first node, reading the convolution's
result as an input. It applies the batch norm after the convolution, in f32 registers, as eager and Inductor do,
and reads changed parameters on every call (CUDA graph replays included): two launches and one pass over the
result beyond the convolution's own, where folding the batch norm into the weights and running the epilogue as
torch ops took up to five. Like `library.MatmulCall`, a `ConvCall` stands in
for the kernel's @triton.jit function, and the tuner times it beside the generated kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tilegraph.ir.graph import Value
from tilegraph.ir.ops.linalg import conv_padding_end
from tilegraph.ir.program import Kernel

from .epilogue import Epilogue, epilogue_kernel
from .library import DTYPES, LibraryCall, Operand, inverse, precision
from .options import TritonOptions


@dataclass(frozen=True)
class ConvCall(LibraryCall):
    """`out = epilogue(conv2d(x, w))`: torch's convolution, then the generated epilogue writing `out` (without
    one, the convolution's result copied into `out`)."""

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
    epilogue: Epilogue | None = None
    # the weight as the convolution reads it, by memory format: (argument, its version, the copy); see `weights`
    _weights: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __call__(self, *args, num_warps: int | None = None, num_stages: int | None = None) -> None:
        import torch

        x, out = self.x.of(args), self.out.of(args)
        w = self.weights(torch, args, x)
        with torch.no_grad(), precision(torch, out, self.tf32, conv=True):
            y = torch.ops.aten.convolution(x, w, None, self.stride, self.padding, self.dilation, False, (0, 0),
                                           self.groups)
        if self.epilogue is None:
            out.copy_(y)
        else:
            self.epilogue(y, args)

    def weights(self, torch, args, x):
        """The weight argument in the memory format torch's convolution reads it in beside `x` (channels-last or
        contiguous), copied once per argument tensor and version, not on every call: weights stored permuted for
        the generated kernel's loads (`packing.py`) would otherwise be copied by every call. The cache holds the
        argument itself, so a new tensor (even at a reused address) is copied anew."""
        form = torch.channels_last if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) \
            and not x.is_contiguous() else torch.contiguous_format
        source = args[self.w.position]
        cached = self._weights.get(form)
        if cached is not None and cached[0] is source and cached[1] == source._version:
            return cached[2]
        w = self.w.of(args)
        if not w.is_contiguous(memory_format=form):
            with torch.no_grad():
                w = w.contiguous(memory_format=form)
            self._weights.clear()  # one weight per call: the copy of a replaced or changed one goes
            self._weights[form] = (source, source._version, w)
        return w


def conv_call(kernel: Kernel, args: tuple[Value, ...], layouts: dict[Value, tuple[int, ...]],
              options: TritonOptions, name: str, names: dict[Value, str] | None = None,
              interpreter: bool = False) -> ConvCall | None:
    """The library call computing `kernel` (whose generated function takes `args`), or None when the kernel is not
    a 2-D convolution of floats with symmetric padding, whose result only the kernel's other ops read, and those
    ops run over the convolution's output points (its parallel loops) alone. `names`, `interpreter`: as the
    module's (`module.generate`), for the epilogue kernel."""
    if kernel.template is not None or len(kernel.outputs) != 1:
        return None
    conv, *rest = kernel.nodes
    if conv.op != "conv2d" or tuple(conv_padding_end(conv.attrs)) != tuple(conv.attrs["padding"]):
        return None
    result = conv.result
    if result.type.dtype not in DTYPES or any(v.type.dtype != result.type.dtype for v in conv.inputs):
        return None
    if rest and result in kernel.outputs:
        return None
    position = {v: n for n, v in enumerate(args)}

    def operand(value: Value) -> Operand | None:
        if value not in position:
            return None
        order = layouts.get(value)
        return Operand(position[value], None if order is None else inverse(order))

    x, w, out = (operand(v) for v in (*conv.inputs, kernel.outputs[0]))
    epilogue = epilogue_kernel(kernel, 0, position, layouts, options, f"{name}_epilogue", names, interpreter,
                               layouts.get(conv.inputs[0])) if rest else None
    if None in (x, w, out) or (rest and epilogue is None):
        return None
    attrs = conv.attrs
    return ConvCall(name, x, w, out, tuple(attrs["stride"]), tuple(attrs["padding"]), tuple(attrs["dilation"]),
                    attrs["groups"], options.precision(conv.op) == "tf32", epilogue)


__all__ = ["ConvCall", "conv_call"]
