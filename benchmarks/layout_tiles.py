"""Tiling before or after the layout is known: the convolutional models' off-chip traffic by the tile model.

    python benchmarks/layout_tiles.py      # writes benchmarks/results/layout_tiles.md

The GPU pipeline stores convolutions' activations channels-last (`passes/layout.py`). Until 2026-11-27 the
Triton backend chose that after tiling, so the tile pass counted every tile's contiguous runs as if the
tensors were row-major (NCHW). This script tiles each convolutional model (`torch_models.WHOLE_MODELS`, batch
32, bf16, for gpu-h100) both ways: "before" tiles without the layout, "now" runs the layout pass first. Both
are then costed over the NHWC storage the kernels actually read (`tile_model.evaluate`: 128-byte lines, each
tile re-read whenever a loop it depends on advances, no cache), against the compulsory bytes (every element
once). The model over-counts what an L2 serves (a depthwise convolution's 3 x 3 window re-reads), so the
ratio between the columns, not their size, is the point. No GPU needed; the H100 timings are in
`triton_gpu.md`.
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results" / "layout_tiles.md"
MODELS = ("resnet18_basic_block", "resnet50", "mobilenetv2")
TARGET = "gpu-h100"


def kind(kernel) -> str | None:
    """The row a kernel counts in: its convolution's kind, None for a kernel without one first."""
    conv = kernel.nodes[0]
    if conv.op != "conv2d":
        return None
    if conv.attrs.get("groups", 1) > 1:
        return "depthwise / grouped"
    return "1 x 1" if conv.inputs[1].type.shape[2:] == (1, 1) else "k x k"


def model_rows(name: str) -> list[tuple[str, str, int, float, float, float]]:
    """(model, kind, kernels, MB before, MB now, compulsory MB) per convolution kind of model `name`."""
    from torch_models import whole_model

    from tilegraph.driver import compile_program
    from tilegraph.ir.target import load_target
    from tilegraph.ir.tile_model import compulsory_bytes
    from tilegraph.passes.layout import channels_last
    from tilegraph.passes.tiling import cost_of

    graph = whole_model(name).traced("bf16", 32)
    target = load_target(TARGET)
    before, _ = compile_program(graph, f"canonicalize,fuse,tile{{target={TARGET}}}")
    now, _ = compile_program(graph, f"canonicalize,fuse,layout,tile{{target={TARGET}}}")
    stored_before = dict(channels_last(before))  # what the kernels read: NHWC either way
    stored_now = now.storage_orders()
    sums: dict[str, list[float]] = {}
    for old, new in zip(before.kernels, now.kernels):
        row = kind(new)
        if row is None:
            continue
        costs = (cost_of(old.domain, target, dict(old.tiles), stored_before).traffic,  # (each kernel's own
                 cost_of(new.domain, target, dict(new.tiles), stored_now).traffic,     # tensors' orders count)
                 compulsory_bytes(new.domain))
        total = sums.setdefault(row, [0, 0.0, 0.0, 0.0])
        total[0] += 1
        for i, value in enumerate(costs):
            total[i + 1] += value / 1e6
    return [(name, row, int(t[0]), t[1], t[2], t[3]) for row, t in sorted(sums.items())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = [row for name in MODELS for row in model_rows(name)]
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# {__doc__.splitlines()[0]}", "",
             f"Run {when} by `python benchmarks/layout_tiles.py`: batch 32, bf16, tiled for {TARGET}. `before`: "
             "tiled as if row-major, `now`: the layout pass first; both costed over the NHWC tensors the kernels "
             "read (the tile model, no cache), in MB per call, and as multiples of the compulsory bytes.", "",
             "| model | convolutions | kernels | before MB | now MB | compulsory MB | before / compulsory | "
             "now / compulsory | before / now |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for model, row, count, old, new, need in rows:
        lines.append(f"| {model} | {row} | {count} | {old:.0f} | {new:.0f} | {need:.0f} | {old / need:.1f} | "
                     f"{new / need:.1f} | {old / new:.1f} |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
