"""MemoryPlan: where every tensor lives in the scratchpad at every step, and what moves off-chip.

The plan of the memplan pass, attached to a Program as `program.memory_plan`. It is plain data,
named by kernel and tensor names, printable, and checked by `tilegraph.passes.memplan.checker`.

Time model: kernel `order[t]` runs at step `t`. A `Residency(tensor, start, end, offset)` says the
tensor occupies bytes `[offset, offset + size)` during steps `start..end` inclusive. A `load` event
at step `t` brings a tensor in just before step `t` runs (its residency starts at `t`); a `store`
event at step `t` writes it to DRAM just after step `t` runs (it is resident at `t`). A residency
that starts at the step producing the tensor needs no load: the kernel creates it there.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Residency:
    """One stay of a tensor in the scratchpad: steps `start..end` inclusive at a fixed offset."""

    tensor: str
    start: int
    end: int
    offset: int
    size: int


@dataclass(frozen=True)
class TransferEvent:
    """A DRAM transfer: `load` (before step `step`) or `store` (after step `step`)."""

    step: int
    kind: str  # "load" | "store"
    tensor: str
    bytes: int
    compulsory: bool


@dataclass(frozen=True)
class PlanBounds:
    """Lower bounds that come with every plan.

    `min_capacity` is the largest single kernel's working set (below it no plan exists),
    `peak_live` the peak live bytes of the plan's order (at or above it that order needs no
    spill in the capacity-only model), `traffic` the best proven lower bound on non-compulsory
    bytes and `traffic_source` where it came from; `traffic_scope` says whether it holds for
    every topological order ("all orders") or only for the plan's order ("this order").
    """

    min_capacity: int
    min_capacity_kernel: str
    peak_live: int
    traffic: int
    traffic_source: str
    traffic_scope: str = "this order"
    capacity_only: int | None = None  # the capacity-only (no addresses) optimum or bound, when computed


@dataclass(frozen=True)
class MemoryPlan:
    """Kernel order, residencies with offsets, transfers, their cost, and how good it is."""

    capacity: int
    order: tuple[str, ...]
    residencies: tuple[Residency, ...]
    events: tuple[TransferEvent, ...]
    traffic: int  # non-compulsory off-chip bytes (spills + reloads)
    compulsory: int  # first loads of inputs/weights and stores of graph outputs
    bounds: PlanBounds
    solver: str  # which stage produced the returned plan
    status: str  # "optimal" | "feasible" | "heuristic"
    solve_time: float
    baseline_traffic: int  # best TFLite-style baseline (Belady/greedy eviction) on the same problem
    weights: bool = False
    order_mode: str = "fixed"
    stats: tuple[tuple[str, object], ...] = field(default=(), compare=False)

    @property
    def lower_bound(self) -> int:
        return self.bounds.traffic

    @property
    def gap(self) -> float:
        """Relative optimality gap (traffic - bound) / traffic; 0 when traffic is 0."""
        if self.traffic <= 0:
            return 0.0
        return max(0, self.traffic - self.bounds.traffic) / self.traffic

    @property
    def total_traffic(self) -> int:
        return self.traffic + self.compulsory

    def residencies_of(self, tensor: str) -> tuple[Residency, ...]:
        return tuple(r for r in self.residencies if r.tensor == tensor)

    def __str__(self) -> str:
        lines = [f"memory_plan capacity={self.capacity} traffic={self.traffic} compulsory={self.compulsory} "
                 f"bound={self.bounds.traffic} gap={self.gap:.1%} status={self.status} solver={self.solver}",
                 f"  order: {' '.join(self.order)}"]
        loads: dict[tuple[str, int], TransferEvent] = {(e.tensor, e.step): e for e in self.events if e.kind == "load"}
        for r in sorted(self.residencies, key=lambda r: (r.start, r.offset, r.tensor)):
            how = "load" if (r.tensor, r.start) in loads else "new"
            lines.append(f"  %{r.tensor}: steps {r.start}..{r.end} @ {r.offset} +{r.size} ({how})")
        for e in sorted(self.events, key=lambda e: (e.step, e.kind != "load", e.tensor)):
            tag = " compulsory" if e.compulsory else ""
            lines.append(f"  {e.kind} %{e.tensor} step {e.step} {e.bytes}B{tag}")
        return "\n".join(lines)
