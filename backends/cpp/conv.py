"""Channel blocks: register blocks over output channels for strided convolutions, weights repacked once.

A strided convolution (NCHW) reads its input with a stride along the output row, so the row
blocks of `microkernel.py` gather every input vector (ResNet-50's stride-2 layers ran at 25-75
GF/s against 300-450 for stride 1); an output row narrower than a vector leaves most of its lanes
idle (`narrow_row`). Here the block's vector loop `v` is the output-channel loop
instead, the block's rows `u` the output row's positions: each step of the reduction loads NR
weights as whole vectors and broadcasts MR input elements. The weights must then be contiguous
along the channels, so the weight tensor is repacked once, when the program loads (`WeightPack`,
evaluated with the folded values, `fold.py`), in blocks of one vector of channels (OIHW ->
O/16 I H W 16o, zero-padded): each vector a block loads walks one contiguous stream over the
whole reduction. Activations keep their NCHW layout. Which nodes qualify is read off the affine maps, not the op name: a sum of products
with a load-time constant operand indexed by one loop per axis, and another operand that does
not move with that operand's channel loop but is strided along the output's unit-stride loop.
Depthwise convolutions (the input moves with every output channel) keep the row blocks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tilegraph.ir.graph import Value, ValueKind
from tilegraph.ir.structured import AffineMap

from .buffers import GlobalBuffer, affine_text, linear, row_major_strides


@dataclass(frozen=True)
class WeightPack:
    """A load-time copy of constant `source` in blocks of `block` along axis `axis` (zero-padded
    to whole blocks), the block index outermost, then the other axes in order, the block's
    elements innermost (OIHW -> O/16 I H W 16o; a matmul's weight [K, N] -> [N/16, K, 16]): the
    weights one vector of a register block reads over the whole reduction are contiguous."""

    source: Value
    axis: int
    block: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The packed array's shape: (blocks, other axes..., block)."""
        shape = self.source.type.shape
        rest = tuple(n for a, n in enumerate(shape) if a != self.axis)
        return (-(-shape[self.axis] // self.block), *rest, self.block)

    @property
    def nbytes(self) -> int:
        """The packed copy's size: what it holds beside the caller's array."""
        return math.prod(self.shape) * self.source.type.dtype.itemsize

    def index(self, amap, var) -> str:
        """The C index of the element a (kernel-loop) map selects."""
        shape = self.source.type.shape
        rest = [a for a in range(len(shape)) if a != self.axis]
        strides = row_major_strides(self.shape)
        coeffs, const = linear(AffineMap(tuple(amap.exprs[a] for a in rest)), strides[1:-1])
        channel = amap.exprs[self.axis]
        at = affine_text(dict(channel.terms), channel.const, var)
        inner = affine_text(coeffs, const, var)
        return f"(({at}) / {self.block}) * {strides[0]} + ({at}) % {self.block} + {inner}"

    def steps(self, amap) -> dict[int, int]:
        """Elements per step of each loop (one for the channel loop, within a block)."""
        shape = self.source.type.shape
        strides = row_major_strides(self.shape)
        rest = [a for a in range(len(shape)) if a != self.axis]
        coeffs, _ = linear(AffineMap(tuple(amap.exprs[a] for a in rest)), strides[1:-1])
        for d, c in amap.exprs[self.axis].terms:
            coeffs[d] = coeffs.get(d, 0) + c
        return coeffs

    def apply(self, array: np.ndarray) -> np.ndarray:
        """The packed array of the source's value `array` (C order, zeros in the padding)."""
        moved = np.moveaxis(array, self.axis, -1)
        blocks = self.shape[0]
        if moved.shape[-1] != blocks * self.block:  # a partial last block: zero-pad first (a copy more)
            padded = np.zeros((*moved.shape[:-1], blocks * self.block), dtype=moved.dtype)
            padded[..., :moved.shape[-1]] = moved
            moved = padded
        blocked = moved.reshape(*moved.shape[:-1], blocks, self.block)
        return np.ascontiguousarray(np.moveaxis(blocked, -2, 0))  # (the one copy of whole blocks)


@dataclass
class PackedBuffer(GlobalBuffer):
    """A kernel input read from its `WeightPack` (same maps, the packed storage's indices)."""

    pack: WeightPack | None = None

    def lvalue(self, amap, var) -> str:
        return f"{self.ptr}[{self.pack.index(amap, var)}]"


@dataclass(frozen=True)
class ChannelPlan:
    """Node `node`'s register block: `v` (output channels, vectors) by `u` (the output row),
    its operand `operand` read from `pack`."""

    node: int
    u: int
    v: int
    operand: int
    pack: WeightPack


def plan_channels(emitter, i: int, keep: list[int], inputs) -> ChannelPlan | None:
    """The channel block of node i of `emitter` (a RegisterBlocks), or None when the row blocks
    serve it. `keep`: its output loops outermost first (the last has unit output stride);
    `inputs`: the kernel's inputs."""
    width = emitter.dialect.vector_width
    domain = emitter.domain
    node, space = domain.nodes[i], domain.spaces[i]
    if not width or len(keep) < 2 or len(node.inputs) != 2 or not emitter._vectorizable(i, keep[-1]):
        return None
    row = keep[-1]
    maps = [domain.compose_map(i, m) for m in space.inputs]
    for n, (weight, amap) in enumerate(zip(node.inputs, maps)):
        other, omap = node.inputs[1 - n], maps[1 - n]
        if weight not in inputs or not load_time(weight, emitter.folded) or amap.pad is not None:
            continue
        axes = [dict(e.terms) for e in amap.exprs]
        steps = linear(omap, row_major_strides(other.type.shape))[0]
        channels = [k for t in axes for k in t if k in keep and k != row and not steps.get(k, 0)]
        if len(channels) != 1 or (abs(steps.get(row, 0)) <= 1 and not narrow_row(emitter, row, channels[0])) \
                or any(e.const for e in amap.exprs):
            continue
        v = channels[0]
        axis = next(a for a, t in enumerate(axes) if v in t)
        # one loop per axis, but the channel axis may hold whole blocks of another (groups of a
        # multiple of `width` filters: g * F/G + f)
        if any(len(t) > 1 or any(c != 1 for c in t.values()) for a, t in enumerate(axes) if a != axis) or \
                axes[axis][v] != 1 or any(c % width for k, c in axes[axis].items() if k != v):
            continue
        return ChannelPlan(i, row, v, n, WeightPack(weight, axis, width))
    return None


def narrow_row(emitter, row: int, channel: int) -> bool:
    """Whether the output row is narrower than one vector while the output channels fill whole vectors, so that
    channel blocks use every lane where row blocks (and flat blocks over rows and columns, `flatrows.py`) leave
    some idle: ResNet-50's 7 x 7 stage ran its 3 x 3 convolutions at 77 GFLOP/s on one thread, 106 on channel
    blocks."""
    width = emitter.dialect.vector_width
    return emitter.extents[row] < width and emitter.extents[channel] % width == 0


def load_time(value: Value, folded) -> bool:
    """Whether `value` is known when the program loads (a parameter or a folded value)."""
    return value.kind is ValueKind.PARAM or (value.producer is not None and value.producer in folded)


def row_blocks(span: int, cap: int) -> int:
    """MR for a row of `span` positions: the largest block up to `cap` that divides it, if one
    of at least cap/2 does (no partial block), else `cap`."""
    for mr in range(min(cap, span), max(1, cap // 2) - 1, -1):
        if span % mr == 0:
            return mr
    return min(cap, span)
