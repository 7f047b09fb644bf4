"""Exports of a SimReport: a Chrome/Perfetto trace of the commands on their units, and a timeline plot.

    write_trace(report, "out.json")   # open in ui.perfetto.dev or chrome://tracing
    plot_timeline(report, "out.png")  # needs matplotlib: units over time, a roofline, energy per kernel

The trace has a counter track of the energy spent so far by component, and the total by component.
"""
from __future__ import annotations

import json
from pathlib import Path

from tilegraph.ir.errors import TilegraphError

from .commands import DMA_KINDS
from .report import SimReport


def _units(report: SimReport) -> list[str]:
    units = {t.command.unit for t in report.timeline}
    dmas = sorted((u for u in units if u not in ("array", "vector")),
                  key=lambda u: (u.rstrip("0123456789"), int(u[len(u.rstrip("0123456789")):] or 0)))
    return [u for u in ("array", "vector") if u in units] + dmas


def trace_events(report: SimReport) -> dict:
    """The Chrome trace-event JSON object: one complete ("X") event per command, microseconds."""
    per_us = report.accel.clock_ghz * 1e3  # cycles per microsecond
    tids = {u: i for i, u in enumerate(_units(report))}
    events: list[dict] = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0,
                           "args": {"name": f"tilegraph sim: {report.accel.name}"}}]
    events += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": unit}}
               for unit, tid in tids.items()]
    for t in report.timeline:
        c = t.command
        args = {"kernel": c.kernel, "step": c.step, "start_cycle": t.start, "end_cycle": t.end}
        if c.kind in DMA_KINDS:
            name = f"{c.kind} %{c.tensor}"
            args.update(bytes=c.bytes, compulsory=c.compulsory, bus_cycles=[t.bus_start, t.bus_end])
        else:
            name = f"{c.kernel} {c.kind}"
            args["cycles"] = c.cycles
        events.append({"name": name, "cat": c.kind, "ph": "X", "pid": 0, "tid": tids[c.unit],
                       "ts": t.start / per_us, "dur": (t.end - t.start) / per_us, "args": args})
    events += energy_counters(report, per_us)
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"accelerator": report.accel.name, "cycles": report.cycles,
                          "energy_pj": {k: v for k, v in report.energy.components().items() if v}}}


def energy_counters(report: SimReport, per_us: float) -> list[dict]:
    """A counter track of the energy spent so far (uJ) by component, stepped at every kernel's end."""
    names = [k for k, v in report.energy.components().items() if v]
    if not names:
        return []
    spent = dict.fromkeys(names, 0.0)
    out = [{"name": "energy (uJ)", "ph": "C", "pid": 0, "ts": 0.0, "args": dict(spent)}]
    for k in report.kernels:
        for name in names:
            spent[name] += getattr(k.energy, name) / 1e6
        out.append({"name": "energy (uJ)", "ph": "C", "pid": 0, "ts": k.end / per_us,
                    "args": {n: round(v, 6) for n, v in spent.items()}})
    return out


def write_trace(report: SimReport, path: str | Path) -> Path:
    """Write the Chrome/Perfetto trace of `report` to `path`; returns the path."""
    path = Path(path)
    path.write_text(json.dumps(trace_events(report), indent=None, separators=(",", ":")), encoding="utf-8")
    return path


def plot_timeline(report: SimReport, path: str | Path) -> Path:
    """Draw the units' timeline and a roofline of the kernels to an image file (needs matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TilegraphError("plotting needs matplotlib, which is not installed: pip install matplotlib") from None
    path = Path(path)
    a = report.accel
    units = _units(report)
    colors = {"array": "tab:blue", "vector": "tab:green", "load": "tab:orange", "store": "tab:red"}
    fig, (ax, roof, spend) = plt.subplots(1, 3, figsize=(19, 4.5), gridspec_kw={"width_ratios": [2.2, 1, 1]})
    for row, unit in enumerate(units):
        for kind in ("array", "vector", "load", "store"):
            bars = [(t.start, t.end - t.start) for t in report.timeline
                    if t.command.unit == unit and t.command.kind == kind and t.end > t.start]
            if bars:
                ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=colors[kind], label=kind)
    for k in report.kernels:
        ax.axvline(k.end, color="grey", linewidth=0.5)
    ax.set_yticks(range(len(units)), units)
    ax.set_xlabel("cycle")
    ax.set_title(f"{a.name}: {report.cycles:,} cycles")
    handles = {h.get_label(): h for h in ax.get_legend_handles_labels()[0]}
    ax.legend(handles.values(), handles.keys(), loc="upper right", fontsize="small")
    peak = 2.0 * a.pes  # flops per cycle
    points = [(k.intensity, k.flops / k.cycles, k.name) for k in report.kernels
              if k.cycles and k.flops and k.intensity != float("inf")]
    xs = [p[0] for p in points] or [1.0]
    lo, hi = min(xs + [peak / a.dram_bytes_per_cycle]) / 4, max(xs + [peak / a.dram_bytes_per_cycle]) * 4
    grid = [lo * (hi / lo) ** (i / 100) for i in range(101)]
    roof.plot(grid, [min(peak, x * a.dram_bytes_per_cycle) for x in grid], color="black")
    for x, y, name in points:
        roof.scatter([x], [y], s=12)
        roof.annotate(name, (x, y), fontsize="x-small")
    roof.set_xscale("log")
    roof.set_yscale("log")
    roof.set_xlabel("flops / DRAM byte")
    roof.set_ylabel("flops / cycle")
    roof.set_title("roofline")
    energy_bars(spend, report)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def energy_bars(ax, report: SimReport) -> None:
    """Per kernel, its energy stacked by component (uJ); the title gives the total."""
    names = [k for k, v in report.energy.components().items() if v]
    x = range(len(report.kernels))
    bottom = [0.0] * len(report.kernels)
    import matplotlib

    colors = matplotlib.colormaps["tab20"]
    for i, name in enumerate(names):
        heights = [getattr(k.energy, name) / 1e6 for k in report.kernels]
        ax.bar(x, heights, bottom=bottom, label=name.replace("_", " "), color=colors(i))
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_xticks(list(x), [k.name for k in report.kernels], rotation=90, fontsize="x-small")
    ax.set_ylabel("energy (uJ)")
    ax.set_title(f"energy: {report.energy_pj / 1e6:.3g} uJ" if names else "energy: no per-access energies given")
    if names:
        ax.legend(fontsize="x-small")
