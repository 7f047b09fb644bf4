"""One arena for every tensor that lives between kernels (not graph inputs, params or outputs).

Shared by the executable backends. Offsets come from the Program's memory plan when it gives
every such tensor one place for its whole life without overlaps; otherwise from a liveness-based
first-fit plan: a tensor lives from the kernel that writes it to the last kernel that reads it,
and tensors whose lives do not intersect share bytes. Sizes come from the backend (`size_of`),
since backends store some dtypes differently (C++ holds bf16 in a float, Triton in 2 bytes).

A backend that binds tensors to storage at run time (`views=True`, Triton) makes a kernel that only
reshapes a tensor a view of it (`view_sources`): a row-major reshape keeps the bytes in their order,
so the result shares its source's bytes (whose life then runs to the view's last reader) and nothing is
copied; GPT-2's qkv split, a [rows, 2304] -> [batch, tokens, 2304] reshape between the projection and
attention, copied 36 MiB a layer at batch 32.

A backend that can copy between steps (`copies=True`, the C++ backend) executes any memory plan
whose offsets are aligned: the arena is the plan's scratchpad, spills and reloads are `Copy`s to
and from a far pool behind it, and tensors the plan streams live in the far pool throughout.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tilegraph.ir.graph import Value
from tilegraph.ir.program import Kernel, Program
from tilegraph.ir.types import DType, TensorType

ALIGN = 64

SizeOf = Callable[[TensorType], int]


def natural_size(value_type: TensorType) -> int:
    """Bytes of a tensor stored at its dtype's own width."""
    return value_type.nbytes


@dataclass(frozen=True)
class Copy:
    """A copy the entry point makes for an executed plan: `load` (far pool -> arena) just before
    the kernel at position `step` runs, `store` (arena -> far pool) just after it."""

    step: int
    kind: str  # "load" | "store"
    value: Value
    near: int  # arena offset
    far: int  # far-pool offset
    bytes: int


@dataclass(frozen=True)
class Arena:
    """Byte offsets of the arena tensors, the arena size, and where the offsets came from.

    `offsets` is where each tensor is produced; with an executed plan, `copies` move tensors
    between the arena and the far pool (`far`: far-pool offsets of spilled and streamed tensors,
    `streamed`: those that live only there)."""

    offsets: dict[Value, int]
    size: int
    source: str  # "memory plan" | "liveness" | "liveness (memory plan <why it was not taken>)"
    far: dict[Value, int] = field(default_factory=dict)
    far_size: int = 0
    copies: tuple[Copy, ...] = ()
    streamed: frozenset[Value] = frozenset()
    refused: str = ""  # why a memory plan was not executed, when there was one
    views: dict[Value, Value] = field(default_factory=dict)  # a reshape's result -> the tensor whose bytes it shares

    @property
    def total(self) -> int:
        """Bytes of the arena and the far pool behind it (at `far_base`)."""
        return self.far_base + self.far_size

    @property
    def far_base(self) -> int:
        return align(self.size) if self.far_size else self.size

    @property
    def end(self) -> int:
        """The aligned end of the arena and the far pool: where a backend's own working memory may follow."""
        return align(self.total)


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def arena_values(program: Program, kernels: Sequence[Kernel], exclude: frozenset[Value] = frozenset()) -> list[Value]:
    """Kernel outputs that are not graph outputs (nor in `exclude`), in the order kernels write them."""
    outputs = set(program.graph.outputs) | exclude
    return [v for k in kernels for v in k.outputs if v not in outputs]


def view_sources(program: Program, kernels: Sequence[Kernel]) -> dict[Value, Value]:
    """Results of kernels that only reshape a tensor (not graph outputs, which get tensors of their own) ->
    the tensor whose bytes they share (through a chain of such reshapes, the first)."""
    outputs = set(program.graph.outputs)
    views: dict[Value, Value] = {}
    for kernel in kernels:
        if len(kernel.nodes) == 1 and kernel.nodes[0].op == "reshape" and kernel.nodes[0].result not in outputs:
            source = kernel.nodes[0].inputs[0]
            views[kernel.nodes[0].result] = views.get(source, source)
    return views


