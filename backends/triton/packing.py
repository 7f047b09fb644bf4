"""Parameters stored with their axes permuted, so that a tl.dot loads them as contiguous 2-D blocks.

An implicit-GEMM convolution walks kh and kw one at a time and reads its weight w[f, c, kh, kw] as a
[c, f] block per step: 9 elements apart along c and 576 along f for a 3x3 convolution over 64
channels, so every element of the block is its own memory sector. Stored as w[kh, kw, f, c], the
same block is contiguous along c, the reduction: K-major, as Hopper's wgmma reads TF32 operands
from shared memory, so cp.async stages it in 16-byte vectors (the sm_90 build of the ResNet
block's convolutions: 4-byte copies before). `plan_layouts` picks, per parameter, the axis order its
dot reads want: the axes of loops walked one at a time first, then its M (or N) axes, then K (an IEEE
f32 dot's B: K, then N). A parameter that two reads want in different orders, that a layout step
(torch) reads, or that no dot reads as a 2-D block keeps its own layout. The launcher binds the permuted copy
once (`permuted`); every address the kernels compute for the parameter uses the permuted strides
(`KernelEmitter.offsets`). Like the C++ backend's weight packs, this is how the backend lays out data it
owns, not a decision of the Program's; activations are stored as the Program's `layouts` say, and a
convolution's weight follows its input there (`conv_weights`).
"""
from __future__ import annotations

from tilegraph.ir.graph import Value, ValueKind
from tilegraph.ir.program import Kernel, Program
from tilegraph.ir.types import DType

from .options import TritonOptions


def _wanted(emitter, i: int, plan, which: int) -> tuple[Value, tuple[int, ...]] | None:
    """(parameter, axis order) operand `which` of dot node i wants, or None (not a parameter, or its map
    is not one loop per axis)."""
    node, space = emitter.domain.nodes[i], emitter.domain.spaces[i]
    value = node.inputs[plan.args[which]]
    if value.kind is not ValueKind.PARAM or plan.bs or len(plan.ks) > 1 or len(plan.ms if which == 0 else plan.ns) > 1:
        return None  # not read as a plain 2-D block (the dot's other side may span several loops)
    amap = emitter.domain.compose_map(i, space.inputs[plan.args[which]])
    if amap.pad is not None or any(len(e.terms) != 1 or e.const or e.terms[0][1] != 1 for e in amap.exprs):
        return None
    loop_of = [e.terms[0][0] for e in amap.exprs]
    # tensor cores read both operands K-major (TF32 only so); a dot on FMA units spreads its lanes along
    # N, so its B is fastest read N-major ([in, out]; K-major made BERT's matmuls 10x slower on an H200)
    n_major = which == 1 and emitter.on_fma(i, plan)
    rank = {d: 0 for d in loop_of if emitter.loops[d].block == 1}
    rank.update({d: 2 if n_major else 1 for d in (plan.ms if which == 0 else plan.ns)})
    rank.update({d: 1 if n_major else 2 for d in plan.ks})
    if any(d not in rank for d in loop_of):
        return None
    order = tuple(sorted(range(len(loop_of)), key=lambda axis: (rank[loop_of[axis]], axis)))
    return value, order


def kernel_dots(program: Program, options: TritonOptions) -> list[tuple[Kernel, object, list[tuple[int, object]]]]:
    """Per kernel: (kernel, its emitter, [(node index, DotPlan)] of its dots); the emitter is None for a kernel
    that reads its inputs as they are (torch code for a layout step, or a template). What `plan_layouts` and
    `tf32_params` read, computed once per module."""
    from .kernel import KernelEmitter

    found = []
    for kernel in program.kernels:
        if not kernel.domain.structured or kernel.template is not None:
            found.append((kernel, None, []))
            continue
        emitter = KernelEmitter(kernel, kernel.domain, "kernel_layout", options=options)
        plans = [(i, emitter.dot_plan(i)) for i in range(len(kernel.domain.nodes))]
        found.append((kernel, emitter, [(i, plan) for i, plan in plans if plan is not None]))
    return found


