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
    solve_time: float = field(compare=False)  # seconds; varies between runs, so not part of the record
    baseline_traffic: int  # best TFLite-style baseline (Belady/greedy eviction) on the same problem
    weights: bool = False
    order_mode: str = "fixed"
    stats: tuple[tuple[str, object], ...] = field(default=(), compare=False)
    streamed: tuple[str, ...] = ()  # tensors left out of the plan: too big to keep whole, moved by tiles
    requested_capacity: int | None = None  # the capacity asked for, when the plan had to use more
    align: int = 1  # every tensor's bytes rounded up to a multiple of this (offsets follow), for executing backends
    # the tile traffic of the `streamed` tensors, per (step, tensor, load|store), compulsory part apart
    # (`ir.stream_traffic`); None: not recorded (a plan made before streams were planned, or without a tiling)
    stream_events: tuple[TransferEvent, ...] | None = None
    streamed_traffic: int = 0  # non-compulsory bytes of stream_events (tile re-reads)
    streamed_compulsory: int = 0  # compulsory bytes of stream_events (first reads of inputs, output stores)

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
        """Every DRAM byte: resident tensors' (spills, reloads, compulsory) and streamed tiles'."""
        return self.traffic + self.compulsory + self.streamed_traffic + self.streamed_compulsory

    def residencies_of(self, tensor: str) -> tuple[Residency, ...]:
        return tuple(r for r in self.residencies if r.tensor == tensor)

    def __str__(self) -> str:
        lines = [f"memory_plan capacity={self.capacity} traffic={self.traffic} compulsory={self.compulsory} "
                 f"bound={self.bounds.traffic} gap={self.gap:.1%} status={self.status} solver={self.solver}"
                 + (f" streamed={len(self.streamed)} streamed_traffic={self.streamed_traffic} "
                    f"streamed_compulsory={self.streamed_compulsory}" if self.streamed else ""),
                 f"  order: {' '.join(self.order)}"]
        loads: dict[tuple[str, int], TransferEvent] = {(e.tensor, e.step): e for e in self.events if e.kind == "load"}
        for r in sorted(self.residencies, key=lambda r: (r.start, r.offset, r.tensor)):
            how = "load" if (r.tensor, r.start) in loads else "new"
            lines.append(f"  %{r.tensor}: steps {r.start}..{r.end} @ {r.offset} +{r.size} ({how})")
        for e in sorted(self.events, key=lambda e: (e.step, e.kind != "load", e.tensor)):
            tag = " compulsory" if e.compulsory else ""
            lines.append(f"  {e.kind} %{e.tensor} step {e.step} {e.bytes}B{tag}")
        for e in sorted(self.stream_events or (), key=lambda e: (e.step, e.kind != "load", e.tensor, not e.compulsory)):
            tag = " compulsory" if e.compulsory else ""
            lines.append(f"  stream-{e.kind} %{e.tensor} step {e.step} {e.bytes}B{tag}")
        return "\n".join(lines)


# ----- program text: the `memory_plan { ... }` section (registered in program_text) -------------
def plan_record(plan: MemoryPlan) -> list[tuple[str, object]]:
    """The section's fields in printing order; solve time and solver statistics vary between runs and are left out,
    and so are the stream fields of a plan that did not record its streams."""
    b = plan.bounds
    return [
        ("capacity", plan.capacity), ("requested_capacity", plan.requested_capacity), ("weights", plan.weights),
        ("order_mode", plan.order_mode), ("solver", plan.solver), ("status", plan.status),
        ("traffic", plan.traffic), ("compulsory", plan.compulsory), ("baseline_traffic", plan.baseline_traffic),
        ("bounds", [b.min_capacity, b.min_capacity_kernel, b.peak_live, b.traffic, b.traffic_source,
                    b.traffic_scope, b.capacity_only]),
        ("order", list(plan.order)), ("streamed", list(plan.streamed)), ("align", plan.align),
        ("residencies", [(r.tensor, r.start, r.end, r.offset, r.size) for r in plan.residencies]),
        ("events", [(e.step, e.kind, e.tensor, e.bytes, e.compulsory) for e in plan.events]),
    ] + ([] if plan.stream_events is None else [  # left out when not recorded: such texts read as before
        ("streamed_traffic", plan.streamed_traffic), ("streamed_compulsory", plan.streamed_compulsory),
        ("stream_events", [(e.step, e.kind, e.tensor, e.bytes, e.compulsory) for e in plan.stream_events])])


PLAN_FIELDS = ("capacity", "requested_capacity", "weights", "order_mode", "solver", "status", "traffic", "compulsory",
               "baseline_traffic", "bounds", "order", "streamed", "align", "residencies", "events",
               "streamed_traffic", "streamed_compulsory", "stream_events")
PLAN_OPTIONAL = ("align", "streamed_traffic", "streamed_compulsory", "stream_events")  # fields older texts lack


def plan_from_record(v: dict) -> MemoryPlan:
    """The MemoryPlan of a parsed section's values (TypeError/ValueError when malformed)."""
    return MemoryPlan(
        capacity=int(v["capacity"]), order=tuple(v["order"]),
        residencies=tuple(Residency(*r) for r in v["residencies"]),
        events=tuple(TransferEvent(*e) for e in v["events"]), traffic=int(v["traffic"]),
        compulsory=int(v["compulsory"]), bounds=PlanBounds(*v["bounds"]), solver=str(v["solver"]),
        status=str(v["status"]), solve_time=0.0, baseline_traffic=int(v["baseline_traffic"]),
        weights=bool(v["weights"]), order_mode=str(v["order_mode"]), streamed=tuple(v["streamed"]),
        requested_capacity=v["requested_capacity"], align=int(v.get("align", 1)),
        stream_events=None if v.get("stream_events") is None else tuple(TransferEvent(*e) for e in v["stream_events"]),
        streamed_traffic=int(v.get("streamed_traffic", 0)), streamed_compulsory=int(v.get("streamed_compulsory", 0)))
