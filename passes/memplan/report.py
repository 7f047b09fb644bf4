"""format_report (what the CLI prints) and an optional memory-map plot."""
from __future__ import annotations

from tilegraph.ir.memory_plan import MemoryPlan
from tilegraph.ir.units import format_bytes, parse_bytes


def format_report(plan: MemoryPlan) -> str:
    """Traffic, bound, gap, solve time and which solver answered, as a few lines."""
    b = plan.bounds
    reduction = ""
    if plan.baseline_traffic > 0:
        reduction = f" ({1 - plan.traffic / plan.baseline_traffic:.1%} less)"
    order_bound = dict(plan.stats).get("order_bound")
    lines = [
        f"memplan: {len(plan.order)} kernels, capacity {format_bytes(plan.capacity)} ({plan.capacity} B), "
        f"order {plan.order_mode}, weights {'on' if plan.weights else 'off'}",
        f"  non-compulsory traffic: {format_bytes(plan.traffic)} ({plan.traffic} B)",
        f"  baseline (TFLite-style, Belady/greedy): {format_bytes(plan.baseline_traffic)}{reduction}",
        f"  compulsory traffic: {format_bytes(plan.compulsory)}",
    ]
    if plan.streamed:
        tiles = "not recorded" if plan.stream_events is None else \
            f"tile re-reads {format_bytes(plan.streamed_traffic)} ({plan.streamed_traffic} B), compulsory " \
            f"{format_bytes(plan.streamed_compulsory)}"
        lines.append(f"  streamed by tiles: {len(plan.streamed)} tensor(s), not resident; their traffic: {tiles}")
    lines += [
        f"  lower bound: {format_bytes(b.traffic)} ({b.traffic_source}, {b.traffic_scope}); gap {plan.gap:.1%}",
    ]
    if order_bound is not None and order_bound > b.traffic:
        gap = (plan.traffic - order_bound) / plan.traffic if plan.traffic else 0.0
        lines.append(f"  bound for this order: {format_bytes(order_bound)}; gap {gap:.1%}")
    lines += [
        f"  capacity bounds: largest working set {format_bytes(b.min_capacity)} ({b.min_capacity_kernel}), "
        f"peak live of the order {format_bytes(b.peak_live)}",
        f"  status: {plan.status}; answered by: {plan.solver}; solve time {plan.solve_time:.2f} s",
    ]
    return "\n".join(lines)


def plot_memory_map(plan: MemoryPlan, path: str) -> None:
    """Draw residencies as (step, address) rectangles; needs matplotlib (imported here only)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError as e:  # pragma: no cover - optional dependency
        raise RuntimeError("--plot needs matplotlib: pip install matplotlib") from e
    fig, ax = plt.subplots(figsize=(max(6, len(plan.order) * 0.15 + 4), 5))
    loaded = {(e.tensor, e.step) for e in plan.events if e.kind == "load"}
    cmap = plt.get_cmap("tab20")
    names = sorted({r.tensor for r in plan.residencies})
    color = {n: cmap(i % 20) for i, n in enumerate(names)}
    for r in plan.residencies:
        ax.add_patch(Rectangle((r.start, r.offset), r.end - r.start + 1, r.size, facecolor=color[r.tensor],
                               edgecolor="black", linewidth=0.4, hatch="//" if (r.tensor, r.start) in loaded else None))
    ax.set_xlim(0, max(1, len(plan.order)))
    ax.set_ylim(0, plan.capacity)
    ax.set_xlabel("step")
    ax.set_ylabel("scratchpad address (bytes)")
    ax.set_title(f"memory map: traffic {format_bytes(plan.traffic)}, gap {plan.gap:.1%} (hatched: reloaded)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
