"""SimReport: what the simulation found, per kernel and in total, and its text table.

The timeline is cut into one window per kernel (from the end of the previous kernel's window to
the end of its own last compute command; the last window runs to the end of the last store), so
the kernels' cycles add up to the total. Inside a window every cycle is
`compute` (the PE array or the vector unit busy), `dma` (only DMA busy: exposed transfer time) or
`stall` (nothing busy: waiting out DRAM latency). Every kernel's energy is broken down by
component (`energy`), and the report's is their sum.
"""
from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass

from tilegraph.ir.accel import Accelerator
from tilegraph.ir.program import Program

from .commands import COMPUTE_KINDS, DMA_KINDS, Lowered
from .energy import Energy, kernel_accesses
from .engine import Timed


@dataclass(frozen=True)
class KernelSim:
    """One kernel's share of the timeline and what it did."""

    name: str
    ops: tuple[str, ...]
    start: int
    end: int
    compute: int
    dma: int
    stall: int
    array_cycles: int  # stall-free PE array cycles (the fold model)
    vector_cycles: int
    macs: int
    flops: int
    tiles: int
    steps: int
    read_bytes: int
    write_bytes: int
    energy: Energy = Energy()  # by component (`energy.Energy`)

    @property
    def cycles(self) -> int:
        return self.end - self.start

    @property
    def intensity(self) -> float:
        """Flops per DRAM byte (inf when the kernel moves nothing)."""
        moved = self.read_bytes + self.write_bytes
        return self.flops / moved if moved else float("inf")


@dataclass(frozen=True)
class SimReport:
    """Cycles, time, DRAM traffic, utilisation and energy of one Program on one accelerator."""

    accel: Accelerator
    cycles: int
    kernels: tuple[KernelSim, ...]
    timeline: tuple[Timed, ...]
    read_compulsory: int
    read_reload: int
    write_compulsory: int
    write_spill: int
    read_stream: int  # tile traffic of streamed tensors beyond their compulsory bytes
    write_stream: int
    macs: int
    vector_ops: int
    plan_capacity: int
    notes: tuple[str, ...] = ()
    write_psum: int = 0  # partial sums written back per fold of K (`psum_writeback`)
    energy: Energy = Energy()  # by component, the kernels' added

    @property
    def time_s(self) -> float:
        return self.cycles / (self.accel.clock_ghz * 1e9)

    @property
    def dram_read_bytes(self) -> int:
        return self.read_compulsory + self.read_reload + self.read_stream

    @property
    def dram_write_bytes(self) -> int:
        return self.write_compulsory + self.write_spill + self.write_stream + self.write_psum

    @property
    def stream_bytes(self) -> int:
        """Tile traffic of streamed tensors (too big for the scratchpad) beyond compulsory bytes."""
        return self.read_stream + self.write_stream

    @property
    def dram_bytes(self) -> int:
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def compulsory_bytes(self) -> int:
        return self.read_compulsory + self.write_compulsory

    @property
    def spill_bytes(self) -> int:
        """Non-compulsory traffic: spills and reloads."""
        return self.read_reload + self.write_spill

    @property
    def array_cycles(self) -> int:
        return sum(k.array_cycles for k in self.kernels)

    @property
    def utilisation(self) -> float:
        """MACs over what the PE array could do in the total cycles."""
        return self.macs / (self.accel.pes * self.cycles) if self.cycles else 0.0

    @property
    def compute_bound(self) -> float:
        return self.macs / self.accel.pes

    @property
    def memory_bound(self) -> float:
        """Cycles the DRAM traffic needs at least: all bytes over the shared interface's bandwidth, or
        with SCALE-Sim's CALC ports (`dram_model = "calc"`) the busiest port's timed transfers."""
        if self.accel.dram_model != "calc":
            return self.dram_bytes / self.accel.dram_bytes_per_cycle
        busy: dict[str, int] = {}
        for t in self.timeline:
            if t.command.kind in DMA_KINDS:
                busy[t.command.unit] = busy.get(t.command.unit, 0) + t.bus_end - t.bus_start
        return float(max(busy.values(), default=0))

    @property
    def energy_pj(self) -> float:
        """All components of the energy estimate (`energy`), picojoules."""
        return self.energy.total


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def _intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


class _Cover:
    """Length of a merged interval list inside any window, by bisection over prefix sums."""

    def __init__(self, merged: list[tuple[int, int]]) -> None:
        self.starts = [s for s, _ in merged]
        self.merged = merged
        self.prefix = [0]
        for s, e in merged:
            self.prefix.append(self.prefix[-1] + e - s)

    def upto(self, x: int) -> int:
        i = bisect.bisect_right(self.starts, x)
        if i == 0:
            return 0
        s, e = self.merged[i - 1]
        return self.prefix[i - 1] + min(e, x) - s

    def within(self, a: int, b: int) -> int:
        return self.upto(b) - self.upto(a)


