"""A kernel that starts with one convolution, run as torch.compile's default mode runs it: the convolution by the
vendor's library (torch's convolution: cuDNN on CUDA), then the kernel's other ops (a batch norm, a bias, a
residual add, ReLU, ...) as one generated Triton kernel over its result.

The epilogue kernel is the Program's own kernel without its first node: the same ops, emitted by the same
`KernelEmitter`, reading the convolution's result as an input, and tiled as the Program tiled the kernel's
parallel loops (so it runs on the kernel's own grid). It applies the batch norm after the convolution, in f32
registers, as eager and Inductor do, and reads changed parameters on every call (CUDA graph replays included):
two launches and one pass over the result beyond the convolution's own, where folding the batch norm into the
weights and running the epilogue as torch ops took up to five. Like `library.MatmulCall`, a `ConvCall` stands in
for the kernel's @triton.jit function, and the tuner times it beside the generated kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tilegraph.ir.graph import Value
from tilegraph.ir.ops.linalg import conv_padding_end
from tilegraph.ir.program import Kernel
from tilegraph.ir.structured import PARALLEL

from .autotune import DEFAULT
from .library import DTYPES, LibraryCall, Operand, inverse, precision
from .options import TritonOptions


@dataclass(frozen=True)
class Epilogue:
    """The kernel's ops after its convolution as one generated Triton function `fn` (source `text`), launched on
    `grid` programs of `warps` warps with the kernel's arguments at `args` (None: the convolution's result, which
    it reads stored with its axes in `order`: the order of the convolution's input, which torch's convolution
    follows)."""

    fn: object
    text: str
    grid: int
    args: tuple[int | None, ...]
    order: tuple[int, ...] | None = None
    warps: int = DEFAULT[0]
    # compiled binaries by their pointers' 16-byte alignment (what Triton specialises them on), bound on first use
    _bound: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __call__(self, result, args) -> None:
        # as the kernel addresses it (a copy only where torch picked another layout)
        result = result.contiguous() if self.order is None else result.permute(*self.order).contiguous()
        tensors = [result if n is None else args[n] for n in self.args]
        if not result.is_cuda:  # the Triton interpreter
            self.fn[(self.grid,)](*tensors, num_warps=self.warps)
            return
        key = tuple(t.data_ptr() % 16 == 0 for t in tensors)
        run = self._bound.get(key)
        if run is None:
            from .launch import Compiling, compiled_runner

            run = compiled_runner(self.fn, self.grid, tensors, self.warps, 1)
            self._bound[key] = run = run.result() if isinstance(run, Compiling) else run
        run(*tensors)


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
    epilogue = epilogue_kernel(kernel, position, layouts, options, f"{name}_epilogue", names, interpreter) \
        if rest else None
    if None in (x, w, out) or (rest and epilogue is None):
        return None
    attrs = conv.attrs
    return ConvCall(name, x, w, out, tuple(attrs["stride"]), tuple(attrs["padding"]), tuple(attrs["dilation"]),
                    attrs["groups"], options.precision(conv.op) == "tf32", epilogue)


def epilogue_kernel(kernel: Kernel, position: dict[Value, int], layouts: dict[Value, tuple[int, ...]],
                    options: TritonOptions, function: str, names: dict[Value, str] | None = None,
                    interpreter: bool = False) -> Epilogue | None:
    """`kernel` without its first node, generated and loaded as `function`; None where a loop of it is not one of
    the kernel's parallel loops, it has a tl.dot, or it reads a tensor that is not a kernel argument."""
    from .kernel import KernelEmitter
    from .module import kernel_module
    from .runtime import load_module

    conv = kernel.nodes[0]
    part = Kernel(f"{kernel.name}_epilogue", kernel.nodes[1:])
    tiles = _parallel_tiles(kernel, part)
    if tiles is None:
        return None
    part = part.with_tiles(tiles)
    order = layouts.get(conv.inputs[0])
    stored = layouts if order is None else {**layouts, conv.result: order}
    source = KernelEmitter(part, part.domain, function, interpreter, names, options, stored).emit()
    if source.uses_dot or any(v is not conv.result and v not in position for v in source.args):
        return None
    module = load_module(kernel_module(source.text))
    return Epilogue(getattr(module, source.function), source.text, source.grid,
                    tuple(None if v is conv.result else position[v] for v in source.args), order)


def _parallel_tiles(kernel: Kernel, part: Kernel) -> tuple[tuple[str, int], ...] | None:
    """`part`'s tiles (part: some of kernel's nodes): each of its loops tiled as the kernel's loop it is, which
    must be parallel in both; None otherwise."""
    whole, domain = kernel.domain, part.domain
    if not domain.structured:
        return None
    sizes = dict(kernel.tiles)
    of: dict[int, int] = {}  # part's loop -> kernel's loop
    for i, node in enumerate(domain.nodes):
        for own, loop in enumerate(domain.node_loops[i]):
            if loop is not None:
                of.setdefault(loop, whole.node_loops[whole.index(node)][own])
    tiles = []
    for k, loop in enumerate(domain.loops):
        outer = of.get(k)
        if loop.kind != PARALLEL or outer is None or whole.loops[outer].kind != PARALLEL:
            return None
        tiles.append((loop.name, sizes.get(whole.loops[outer].name, loop.extent)))
    return tuple(tiles)


__all__ = ["ConvCall", "Epilogue", "conv_call", "epilogue_kernel"]
