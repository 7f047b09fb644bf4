"""Pictures of a sweep: Pareto scatter plots (PNG) and one self-contained HTML page.

`write_report(DIR)` reads DIR/results.parquet and writes DIR/pareto.png (per model and summed over
the models: latency against energy and against area, the front ringed) and DIR/report.html (that
image embedded, the front across models, and every row in a table sorted by clicking a header; no
external resources).
"""
from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tilegraph.ir import TilegraphError

from .pareto import across_models, pareto_front
from .table import OBJECTIVES, read_table

SUMMED = ("latency_s", "energy_pj")  # added over the models of a design point; area is the point's own
PLOT_SCALE = {"latency_s": 1e6, "energy_pj": 1e-6}  # plotted in us and uJ
PLOT_LABELS = {"latency_s": "latency (us)", "energy_pj": "energy (uJ)", "area_mm2": "area proxy (mm²)"}


def write_report(out_dir: Path) -> list[Path]:
    """Redraw DIR/pareto.png and DIR/report.html from DIR/results.parquet; the paths written."""
    out_dir = Path(out_dir)
    rows, meta = read_table(out_dir)
    axes = json.loads(meta.get("axes", "[]"))
    fronts = model_fronts(rows)
    totals = across_models(rows, OBJECTIVES, SUMMED)
    png = draw_pareto(fronts, totals)
    image = out_dir / "pareto.png"
    image.write_bytes(png)
    page = out_dir / "report.html"
    page.write_text(html_page(rows, totals, axes, meta, png), encoding="utf-8")
    return [image, page]


def model_fronts(rows: Sequence[Mapping[str, Any]]) -> dict[str, tuple[list[Mapping[str, Any]], set[int]]]:
    """Per model: its successful rows and the positions of those on its front (latency x energy x area)."""
    fronts = {}
    for model in dict.fromkeys(r["model"] for r in rows):
        ok = [r for r in rows if r["model"] == model and r["status"] == "ok"]
        fronts[model] = (ok, set(pareto_front([[r[o] for o in OBJECTIVES] for r in ok])))
    return fronts


