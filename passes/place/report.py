"""Reports of a Placement: the text the CLI prints, and a Gantt chart (matplotlib, imported lazily)."""
from __future__ import annotations

from pathlib import Path

from tilegraph.ir.placement import Placement
from tilegraph.ir.system import format_bytes, format_seconds

METHOD_NAMES = {"heft": "HEFT", "cpop": "CPOP", "peft": "PEFT", "metf": "m-ETF", "mtopo": "m-TOPO",
                "lp": "LP rounding", "portfolio": "portfolio", "thrifty": "portfolio", "local": "local search",
                "lns": "windowed LNS", "cpsat": "CP-SAT"}


def format_report(placement: Placement) -> str:
    """Makespan, lower bound, gap, the method that answered, baselines, per-device utilisation."""
    sec = placement.seconds
    stats = dict(placement.stats)
    lines = [f"placement of {len(placement.kernels)} kernels on {placement.system}",
             f"  makespan     {format_seconds(sec(placement.makespan))}   "
             f"(method: {METHOD_NAMES.get(placement.method, placement.method)}"
             f"{', proven optimal' if placement.optimal else ''})",
             f"  lower bound  {format_seconds(sec(placement.lower_bound))}   (gap {placement.gap:.1%})"]
    tried = [(k.split(".", 1)[1], v) for k, v in stats.items() if k.startswith("makespan.")]
    if tried:
        shown = ", ".join(f"{METHOD_NAMES.get(name, name)} {format_seconds(sec(v)) if v >= 0 else 'stuck (memory)'}"
                          for name, v in tried)
        lines.append(f"  methods      {shown}")
    total = sum(v for k, v in stats.items() if k.startswith("seconds."))
    if total:
        lines.append(f"  solve time   {total:.2f} s")
    if "wall_guard" in stats:
        lines.append("  note         the wall-clock guard fired: another run may give a different answer")
    util = placement.utilisation()
    peaks, caps = dict(placement.peak_memory), dict(placement.capacity)
    counts: dict[str, int] = {}
    for k in placement.kernels:
        counts[k.device] = counts.get(k.device, 0) + 1
    lines.append(f"  {'device':<18}{'kernels':>8}{'busy':>8}  {'peak memory':>22}")
    for name, cap in placement.capacity:
        lines.append(f"  {name:<18}{counts.get(name, 0):>8}{util.get(name, 0.0):>8.1%}  "
                     f"{format_bytes(peaks.get(name, 0)):>10} / {format_bytes(caps[name]):<10}")
    moved: dict[str, list[int]] = {}
    for t in placement.transfers:
        moved.setdefault(t.link, []).append(t.nbytes)
    for link, sizes in sorted(moved.items()):
        lines.append(f"  {link:<18}{len(sizes):>8}{util.get(link, 0.0):>8.1%}  {format_bytes(sum(sizes)):>10} moved")
    return "\n".join(lines)


def draw_gantt(placement: Placement, path: str | Path, title: str | None = None) -> Path:
    """Draw the schedule, one lane per device and per link channel, to an image file.

    Needs matplotlib (not a base dependency of tilegraph).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        from tilegraph.ir.errors import TilegraphError

        raise TilegraphError("--gantt needs matplotlib: pip install matplotlib") from e
    devices = [name for name, _ in placement.capacity]
    links = sorted({t.link for t in placement.transfers})
    lanes = devices + links
    row = {name: i for i, name in enumerate(lanes)}
    scale = placement.tick * 1e3  # milliseconds
    fig, ax = plt.subplots(figsize=(12, 0.6 * len(lanes) + 1.5))
    colours = plt.get_cmap("tab20")
    for n, k in enumerate(placement.kernels):
        ax.broken_barh([(k.start * scale, (k.finish - k.start) * scale)], (row[k.device] - 0.4, 0.8),
                       facecolors=colours(n % 20), edgecolor="black", linewidth=0.3)
    for t in placement.transfers:
        ax.broken_barh([(t.start * scale, (t.finish - t.start) * scale)], (row[t.link] - 0.4, 0.8),
                       facecolors="lightgray", edgecolor="black", linewidth=0.3)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(lanes)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title(title or f"{placement.system}: makespan {format_seconds(placement.seconds(placement.makespan))}, "
                          f"gap {placement.gap:.1%} ({placement.method})")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
