"""One arena for every tensor that lives between kernels (not graph inputs, params or outputs).

Shared by the executable backends. Offsets come from the Program's memory plan when it gives
every such tensor one place for its whole life without overlaps; otherwise from a liveness-based
first-fit plan: a tensor lives from the kernel that writes it to the last kernel that reads it,
and tensors whose lives do not intersect share bytes. Sizes come from the backend (`size_of`),
since backends store some dtypes differently (C++ holds bf16 in a float, Triton in 2 bytes).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tilegraph.ir.graph import Value
from tilegraph.ir.program import Kernel, Program
from tilegraph.ir.types import TensorType

ALIGN = 64

SizeOf = Callable[[TensorType], int]


def natural_size(value_type: TensorType) -> int:
    """Bytes of a tensor stored at its dtype's own width."""
    return value_type.nbytes


@dataclass(frozen=True)
class Arena:
    """Byte offsets of the arena tensors, the arena size, and where the offsets came from."""

    offsets: dict[Value, int]
    size: int
    source: str  # "memory plan" | "liveness" | "liveness (memory plan spills or moves tensors)"


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def arena_values(program: Program, kernels: Sequence[Kernel], exclude: frozenset[Value] = frozenset()) -> list[Value]:
    """Kernel outputs that are not graph outputs (nor in `exclude`), in the order kernels write them."""
    outputs = set(program.graph.outputs) | exclude
    return [v for k in kernels for v in k.outputs if v not in outputs]


def lifetimes(kernels: Sequence[Kernel], values: Sequence[Value]) -> dict[Value, tuple[int, int]]:
    """Per value: (step writing it, last step reading it), steps being positions in `kernels`."""
    step_of = {node: t for t, k in enumerate(kernels) for node in k.nodes}
    out = {}
    for v in values:
        start = step_of[v.producer]
        end = max((step_of[u] for u in v.users if u in step_of), default=start)
        out[v] = (start, max(start, end))
    return out


def _overlaps(offsets: dict[Value, int], life: dict[Value, tuple[int, int]], size_of: SizeOf) -> bool:
    items = list(offsets.items())
    for n, (a, oa) in enumerate(items):
        for b, ob in items[n + 1:]:
            (sa, ea), (sb, eb) = life[a], life[b]
            if sa <= eb and sb <= ea and oa < ob + size_of(b.type) and ob < oa + size_of(a.type):
                return True
    return False


def _from_memory_plan(plan, values: Sequence[Value], life, size_of: SizeOf) -> dict[Value, int] | None:
    """The plan's offsets when each arena tensor has exactly one residency and none overlap."""
    offsets = {}
    for v in values:
        stays = plan.residencies_of(v.name)
        if len(stays) != 1 or stays[0].offset % ALIGN:
            return None
        offsets[v] = stays[0].offset
    return None if _overlaps(offsets, life, size_of) else offsets


def first_fit(values: Sequence[Value], life: dict[Value, tuple[int, int]], size_of: SizeOf) -> dict[Value, int]:
    """Place values in write order at the lowest aligned offset free over their whole life."""
    placed: list[tuple[int, int, Value]] = []
    offsets: dict[Value, int] = {}
    for v in values:
        size = align(max(size_of(v.type), 1))
        start, end = life[v]
        busy = sorted((o, o + align(max(size_of(w.type), 1))) for o, _, w in placed
                      if life[w][0] <= end and start <= life[w][1])
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        offsets[v] = offset
        placed.append((offset, size, v))
    return offsets


def plan_arena(program: Program, kernels: Sequence[Kernel], size_of: SizeOf = natural_size,
               exclude: frozenset[Value] = frozenset()) -> Arena:
    """Arena offsets for the kernels in execution order; `exclude`: values that live elsewhere
    (folded at load time)."""
    values = arena_values(program, kernels, exclude)
    life = lifetimes(kernels, values)
    offsets, source = None, "liveness"
    if program.memory_plan is not None:
        offsets = _from_memory_plan(program.memory_plan, values, life, size_of)
        source = "memory plan" if offsets is not None else "liveness (memory plan spills or moves tensors)"
    if offsets is None:
        offsets = first_fit(values, life, size_of)
    size = max((o + align(max(size_of(v.type), 1)) for v, o in offsets.items()), default=0)
    return Arena(offsets, size, source)


__all__ = ["ALIGN", "Arena", "align", "arena_values", "first_fit", "lifetimes", "natural_size", "plan_arena"]