def build_report(lowered: Lowered, timeline: tuple[Timed, ...], accel: Accelerator, plan_capacity: int,
                 notes: tuple[str, ...] = (), program: Program | None = None) -> SimReport:
    """The report of one timeline; with the `program`, also the energy of every kernel by component."""
    compute = _union([(t.start, t.end) for t in timeline if t.command.kind in COMPUTE_KINDS])
    dma = _union([(t.bus_start, t.bus_end) for t in timeline if t.command.kind in DMA_KINDS])
    c_cover, d_cover, both = _Cover(compute), _Cover(dma), _Cover(_intersect(compute, dma))
    last_end: dict[str, int] = {}
    moved: dict[str, list[int]] = {}
    for t in timeline:
        c = t.command
        if c.kind in COMPUTE_KINDS:
            last_end[c.kernel] = max(last_end.get(c.kernel, 0), t.end)
        else:
            moved.setdefault(c.kernel, [0, 0])[c.kind == "store"] += c.bytes
    cycles = max((t.end for t in timeline), default=0)
    kernels, start = [], 0
    for i, (work, arr, vec) in enumerate(zip(lowered.works, lowered.array_cycles, lowered.vector_cycles)):
        end = cycles if i == len(lowered.works) - 1 else max(start, last_end.get(work.name, start))
        busy = c_cover.within(start, end)
        exposed = d_cover.within(start, end) - both.within(start, end)
        rd, wr = moved.get(work.name, [0, 0])
        kernels.append(KernelSim(work.name, work.ops, start, end, busy, exposed, end - start - busy - exposed,
                                 arr, vec, work.macs, work.flops, work.tiles, work.steps, rd, wr))
        start = end
    if program is not None:
        accesses = kernel_accesses(program, accel, timeline, {k.name: k.cycles for k in kernels},
                                   {w.name: (w.macs, w.vector_ops) for w in lowered.works})
        kernels = [dataclasses.replace(k, energy=accesses[k.name].energy(accel)) for k in kernels]
    sums = {(kind, how): 0 for kind in DMA_KINDS for how in ("compulsory", "plan", "stream", "psum")}
    for t in timeline:
        c = t.command
        if c.kind in DMA_KINDS:
            how = "psum" if c.psum else "compulsory" if c.compulsory else "stream" if c.streamed else "plan"
            sums[c.kind, how] += c.bytes
    return SimReport(accel, cycles, tuple(kernels), timeline, sums["load", "compulsory"], sums["load", "plan"],
                     sums["store", "compulsory"], sums["store", "plan"], sums["load", "stream"],
                     sums["store", "stream"], sum(w.macs for w in lowered.works),
                     sum(w.vector_ops for w in lowered.works), plan_capacity, notes, sums["store", "psum"],
                     sum((k.energy for k in kernels), Energy()))


def _bytes(n: float) -> str:
    for scale, unit in ((2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB")):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def format_sim_report(report: SimReport) -> str:
    """A per-kernel table (cycles split into compute / DMA / stall, DRAM bytes, MACs) and the totals."""
    a = report.accel
    head = ("kernel", "ops", "steps", "cycles", "compute", "dma", "stall", "array", "MACs", "util",
            "DRAM rd", "DRAM wr")
    rows = []
    for k in report.kernels:
        ops = ",".join(dict.fromkeys(k.ops))
        util = f"{k.macs / (a.pes * k.cycles):.1%}" if k.cycles and k.macs else "-"
        rows.append((k.name, ops if len(ops) <= 32 else ops[:29] + "...", str(k.steps), f"{k.cycles:,}",
                     f"{k.compute:,}", f"{k.dma:,}", f"{k.stall:,}", f"{k.array_cycles:,}", f"{k.macs:,}", util,
                     _bytes(k.read_bytes), _bytes(k.write_bytes)))
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    left = {0, 1}

    def line(r) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    out = [f"accelerator {a.describe()}", line(head), line(tuple("-" * w for w in widths))]
    out += [line(r) for r in rows]
    out.append("")
    out.append(f"total: {report.cycles:,} cycles = {report.time_s * 1e6:.2f} us at {a.clock_ghz:g} GHz; "
               f"PE utilisation {report.utilisation:.1%}")
    out.append(f"bounds: compute {report.compute_bound:,.0f} cycles (MACs/PEs), memory "
               f"{report.memory_bound:,.0f} cycles ("
               + ("busiest port's timed transfers" if a.dram_model == "calc" else "bytes/bandwidth")
               + f"); array (stall-free) {report.array_cycles:,}")
    out.append(f"DRAM: read {_bytes(report.dram_read_bytes)} ({_bytes(report.read_compulsory)} compulsory, "
               f"{_bytes(report.read_reload)} reload, {_bytes(report.read_stream)} streamed), write "
               f"{_bytes(report.dram_write_bytes)} ({_bytes(report.write_compulsory)} compulsory, "
               f"{_bytes(report.write_spill)} spill, {_bytes(report.write_stream)} streamed"
               + (f", {_bytes(report.write_psum)} partial sums" if report.write_psum else "") + ")")
    if report.energy_pj:
        parts = [(name, pj) for name, pj in report.energy.components().items() if pj]
        out.append(f"energy: {report.energy_pj / 1e6:.3f} uJ = "
                   + ", ".join(f"{name.replace('_', ' ')} {pj / 1e6:.3f}" for name, pj in parts))
    out.append(f"memory plan capacity: {_bytes(report.plan_capacity)} (scratchpad {_bytes(a.scratchpad_bytes)})")
    out += [f"note: {n}" for n in report.notes]
    return "\n".join(out)