def draw_pareto(fronts: Mapping[str, tuple[list[Mapping[str, Any]], set[int]]],
                totals: Sequence[Mapping[str, Any]]) -> bytes:
    """One column per model and one for the models summed: latency against energy (top) and against area
    (bottom), colour by area / energy, the front's points ringed in black. PNG bytes."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TilegraphError("plotting needs matplotlib, which is not installed: pip install matplotlib") from None
    from matplotlib.ticker import FuncFormatter, LogLocator

    panels = [(name, ok, front) for name, (ok, front) in fronts.items()]
    if len(fronts) > 1:
        panels.append(("all models (summed)", list(totals), {i for i, t in enumerate(totals) if t["pareto"]}))
    fig, grid = plt.subplots(2, len(panels), figsize=(3.8 * len(panels) + 0.6, 6.6), squeeze=False)
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for col, (title, ok, front) in enumerate(panels):
        for row, (y, colour) in enumerate((("energy_pj", "area_mm2"), ("area_mm2", "energy_pj"))):
            ax = grid[row][col]
            if not ok:
                ax.text(0.5, 0.5, "no successful points", ha="center", va="center", transform=ax.transAxes)
                continue
            xs, ys, cs = ([r[k] * PLOT_SCALE.get(k, 1.0) for r in ok] for k in ("latency_s", y, colour))
            dots = ax.scatter(xs, ys, c=cs, cmap="viridis", s=18, alpha=0.8)
            on = sorted(front, key=lambda i: xs[i])
            ax.scatter([xs[i] for i in on], [ys[i] for i in on], s=60, facecolors="none", edgecolors="black",
                       linewidths=1.2, label="on the Pareto front (latency x energy x area)")
            for values, axis, scale in ((xs, ax.xaxis, ax.set_xscale), (ys, ax.yaxis, ax.set_yscale)):
                if min(values) > 0 and max(values) > 10 * min(values):  # log only where a decade is spanned
                    scale("log")
                    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
                    axis.set_major_formatter(plain)
                    axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
            ax.set_xlabel(PLOT_LABELS["latency_s"])
            ax.set_ylabel(PLOT_LABELS[y])
            fig.colorbar(dots, ax=ax).set_label(PLOT_LABELS[colour], fontsize=8)
            if row == 0:
                ax.set_title(f"{title}: {len(front)} of {len(ok)} on the front", fontsize=9)
    handles, labels = grid[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles[:1], labels[:1], loc="upper center", ncol=1, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return buffer.getvalue()


STYLE = """
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; font-size: 12px; margin-bottom: 2em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; white-space: nowrap; }
th { background: #eee; cursor: pointer; user-select: none; position: sticky; top: 0; }
th[data-order="asc"]::after { content: " \\25B2"; } th[data-order="desc"]::after { content: " \\25BC"; }
td.text { text-align: left; } tr.front td { background: #eef7e8; } tr.error td { color: #a33; }
img { max-width: 100%; }
"""

# Click a header to sort its table by that column (numbers as numbers, empty cells last); again to reverse.
SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(th => th.addEventListener("click", () => {
  const body = th.closest("table").tBodies[0], col = th.cellIndex, asc = th.dataset.order !== "asc";
  th.closest("tr").querySelectorAll("th").forEach(h => delete h.dataset.order);
  th.dataset.order = asc ? "asc" : "desc";
  const key = tr => { const v = tr.cells[col].dataset.v ?? tr.cells[col].textContent, n = Number(v);
    return v === "" ? null : (isNaN(n) ? v : n); };
  const rows = Array.from(body.rows).sort((a, b) => { const x = key(a), y = key(b);
    if (x === null || y === null) return (x === null) - (y === null);
    return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1); });
  body.append(...rows);
}));
"""


def html_page(rows: Sequence[Mapping[str, Any]], totals: Sequence[Mapping[str, Any]], axes: Sequence[str],
              meta: Mapping[str, str], png: bytes) -> str:
    """The self-contained report: summary, the embedded Pareto image, the front across models, all rows."""
    ok = sum(r["status"] == "ok" for r in rows)
    models = list(dict.fromkeys(r["model"] for r in rows))
    title = f"tilegraph sweep: {meta.get('spec_path', '')}"
    image = base64.b64encode(png).decode()
    params = {r["point"]: {a: r[a] for a in axes} for r in rows}
    front = [{**params.get(t["point"], {}), **t} for t in totals if t["pareto"]]
    across_columns = ["point", *axes, "latency_s", "energy_pj", "area_mm2"]
    columns = ["model", "point", *axes, "status", "cycles", "latency_s", "energy_pj", "dram_bytes",
               "dram_compulsory_bytes", "dram_spill_reload_bytes", "dram_stream_bytes", "utilisation", "pes",
               "sram_bytes", "area_mm2", "plan_gap", "pareto", "wall_s", "error"]
    return "\n".join([
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{html.escape(title)}</title>",
        f"<style>{STYLE}</style></head><body>", f"<h1>{html.escape(title)}</h1>",
        f"<p>{len(rows)} rows: {len(models)} model(s) ({html.escape(', '.join(models))}) on "
        f"{html.escape(meta.get('accelerator', '?'))} over {html.escape(', '.join(axes) or 'no axes')}; {ok} ok, "
        f"{len(rows) - ok} failed. Objectives, all minimised: latency, energy, area proxy. tilegraph "
        f"{html.escape(meta.get('tilegraph_version', '?'))}.</p>",
        f'<img alt="Pareto fronts: latency against energy and area per model" src="data:image/png;base64,{image}">',
        f"<h2>Pareto front across models ({len(front)} of {len(totals)} points that ran on every model; "
        "latency and energy summed over the models)</h2>",
        _table("across", across_columns, front),
        "<h2>All rows (front rows shaded; click a header to sort)</h2>",
        _table("results", columns, rows),
        f"<script>{SCRIPT}</script>", "</body></html>"])


def _table(name: str, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for row in rows:
        kind = "error" if row.get("status") == "error" else "front" if row.get("pareto") and name == "results" else ""
        cells = "".join(_cell(row.get(c)) for c in columns)
        body.append(f'<tr class="{kind}">{cells}</tr>' if kind else f"<tr>{cells}</tr>")
    return (f'<table class="sortable" id="{name}"><thead><tr>{head}</tr></thead>'
            f"<tbody>\n{chr(10).join(body)}\n</tbody></table>")


def _cell(value: Any) -> str:
    """A table cell: numbers shown rounded but sorted by their exact value (data-v)."""
    if value is None:
        return '<td data-v=""></td>'
    if isinstance(value, bool):
        return f'<td class="text">{"yes" if value else "no"}</td>'
    if isinstance(value, str):
        return f'<td class="text">{html.escape(value)}</td>'
    if isinstance(value, int):
        return f'<td data-v="{value}">{value:,}</td>'
    return f'<td data-v="{value!r}">{value:.4g}</td>'