def plan_layouts(program: Program, options: TritonOptions, dots: list | None = None) -> dict[Value, tuple[int, ...]]:
    """Parameter -> the axis order it is stored in (`perm` of a transpose), for those not kept as they are.
    `dots`: `kernel_dots(program, options)`, if already computed."""
    wanted: dict[Value, set[tuple[int, ...]]] = {}
    kept: set[Value] = set()
    for kernel, emitter, plans in dots if dots is not None else kernel_dots(program, options):
        if emitter is None:
            kept.update(kernel.inputs)  # read as it is: by torch code (a layout step), or by a template
            continue
        reads: dict[Value, set[tuple[int, ...]]] = {}
        for i, plan in plans:
            for which in (0, 1):
                found = _wanted(emitter, i, plan, which)
                if found is not None:
                    reads.setdefault(found[0], set()).add(found[1])
        for value in kernel.inputs:
            if value.kind is ValueKind.PARAM:
                if value in reads and sum(n.inputs.count(value) for n in kernel.nodes) == 1:
                    wanted.setdefault(value, set()).update(reads[value])
                else:
                    kept.add(value)  # also read elementwise, or twice: its own layout
    chosen = {}
    for value, orders in wanted.items():
        if value not in kept and len(orders) == 1:
            (order,) = orders
            if moves(value, order):
                chosen[value] = order
    return chosen


DEPTHWISE = (1, 2, 3, 0)  # a depthwise filter [C, 1, kh, kw] stored [1, kh, kw, C]: channels innermost


def conv_weights(program: Program, activations: dict[Value, tuple[int, ...]]) -> dict[Value, tuple[int, ...]]:
    """Weights stored like the input of the one convolution reading them, where that input is stored
    channels-last (`Program.layouts`): [F, kh, kw, C], K-major for the generated kernel, and what cuDNN wants
    beside an NHWC input (a 1 x 1 filter's elements do not move). A depthwise filter is stored [1, kh, kw, C]:
    its kernel takes a block of channels a program, which then loads each tap's weights as one vector."""
    readers: dict[Value, int] = {}
    for kernel in program.kernels:
        for value in kernel.inputs:
            readers[value] = readers.get(value, 0) + 1
    chosen = {}
    for kernel in program.kernels:
        conv = kernel.nodes[0]
        if conv.op != "conv2d" or conv.inputs[0] not in activations:
            continue
        weight, order = conv.inputs[1], activations[conv.inputs[0]]
        if conv.attrs.get("groups", 1) > 1 and weight.type.shape[1] == 1:
            order = DEPTHWISE
        if weight.kind is ValueKind.PARAM and readers[weight] == 1 and moves(weight, order):
            chosen[weight] = order
    return chosen


def tf32_params(program: Program, options: TritonOptions, dots: list | None = None) -> frozenset[Value]:
    """f32 parameters that only TF32 dots read, directly: bound rounded to nearest TF32 once (`to_tf32`), as
    cuBLAS and cuDNN round their operands, so the kernels need not round them (`DotMixin.dot_product`) on the
    way to a wgmma's shared-memory operand. A parameter also read otherwise (an elementwise op, a copy, torch
    code, a template) keeps its f32 values and is rounded in the kernel. `dots`: as for `plan_layouts`."""
    dot_read: set[Value] = set()
    other: set[Value] = set()
    for kernel, emitter, plans in dots if dots is not None else kernel_dots(program, options):
        params = [v for v in kernel.inputs if v.kind is ValueKind.PARAM and v.type.dtype is DType.f32]
        if emitter is None:
            other.update(params)
            continue
        reads: dict[Value, int] = {}
        for i, plan in plans:
            node = kernel.domain.nodes[i]
            if options.precision(node.op) == "tf32":
                for j in plan.args[:2]:
                    reads[node.inputs[j]] = reads.get(node.inputs[j], 0) + 1
        for value in params:
            (dot_read if reads.get(value, 0) == sum(n.inputs.count(value) for n in kernel.nodes) else other).add(value)
    return frozenset(dot_read - other)


def to_tf32(tensor):
    """An f32 tensor rounded to nearest TF32 (10 mantissa bits, ties away from zero), as a new tensor."""
    import torch

    tensor = tensor.contiguous()
    rounded = ((tensor.view(torch.int32) + 0x1000) & -0x2000).view(torch.float32)
    return torch.where(torch.isnan(tensor), tensor, rounded)


def moves(value: Value, order: tuple[int, ...]) -> bool:
    """Whether storing `value` with its axes in `order` moves any element (axes of one element do not)."""
    shape = value.type.shape
    return [a for a in order if shape[a] > 1] != [a for a in range(len(shape)) if shape[a] > 1]


def stored_shape(value: Value, order: tuple[int, ...] | None) -> tuple[int, ...]:
    """`value`'s shape with its axes in storage order `order` (None: as it is): how a tensor stored permuted
    is bound, so that torch code reading it (a library call) sees its axes where they are."""
    shape = value.type.shape
    return shape if order is None else tuple(shape[axis] for axis in order)


def permuted(tensor, order: tuple[int, ...]):
    """The parameter as the kernels read it: its axes in `order`, contiguous (a copy)."""
    return tensor.permute(*order).contiguous()


__all__ = ["kernel_dots", "plan_layouts", "conv_weights", "tf32_params", "to_tf32", "stored_shape", "permuted",
           "moves"]
