"""A kernel that is one matmul (a bias or residual add, and up to two elementwise ops after it) run by the vendor's
library: `torch.matmul` or `torch.addmm`, so cuBLAS on CUDA, as torch.compile's default mode runs every matmul, then
the ops: one in place as a torch kernel (as eager rounds it), two as one generated kernel over the product
(`epilogue.py`; a gated MLP's SiLU and product in one pass, as Inductor fuses them).

The tuner times it beside the generated kernel's block-size variants and keeps whichever is faster, so a
matmul that cuBLAS does better (most of a transformer's projections; an IEEE f32 product, which Triton runs
on FMA units) gets cuBLAS, and one that the fused Triton kernel does better keeps it. A `LibraryCall` stands in
for the kernel's @triton.jit function: `call[grid](*args, num_warps=..., num_stages=...)` takes the kernel's own
arguments, in order, and writes its output in place, so the walk, the direct launches and CUDA graphs run it
unchanged. It computes what the kernel computes, with the kernel's precision (an f32 product in TF32 exactly
when the program was built so); parameters stored permuted for the kernel's loads (`packing.py`) are read
back through the inverse permutation, without a copy. `TILEGRAPH_LIBRARY_CALLS=0` leaves them out (every kernel
then runs as generated: what `benchmarks/triton_gpu.py`'s matmul row measures).
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass

from tilegraph.ir.graph import Node, Value
from tilegraph.ir.program import Kernel
from tilegraph.ir.switches import switched_on
from tilegraph.ir.types import DType

from .epilogue import Epilogue, epilogue_kernel
from .options import TritonOptions

CONTRACTIONS = ("matmul", "batch_matmul")  # the ops torch.matmul computes with the same broadcasting
DTYPES = (DType.f16, DType.bf16, DType.f32)
SWITCH = "TILEGRAPH_LIBRARY_CALLS"


def enabled() -> bool:
    """Whether the tuner times library calls: unless $TILEGRAPH_LIBRARY_CALLS is 0 (or off, false, no)."""
    return switched_on(SWITCH)


@dataclass(frozen=True)
class Operand:
    """One tensor of the call: the kernel argument at `position`, its axes permuted by `unpermute` (the inverse of
    the order a packed parameter is stored in; None: as it is), then viewed as `shape` (a row-major reshape in
    the kernel; None: as it is)."""

    position: int
    unpermute: tuple[int, ...] | None = None
    shape: tuple[int, ...] | None = None

    def of(self, args):
        tensor = args[self.position]
        if self.unpermute is not None:
            tensor = tensor.permute(*self.unpermute)
        return tensor if self.shape is None else tensor.view(self.shape)


# what a library call applies to its product in place, one torch kernel each (each rounds to the dtype, as eager)
UNARY = {
    "relu": lambda torch, x, attrs: torch.clamp_min(x, 0, out=x),
    "relu6": lambda torch, x, attrs: torch.clamp(x, 0, 6, out=x),
    "silu": lambda torch, x, attrs: torch.ops.aten.silu.out(x, out=x),
    "gelu": lambda torch, x, attrs: torch.ops.aten.gelu.out(x, approximate=attrs, out=x),
    "tanh": lambda torch, x, attrs: torch.tanh(x, out=x),
    "sigmoid": lambda torch, x, attrs: torch.sigmoid(x, out=x),
}
LABEL = "library (torch)"  # the candidate's name in the tuner's timings: cuBLAS or cuDNN through torch
BINARY = ("add", "sub", "mul", "div")
MAX_EPILOGUE = 2  # elementwise ops after the product and its add


@dataclass(frozen=True)
class Step:
    """One elementwise op on the product: `op` (unary, with its `attrs`: gelu's approximation), or binary with
    `other` (a kernel argument), the product its first operand unless `second`; on the product as `shape` (a
    reshape of its rows before the op; None: the product's own)."""

    op: str
    attrs: str | None = None
    other: Operand | None = None
    second: bool = False
    shape: tuple[int, ...] | None = None

    def apply(self, torch, x, args) -> None:
        """x's op, in place."""
        if self.other is None:
            UNARY[self.op](torch, x, self.attrs)
            return
        other = self.other.of(args)
        getattr(torch, self.op)(*((other, x) if self.second else (x, other)), out=x)


class LibraryCall:
    """A kernel run by the vendor's library through torch (`MatmulCall`: cuBLAS; `library_conv.ConvCall`: cuDNN).
    It stands in for the kernel's @triton.jit function: `call[grid](*args, num_warps=..., num_stages=...)` takes
    the kernel's own arguments and writes its output in place; there is nothing to compile."""

    library = "torch"  # what runs it, for reports

    def __getitem__(self, grid) -> LibraryCall:
        return self


@dataclass(frozen=True)
class MatmulCall(LibraryCall):
    """`out = epilogue(a @ b (+ c))` on the kernel's arguments: the steps in place, or `fused`, the steps as one
    generated kernel reading the product (where there are two and it could be generated)."""

    name: str
    a: Operand
    b: Operand
    out: Operand
    c: Operand | None
    tf32: bool
    epilogue: tuple[Step, ...] = ()
    fused: Epilogue | None = None

    @property
    def library(self) -> str:  # (for reports)
        return "torch.matmul" + (", its epilogue generated" if self.fused is not None else "")

    def __call__(self, *args, num_warps: int | None = None, num_stages: int | None = None) -> None:
        import torch

        a, b, out = self.a.of(args), self.b.of(args), self.out.of(args)
        # the product and its add: into the output, or into a buffer of its own that the fused epilogue reads
        product = out if self.fused is None else torch.empty(out.shape, dtype=out.dtype, device=out.device)
        # no autograd, as for the Triton kernels (out= refuses operands that require grad, such as a module's
        # weights read in place)
        with torch.no_grad(), precision(torch, out, self.tf32):
            c = None if self.c is None else self.c.of(args)
            rows = None if c is None else _rows(a, b, c, product)
            if rows is not None:  # one cuBLAS call with the add in its epilogue
                torch.addmm(rows[2], rows[0], rows[1], out=rows[3])
            else:
                torch.matmul(a, b, out=product)
                if c is not None:
                    product.add_(c)
            if self.fused is not None:
                self.fused(product, args)
                return
            for step in self.epilogue:
                step.apply(torch, product if step.shape is None else product.view(step.shape), args)


def inverse(order: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation undoing `order` (a packed parameter's stored axis order)."""
    inverse = [0] * len(order)
    for axis, source in enumerate(order):
        inverse[source] = axis
    return tuple(inverse)


def _rows(a, b, c, out):
    """(a, b, c, out) as addmm takes them ([M, K] @ [K, N] + c, c of [N] or [M, N]), or None when a view
    would need a copy (a batched b, a c that is neither a row nor the whole result)."""
    if b.dim() != 2 or not out.is_contiguous() or not a.is_contiguous():
        return None
    n = out.shape[-1]
    rows = out.reshape(-1, n)
    if c.numel() == n and c.shape[-1] == n:  # a bias row
        return a.reshape(-1, a.shape[-1]), b, c.reshape(n), rows
    if tuple(c.shape) == tuple(out.shape) and c.is_contiguous():  # a residual
        return a.reshape(-1, a.shape[-1]), b, c.reshape(-1, n), rows
    return None


@contextmanager
def precision(torch, out, tf32: bool, conv: bool = False):
    """torch's f32 matmul (`conv`: cuDNN convolution) precision set to the program's for the call where they
    differ (CUDA f32 only; restored after). Read and set through `allow_tf32`, the flag the build read
    (`TritonOptions.from_torch`), or through `fp32_precision` where the caller set that one: torch refuses a read
    of one after the other set another."""
    if out.dtype != torch.float32 or out.device.type != "cuda":
        yield
        return
    old = torch.backends.cudnn if conv else torch.backends.cuda.matmul
    with warnings.catch_warnings():  # newer torch deprecates the allow_tf32 spelling
        warnings.simplefilter("ignore")
        try:
            flags, name, before = old, "allow_tf32", bool(old.allow_tf32)
            wanted = tf32
        except RuntimeError:
            flags = torch.backends.cudnn.conv if conv else old
            name, before = "fp32_precision", flags.fp32_precision
            wanted = "tf32" if tf32 else "ieee"
        if before != wanted:
            setattr(flags, name, wanted)
    try:
        yield
    finally:
        if before != wanted:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                setattr(flags, name, before)


def library_call(kernel: Kernel, args: tuple[Value, ...], layouts: dict[Value, tuple[int, ...]],
                 options: TritonOptions, name: str, names: dict[Value, str] | None = None,
                 interpreter: bool = False) -> MatmulCall | None:
    """The library call computing `kernel` (whose generated function takes `args`), or None when the kernel is
    not one matmul of floats, optionally followed by an add of a kernel input and up to MAX_EPILOGUE elementwise
    ops, with reshapes of its inputs before it and of its result between and after them. `names`,
    `interpreter`: as the module's (`module.generate`), for a fused epilogue."""
    if kernel.template is not None:
        return None
    nodes = list(kernel.nodes)
    reshaped: dict[Value, Value] = {}  # a reshape in the kernel of an argument stored as it is -> that argument
    while nodes and nodes[0].op == "reshape" and nodes[0].inputs[0] in args and nodes[0].inputs[0] not in layouts:
        reshaped[nodes[0].result] = nodes[0].inputs[0]
        nodes.pop(0)
    written = kernel.outputs[0] if len(kernel.outputs) == 1 else None
    tail = nodes.pop() if nodes and nodes[-1].op == "reshape" and nodes[-1].result is written else None
    if not nodes or written is None:
        return None
    product, *rest = nodes
    if product.op not in CONTRACTIONS or any(len(v.type.shape) < 2 for v in product.inputs):
        return None
    result, c, applied = product.result, None, []
    for n, node in enumerate(rest):
        if node.op == "reshape" and node.inputs[0] is result:  # its rows reshaped: a view of the same bytes
            result = node.result
            continue
        if node.inputs.count(result) != 1 or node.result.type != result.type:
            return None
        others = [v for v in node.inputs if v is not result]
        if n == 0 and node.op == "add":  # a bias or residual: addmm's
            (c,) = others
        elif node.op in UNARY and not others:
            applied.append((node, None))
        elif node.op in BINARY and len(others) == 1:
            applied.append((node, others[0]))
        else:
            return None
        result = node.result
    if len(applied) > MAX_EPILOGUE or (tail.inputs[0] if tail is not None else written) is not result:
        return None
    extra = [other for _, other in applied if other is not None]
    operands = (*product.inputs, product.result) + ((c,) if c is not None else ())
    if any(v.type.dtype != result.type.dtype for v in (*operands, *extra)) or result.type.dtype not in DTYPES:
        return None
    position = {v: n for n, v in enumerate(args)}
    if written not in position:
        return None

    def operand(value: Value) -> Operand | None:
        if value is product.result:  # the kernel's output, as the product's shape
            shape = value.type.shape
            return Operand(position[written], None, None if written.type.shape == shape else shape)
        source = reshaped.get(value, value)
        if source not in position:
            return None
        order = layouts.get(source)
        return Operand(position[source], None if order is None else inverse(order),
                       value.type.shape if source is not value else None)

    found = [operand(v) for v in (*operands, *extra)]
    if any(o is None for o in found):
        return None
    others = iter(found[len(operands):])
    product_shape = product.result.type.shape

    def step(node: Node, other: Value | None) -> Step:
        shape = None if node.result.type.shape == product_shape else node.result.type.shape
        if other is None:
            return Step(node.op, node.attrs.get("approximate"), shape=shape)
        return Step(node.op, None, next(others), second=node.inputs[1] is not other, shape=shape)

    steps = tuple(step(node, other) for node, other in applied)
    fused = None
    if len(steps) > 1:  # one pass over the product for both, not one each
        head = kernel.nodes.index(rest[0] if c is not None else product)  # (the add rides with the product)
        fused = epilogue_kernel(kernel, head, position, layouts, options, f"{name}_epilogue", names, interpreter)
    return MatmulCall(name, found[0], found[1], found[2], found[3] if c is not None else None,
                      options.precision(product.op) == "tf32", steps, fused)


__all__ = ["LibraryCall", "MatmulCall", "Operand", "Step", "library_call", "inverse", "precision", "enabled",
           "SWITCH", "LABEL"]