def lifetimes(kernels: Sequence[Kernel], values: Sequence[Value],
              views: dict[Value, Value] | None = None) -> dict[Value, tuple[int, int]]:
    """Per value: (step writing it, last step reading it or a view of it), steps being positions in `kernels`."""
    step_of = {node: t for t, k in enumerate(kernels) for node in k.nodes}
    readers: dict[Value, list] = {v: list(v.users) for v in values}
    for view, source in (views or {}).items():
        if source in readers:
            readers[source] += view.users
    out = {}
    for v in values:
        start = step_of[v.producer]
        end = max((step_of[u] for u in readers[v] if u in step_of), default=start)
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
               exclude: frozenset[Value] = frozenset(), copies: bool = False, views: bool = False) -> Arena:
    """Arena offsets for the kernels in execution order; `exclude`: values that live elsewhere
    (folded at load time); `copies`: the backend executes spills, reloads and streamed tensors; `views`: the
    backend makes reshapes views (`view_sources`; not under a memory plan, which placed every tensor)."""
    plan = program.memory_plan
    shared = view_sources(program, kernels) if views and plan is None else {}
    values = [v for v in arena_values(program, kernels, exclude) if v not in shared]
    life = lifetimes(kernels, values, shared)
    source, refused = "liveness", ""
    if plan is not None and copies:
        executed = execute_plan(plan, kernels, values, life, size_of)
        if isinstance(executed, Arena):
            return executed
        source, refused = f"liveness (memory plan {executed})", f"the plan {executed}"
    offsets = None
    if plan is not None and not copies:
        offsets = _from_memory_plan(plan, values, life, size_of)
        source = "memory plan" if offsets is not None else "liveness (memory plan spills or moves tensors)"
    if offsets is None:
        offsets = first_fit(values, life, size_of)
    size = max((o + align(max(size_of(v.type), 1)) for v, o in offsets.items()), default=0)
    return Arena(offsets, size, source, refused=refused, views=shared)


def execute_plan(plan, kernels: Sequence[Kernel], values: Sequence[Value], life: dict[Value, tuple[int, int]],
                 size_of: SizeOf) -> Arena | str:
    """The Arena that carries out `plan` for `kernels` (a subsequence of its order: kernels folded at
    load time are gone), or why it cannot: every residency becomes an arena offset, every spill and
    reload of an arena tensor a Copy at the nearest kernel that runs, every streamed tensor a far slot."""
    step_of = {name: t for t, name in enumerate(plan.order)}
    if any(k.name not in step_of for k in kernels):
        return "orders kernels this program lacks"
    steps = [step_of[k.name] for k in kernels]
    if steps != sorted(steps):
        return "orders the kernels differently"

    def before(step: int) -> int:  # the first kernel that runs at or after plan step `step`
        return next((p for p, s in enumerate(steps) if s >= step), len(steps) - 1)

    def after(step: int) -> int:  # the last kernel that runs at or before plan step `step`
        return max((p for p, s in enumerate(steps) if s <= step), default=0)

    streamed = set(plan.streamed)
    stays_of: dict[str, list] = {}
    for r in sorted(plan.residencies, key=lambda r: r.start):
        stays_of.setdefault(r.tensor, []).append(r)
    events_of: dict[str, list] = {}
    for e in plan.events:
        events_of.setdefault(e.tensor, []).append(e)
    offsets: dict[Value, int] = {}
    far_life: dict[Value, tuple[int, int]] = {}
    moves: list[tuple[int, str, Value, int]] = []  # position, kind, value, arena offset
    for v in values:
        stays = stays_of.get(v.name, [])
        if not stays:
            if v.name not in streamed and size_of(v.type):
                return f"has no place for %{v.name}"
            far_life[v] = life[v]
            continue
        for r in stays:
            if r.offset % ALIGN:
                return f"puts %{v.name} at offset {r.offset}, not a multiple of {ALIGN} (plan with memplan{{align={ALIGN}}})"
            if size_of(v.type) > r.size:
                wide = " (bf16 held in 4-byte floats)" if v.type.dtype is DType.bf16 else ""
                return f"gives %{v.name} {r.size} B; this backend stores it in {size_of(v.type)} B{wide}"
        offsets[v] = stays[0].offset
        stay_at = {r.start: r for r in stays}
        mine = []  # this tensor's copies: (position, kind, arena offset)
        for e in events_of.get(v.name, ()):
            if e.kind == "load":
                mine.append((before(e.step), "load", stay_at[e.step].offset))
            else:
                covering = next(r for r in stays if r.start <= e.step <= r.end)
                mine.append((after(e.step), "store", covering.offset))
        if mine:
            moves += [(p, kind, v, near) for p, kind, near in mine]
            far_life[v] = (min(p for p, _, _ in mine), max(p for p, _, _ in mine))
    # largest first (TFLite Micro's greedy-by-size): big streamed tensors in a chain share bytes
    far = first_fit(sorted(far_life, key=lambda v: (-size_of(v.type), far_life[v][0], v.name)), far_life, size_of)
    copies = tuple(Copy(p, kind, v, near, far[v], size_of(v.type))
                   for p, kind, v, near in sorted(moves, key=lambda m: (m[0], m[1] == "load", m[2].name)))
    far_size = max((o + align(max(size_of(v.type), 1)) for v, o in far.items()), default=0)
    streamed_here = frozenset(far_life) - {v for _, _, v, _ in moves}
    spills = sum(c.kind == "store" for c in copies)
    source = f"memory plan ({spills} spill(s), {len(streamed_here)} streamed)" if far_life else "memory plan"
    return Arena(offsets, align(plan.capacity), source, far, far_size, copies, streamed_here)


__all__ = ["ALIGN", "Arena", "Copy", "align", "execute_plan", "arena_values", "first_fit", "lifetimes", "natural_size",
           "plan_arena", "view_sources"]
