"""The generated Python module: helpers, one `@triton.jit` function per kernel, one launch step per kernel.

Tensors are named after the IR values they hold (`names.tensor_names`): graph inputs and
parameters come in as arguments of the steps, intermediates are views into one byte arena laid out
by `tilegraph.backends.arena` (from the memory plan where it has one, else by liveness), graph
outputs get their own tensors. Step `step_<kernel>` binds the kernel's outputs, launches it and
returns them:

    def step_k0(dev, warps, stages, arena, x, w):
        # kernel k0 (generic): matmul, relu
        v1 = _view(arena, 0, 6660, (37, 45), torch.float32)
        kernel_k0[(1,)](x, w, v1, num_warps=warps, num_stages=stages)
        return (v1,)

A kernel equal to an earlier one up to names (the same layer repeated) is not emitted again:
`kernel_k17 = kernel_k5` binds it to the first, so Triton compiles it once. `STEPS` lists the steps
in Program order; the runtime passes each the tensors it reads (its
arguments after `arena`) and keeps what it returns under the names it binds. Layout kernels (reshape, concat, gather) are data movement,
done with torch in their step; a kernel that only reshapes an intermediate is a view of its bytes
(`arena.view_sources`), not a copy. Helpers appear only where a kernel calls them. The text depends only
on the Program, so the same Program always gives the same source.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from tilegraph.backends.arena import Arena, plan_arena
from tilegraph.ir import TilegraphError
from tilegraph.ir.graph import Value
from tilegraph.ir.ops.layout import concat_windows
from tilegraph.ir.program import Kernel, Program
from tilegraph.ir.types import DType

from .autotune import canonical
from .kernel import KernelSource, emit_kernel
from .options import TritonOptions
from .packing import plan_layouts
from .names import identifier, kernel_functions, mangle, tensor_names
from .scalar import HELPERS

TORCH_DTYPE = {DType.f32: "torch.float32", DType.f16: "torch.float16", DType.bf16: "torch.bfloat16",
               DType.i32: "torch.int32", DType.i64: "torch.int64", DType.bool: "torch.bool"}


# The generated module's helper for arena-backed tensors.
ARENA_VIEW = '''def _view(arena, offset, nbytes, shape, dtype):
    return arena[offset:offset + nbytes].view(dtype).view(shape)
'''

# The fixed arguments of every step, before the tensors it reads.
STEP_ARGS = ("dev", "warps", "stages", "arena")


@dataclass
class GeneratedModule:
    """The module text and what the runtime needs to call it."""

    text: str
    names: dict[Value, str]  # every tensor's name in the module (steps' arguments and results)
    kernels: list[KernelSource | None]  # None for a layout step
    arena: Arena
    steps: list[tuple[tuple[Value, ...], tuple[Value, ...]]]  # per step: tensors it reads, it returns
    # parameters the launcher binds with their axes in this order (`packing.py`)
    layouts: dict[Value, tuple[int, ...]] = field(default_factory=dict)


def _shape(value: Value) -> str:
    dims = value.type.shape
    return "(" + ", ".join(map(str, dims)) + ("," if len(dims) == 1 else "") + ")"


def _bind(value: Value, name: str, arena: Arena) -> str:
    """The line that gives a kernel output its storage: a view into the arena, or its own tensor."""
    dtype = TORCH_DTYPE[value.type.dtype]
    if value in arena.offsets:
        return f"    {name} = _view(arena, {arena.offsets[value]}, {value.type.nbytes}, {_shape(value)}, {dtype})"
    return f"    {name} = torch.empty({_shape(value)}, dtype={dtype}, device=dev)"


def _layout_expr(kernel: Kernel, names: dict[Value, str]) -> str:
    """A torch expression computing the one layout node of `kernel` (no iteration space)."""
    (node,) = kernel.nodes
    ins = [names[v] for v in node.inputs]
    if node.op == "reshape":
        return f"{ins[0]}.reshape({_shape(node.result)})"
    if node.op == "concat":
        axis = int(node.attrs["axis"])
        windows = concat_windows(node.inputs, node.attrs)
        parts = [name if (start, size) == (0, v.type.shape[axis]) else f"{name}.narrow({axis}, {start}, {size})"
                 for name, v, (start, size) in zip(ins, node.inputs, windows)]
        return f"torch.cat([{', '.join(parts)}], dim={axis})"
    if node.op == "gather":
        axis = int(node.attrs["axis"])
        size = node.inputs[0].type.shape[axis]
        return (f"torch.index_select({ins[0]}, {axis}, ({ins[1]}.reshape(-1).long() % {size}))"
                f".reshape({_shape(node.result)})")
    raise TilegraphError(f"kernel {kernel.name}: op {node.op!r} has no iteration space and no Triton lowering "
                         "(only reshape, concat and gather run as data movement)")


def _layout_step(kernel: Kernel, names: dict[Value, str], arena: Arena) -> list[str]:
    """Torch code for a layout kernel: the result copied into its arena view, or kept as a new tensor."""
    node = kernel.nodes[0]
    result = node.result
    out, expr = names[result], _layout_expr(kernel, names)
    if result in arena.offsets:
        if node.op == "concat":  # written in place: one pass, not a new tensor and a copy
            return [_bind(result, out, arena), f"    {expr[:-1]}, out={out})"]
        return [_bind(result, out, arena), f"    {out}.copy_({expr})"]
    return [f"    {out} = ({expr}).contiguous()"]


_JIT = re.compile(r"@triton\.jit\ndef (\w+)\(")


def _helpers(used: str) -> str:
    """The `@triton.jit` helpers of `HELPERS` that `used` calls, and those they call."""
    chunks = [c for c in re.split(r"\n(?=@triton\.jit\n)", HELPERS.strip("\n") + "\n") if c.strip()]
    by_name = {_JIT.match(c).group(1): c for c in chunks}
    wanted: set[str] = set()
    todo = [name for name in by_name if re.search(rf"\b{name}\(", used)]
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            body = by_name[name].split("\n", 2)[2]
            todo += [other for other in by_name if re.search(rf"\b{other}\(", body)]
    return "".join(f"\n{by_name[name].rstrip()}\n\n" for name in by_name if name in wanted)


def generate(program: Program, interpreter: bool = False, options: TritonOptions | None = None) -> GeneratedModule:
    """The whole module for a fused, tiled Program (TilegraphError names any unsupported kernel).
    `interpreter`: for Triton's CPU interpreter, whose bf16 tl.dot returns garbage (Triton 3.9), bf16
    products are widened to f32 there; the GPU source keeps them on the tensor cores. `options`: the
    f32 products' precision (default: torch's flags now, `TritonOptions.from_torch`)."""
    options = options if options is not None else TritonOptions.from_torch()

    graph = program.graph
    names, _ = tensor_names(program)
    functions = kernel_functions(program)
    arena = plan_arena(program, program.kernels, views=True)
    layouts = plan_layouts(program, options)
    kernels: list[str] = []
    steps: list[str] = []
    step_names: list[str] = []
    io: list[tuple[tuple[Value, ...], tuple[Value, ...]]] = []
    sources: list[KernelSource | None] = []
    first_of: dict[str, str] = {}  # kernel text up to names -> the function emitted for it
    aliases: list[str] = []
    for kernel in program.kernels:
        domain = kernel.domain
        ops = ", ".join(identifier(n.op) for n in kernel.nodes)
        step = f"step_{functions[kernel.name][len('kernel_'):]}"
        reads, writes = tuple(dict.fromkeys(kernel.inputs)), tuple(kernel.outputs)
        step_names.append(step)
        io.append((reads, writes))
        steps.append(f"def {step}({', '.join([*STEP_ARGS, *(names[v] for v in reads)])}):")
        steps.append(f"    # kernel {mangle(kernel.name, prefix='')} ({kernel.kind}): {ops}")
        if kernel.outputs[0] in arena.views:  # a reshape: a view of its input's bytes, no copy
            steps.append(f"    {names[kernel.outputs[0]]} = {_layout_expr(kernel, names)}")
            sources.append(None)
        elif not domain.structured:
            steps.extend(_layout_step(kernel, names, arena))
            sources.append(None)
        else:
            source = emit_kernel(kernel, domain, functions[kernel.name], interpreter, names, options, layouts)
            sources.append(source)
            same = first_of.setdefault(canonical(source.text), source.function)
            if same == source.function:
                kernels.append(source.text)
            else:  # Triton compiles each function once: a repeated layer's kernels reuse the first one's
                aliases.append(f"{source.function} = {same}  # the same kernel up to names")
            for value in writes:
                steps.append(_bind(value, names[value], arena))
            args = ", ".join(names[v] for v in source.args)
            steps.append(f"    {source.function}[({source.grid},)]({args}, num_warps=warps, num_stages=stages)")
        steps.append(f"    return {_tuple(names[v] for v in writes)}")
        steps.append("")
        steps.append("")
    used = "\n".join(kernels + steps)
    parts = ['"""Generated by tilegraph (Triton backend). Do not edit."""',
             "import torch", "import triton", "import triton.language as tl", ""]
    helpers = _helpers(used)
    if helpers:
        parts.append(helpers)
    if "_view(" in used:
        parts.append(ARENA_VIEW)
    parts.extend(kernels)
    if aliases:
        parts.extend(["", *aliases, ""])
    parts.append("")
    parts.extend(steps)
    parts.append(f"STEPS = [{', '.join(step_names)}]")
    parts.append(f"ARENA_BYTES = {arena.size}  # {arena.source}")
    if layouts:
        packed = ", ".join(f"{names[v]}: {list(order)}" for v, order in layouts.items())
        parts.append(f"# parameters bound with permuted axes: {packed}")
    parts.append(f"# outputs: {', '.join(names[v] for v in graph.outputs)}")
    return GeneratedModule("\n".join(parts) + "\n", names, sources, arena, io, layouts)


def _tuple(items) -> str:
    items = list(items)
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


__all__ = ["generate", "GeneratedModule", "TORCH_DTYPE"]
