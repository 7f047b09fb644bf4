"""Benchmark: the accelerator simulator against SCALE-Sim on SCALE-Sim's own networks, and on the example models.

    python benchmarks/sim.py                 # everything; writes benchmarks/results/sim.md
    python benchmarks/sim.py --no-scalesim   # only our side (no SCALE-Sim virtual environment)
    python benchmarks/sim.py --workers 2     # SCALE-Sim layers not cached yet run 2 at a time

SCALE-Sim (PyPI `scalesim`, which needs numpy < 2.3) runs in its own virtual environment through
`tilegraph.backends.sim.scalesim` (created on first use under ~/.cache/tilegraph/scalesim-venv;
TILEGRAPH_SCALESIM_PYTHON names another interpreter), one layer at a time; each layer's result and
wall time are cached (~/.cache/tilegraph/scalesim-results, TILEGRAPH_SCALESIM_RESULTS), so a rerun
only runs layers it has not seen. The layers are SCALE-Sim's own tables, copied unchanged into
../shared/scalesim-topologies (NETWORKS: whole networks where SCALE-Sim finishes within minutes,
else its first layers, and why), on its default config (32x32, 64 KiB SRAMs, CALC interface),
under each dataflow.

Tables:
1. how many layer/dataflow pairs match SCALE-Sim, for stall-free compute cycles, total cycles (its
   "incl. prefetch"), DRAM reads and DRAM writes: exactly, within 1%, 5% and 10%; ours configured
   like SCALE-Sim's memory model (`accel_like_scalesim`: dram_model "calc", psum_writeback);
2. per pair: ours / SCALE-Sim for each, and our default DMA model (`scalesim-default`, f32 words)
   for contrast;
3. speed: simulated MACs per wall second for both on the same layers;
4. per example model and accelerator preset: cycles, time, DRAM bytes, PE utilisation, energy by
   component, the memory plan's capacity, and our wall time.
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "sim.md"
TOPOLOGIES = ROOT.parent / "shared" / "scalesim-topologies"
PRESETS = ("edge-npu", "tpu-like", "scalesim-default", "scalesim-calc")
EXAMPLES = ("lenet", "mlp", "resnet_block", "transformer_block")
DATAFLOWS = ("os", "ws", "is")
BANDS = (0.0, 0.01, 0.05, 0.10)  # exact, within 1%, 5%, 10%
QUANTITIES = ("compute cycles", "total cycles", "DRAM reads", "DRAM writes")
SPEED_NETWORK = "alexnet"  # timed afresh: SCALE-Sim run now, one process, beside our run of the same layers
# SCALE-Sim's tables: (file, layers run, why not all). Its wall time grows with the SRAM words its
# buffers see (a median 12 us each here, on 2 busy shared cores): the four conv networks take it
# 20-60 minutes each for the three dataflows, the big GEMM layers hours.
NETWORKS = (
    ("conv_nets/alexnet.csv", None, ""),
    ("conv_nets/mobilenet.csv", None, ""),
    ("conv_nets/Resnet18.csv", None, ""),
    ("conv_nets/Googlenet.csv", None, ""),
    ("GEMM_mnk/gpt2.csv", 2, "at SCALE-Sim's ~12 us per SRAM word here, Linear1 alone (1024 x 4800 x 1600) "
                             "would take it about 3 hours for the three dataflows"),
    ("GEMM_mnk/unet2d.csv", 0, "its first layer alone (4.2M x 64 x 9) would take SCALE-Sim over an hour"),
)

from tilegraph.backends.sim import simulate  # noqa: E402
from tilegraph.backends.sim.scalesim import run_scalesim  # noqa: E402
from tilegraph.backends.sim.scalesim_config import (ConvLayer, ScaleSimConfig, accel_like_scalesim,  # noqa: E402
                                                     read_topology)
from tilegraph.frontends.dsl import parse_file  # noqa: E402
from tilegraph.ir import GraphBuilder  # noqa: E402
from tilegraph.ir.accel import load_accel  # noqa: E402
from tilegraph.simulation import prepare  # noqa: E402

CONFIG = ScaleSimConfig()  # SCALE-Sim's default: 32x32, 64 KiB per SRAM, CALC


@dataclasses.dataclass(frozen=True)
class Pair:
    """One layer under one dataflow: ours (calc model), SCALE-Sim's (None without it), our DMA model."""

    network: str
    layer: ConvLayer
    dataflow: str
    ours: tuple[int, int, int, int]  # compute cycles, total cycles, DRAM words read, written
    theirs: tuple[int, int, int, int] | None
    dma: tuple[int, int, int]  # total cycles, DRAM words read, written
    simulate_s: float
    prepare_s: float
    scalesim_s: float


def layers() -> list[tuple[str, ConvLayer]]:
    """(network, layer) of every layer run, in table order."""
    out = []
    for path, count, _ in NETWORKS:
        table = read_topology(TOPOLOGIES / path)
        out += [(Path(path).stem, layer) for layer in table[:count]]
    return out


def run_pairs(use_scalesim: bool, workers: int) -> list[Pair]:
    chosen = layers()
    ss = run_scalesim([layer for _, layer in chosen], CONFIG, DATAFLOWS, workers=workers) if use_scalesim else None
    for _, layer in chosen[:3]:  # warm-up: lazy imports and first-use caches stay out of the timings
        accel = accel_like_scalesim(CONFIG)
        simulate(prepare(layer.graph(), accel, solver="heuristic"), accel)
    pairs = []
    for i, (network, layer) in enumerate(chosen):
        for df in DATAFLOWS:
            accel = accel_like_scalesim(dataclasses.replace(CONFIG, dataflow=df))
            start = time.perf_counter()
            program = prepare(layer.graph(), accel, solver="heuristic")
            mid = time.perf_counter()
            report = simulate(program, accel)
            end = time.perf_counter()
            dma_accel = dataclasses.replace(load_accel("scalesim-default"), dataflow=df)
            dma = simulate(prepare(layer.graph(), dma_accel, solver="heuristic"), dma_accel)
            words = 4  # f32
            theirs = None
            if ss is not None:
                t = ss[df].layers[i]
                theirs = (t.compute_cycles, t.total_cycles, t.dram_reads, t.dram_ofmap_writes)
            pairs.append(Pair(network, layer, df, (report.array_cycles, report.cycles,
                                                   report.dram_read_bytes // words, report.dram_write_bytes // words),
                              theirs, (dma.cycles, dma.dram_read_bytes // words, dma.dram_write_bytes // words),
                              end - mid, mid - start, ss[df].layers[i].wall_s if ss is not None else 0.0))
    return pairs


def within(ours: float, theirs: float, band: float) -> bool:
    return ours == theirs if band == 0 else theirs > 0 and abs(ours / theirs - 1) <= band


def match_table(pairs: list[Pair]) -> list[str]:
    compared = [p for p in pairs if p.theirs is not None]
    n = len(compared)
    lines = ["| quantity | exact | within 1% | within 5% | within 10% | largest deviation (ours / SCALE-Sim) |",
             "|---|---|---|---|---|---|"]
    for q, name in enumerate(QUANTITIES):
        counts = [sum(within(p.ours[q], p.theirs[q], band) for p in compared) for band in BANDS]
        worst = max(compared, key=lambda p: abs(p.ours[q] / p.theirs[q] - 1))
        lines.append(f"| {name} | {counts[0]} of {n} | {counts[1]} of {n} | {counts[2]} of {n} | "
                     f"**{counts[3]} of {n}** ({counts[3] / n:.1%}) | {worst.ours[q] / worst.theirs[q]:.3f} "
                     f"({worst.network} {worst.layer.name} {worst.dataflow}) |")
    dma = [sum(within(p.dma[0], p.theirs[1], band) for p in compared) for band in BANDS[1:]]
    lines += ["", f"For contrast, our default DMA model (`scalesim-default`: one shared 40 B/cycle interface, "
                  f"partial sums on chip) gives totals within 1%, 5% and 10% of SCALE-Sim's in {dma[0]}, {dma[1]} "
                  f"and {dma[2]} of {n} pairs."]
    return lines


def pair_table(pairs: list[Pair]) -> list[str]:
    lines = ["| network | layer | dataflow | M x N x K | compute ours / SCALE-Sim | total ours / SCALE-Sim | ratio | "
             "DRAM words rd ours / SCALE-Sim | ratio | DRAM words wr ours / SCALE-Sim | ratio | "
             "DMA model: total | ratio | rd / wr |",
             "|" + "---|" * 14]
    for p in pairs:
        g = p.layer.shape
        cells = [p.network, p.layer.name, p.dataflow, f"{g.m} x {g.n} x {g.k}"]
        if p.theirs is None:
            cells += [f"{p.ours[0]:,} / -", f"{p.ours[1]:,} / -", "-", f"{p.ours[2]:,} / -", "-", f"{p.ours[3]:,} / -",
                      "-", f"{p.dma[0]:,}", "-"]
        else:
            ratio = [f"{o / t:.3f}" if t else "-" for o, t in zip(p.ours, p.theirs)]
            cells += [f"{p.ours[0]:,} / {p.theirs[0]:,}" + ("" if p.ours[0] == p.theirs[0] else " **differs**"),
                      f"{p.ours[1]:,} / {p.theirs[1]:,}", ratio[1], f"{p.ours[2]:,} / {p.theirs[2]:,}", ratio[2],
                      f"{p.ours[3]:,} / {p.theirs[3]:,}", ratio[3], f"{p.dma[0]:,}",
                      f"{p.dma[0] / p.theirs[1]:.3f}"]
        cells.append(f"{p.dma[1]:,} / {p.dma[2]:,}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def speed_table(pairs: list[Pair], fresh: dict | None) -> list[str]:
    """Per dataflow: our simulate (and whole pipeline) time against SCALE-Sim's on the same layers.

    With `fresh` (SCALE-Sim's runs of SPEED_NETWORK made in this run) those layers only: the cached
    wall times were measured whenever each layer first ran, on a machine then busier or not."""
    lines = ["| dataflow | pairs | MACs | ours: simulate s | MACs/s | speed-up | ours: + fuse, tile, memplan s | "
             "speed-up | SCALE-Sim: wall s | MACs/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for df in DATAFLOWS:
        mine = [p for p in pairs if p.dataflow == df and (fresh is None or p.network == SPEED_NETWORK)]
        macs = sum(p.layer.shape.macs for p in mine)
        ours = sum(p.simulate_s for p in mine)
        whole = ours + sum(p.prepare_s for p in mine)
        theirs = fresh[df].wall_s if fresh is not None else sum(p.scalesim_s for p in mine)
        lines.append(f"| {df} | {len(mine)} | {macs:,} | {ours:.3f} | {macs / ours:.3g} | {theirs / ours:,.0f}x | "
                     f"{whole:.2f} | {theirs / whole:,.0f}x | {theirs:,.0f} | {macs / theirs:.3g} |")
    return lines


def resnet18(size: int = 224, width: int = 64, classes: int = 1000):
    """ResNet-18 (ImageNet shapes, inference: conv + batch norm + ReLU, basic blocks, global mean, fc)."""
    b = GraphBuilder("resnet18")
    x = b.input("x", (1, 3, size, size))
    count = [0]

    def conv_bn(h, cin, cout, k, stride, relu=True):
        count[0] += 1
        n = count[0]
        y = b.conv2d(h, b.param(f"w{n}", (cout, cin, k, k)), stride=stride, padding=k // 2)
        y = b.batch_norm(y, *(b.param(f"bn{n}_{p}", (cout,)) for p in ("mean", "var", "gamma", "beta")))
        return b.relu(y) if relu else y
    h = b.max_pool2d(conv_bn(x, 3, width, 7, 2), kernel=3, stride=2, padding=1)
    cin = width
    for stage, cout in enumerate((width, 2 * width, 4 * width, 8 * width)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            y = conv_bn(conv_bn(h, cin, cout, 3, stride), cout, cout, 3, 1, relu=False)
            short = conv_bn(h, cin, cout, 1, stride, relu=False) if (stride != 1 or cin != cout) else h
            h = b.relu(b.add(y, short))
            cin = cout
    return b.output(b.matmul(b.mean(h, axes=(2, 3)), b.param("fc", (cin, classes))))


def model_table() -> list[str]:
    lines = ["| model | accelerator | kernels | commands | cycles | time (us) | DRAM compulsory | spill + reload | "
             "streamed | partial sums | PE util | energy uJ (MAC / SRAM / DRAM / leakage) | plan capacity | "
             "prepare s | simulate s |",
             "|" + "---|" * 15]
    models = [(name, parse_file(ROOT / "examples" / f"{name}.tg")) for name in EXAMPLES]
    models.append(("resnet18 (224x224)", resnet18()))
    for name, graph in models:
        for preset in PRESETS:
            accel = load_accel(preset)
            start = time.perf_counter()
            program = prepare(graph, accel, time_limit=2.0)
            mid = time.perf_counter()
            report = simulate(program, accel)
            end = time.perf_counter()
            raised = " (raised)" if report.plan_capacity > accel.scratchpad_bytes else ""
            e = report.energy.components()
            sram = sum(v for k, v in e.items() if k.startswith(("ifmap", "filter", "ofmap")))
            energy = (f"{report.energy_pj / 1e6:.1f} ({e['mac'] / 1e6:.1f} / {sram / 1e6:.1f} / "
                      f"{(e['dram_read'] + e['dram_write']) / 1e6:.1f} / {e['leakage'] / 1e6:.1f})"
                      if report.energy_pj else "-")
            lines.append(f"| {name} | {preset} | {len(report.kernels)} | {len(report.timeline):,} | "
                         f"{report.cycles:,} | {report.time_s * 1e6:.1f} | {report.compulsory_bytes:,} | "
                         f"{report.spill_bytes:,} | {report.stream_bytes:,} | {report.write_psum:,} | "
                         f"{report.utilisation:.1%} | {energy} | {report.plan_capacity:,}{raised} | "
                         f"{mid - start:.2f} | {end - mid:.4f} |")
    return lines


def networks_note(pairs: list[Pair]) -> str:
    """Which layers of each table ran, why not all, and SCALE-Sim's wall time for them."""
    parts = []
    for path, count, why in NETWORKS:
        total = len(read_topology(TOPOLOGIES / path))
        name = Path(path).stem
        minutes = sum(p.scalesim_s for p in pairs if p.network == name) / 60
        took = f"; SCALE-Sim's cached wall time {minutes:.0f} min for the three dataflows" if minutes else ""
        if count is None:
            parts.append(f"{name} whole ({total} layers{took})")
        elif count == 0:
            parts.append(f"{name} not run ({why})")
        else:
            parts.append(f"{name} first {count} of {total} layers ({why}{took})")
    return "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-scalesim", action="store_true", help="skip SCALE-Sim (no virtual environment)")
    parser.add_argument("--workers", type=int, default=1, help="SCALE-Sim processes for layers not cached yet")
    args = parser.parse_args()
    pairs = run_pairs(not args.no_scalesim, args.workers)
    scalesim = not args.no_scalesim
    fresh = None
    if scalesim:  # SCALE-Sim timed now, on the layers ours just ran
        timed = [p.layer for p in pairs if p.network == SPEED_NETWORK and p.dataflow == DATAFLOWS[0]]
        fresh = run_scalesim(timed, CONFIG, DATAFLOWS, workers=1, cache=False)
    text = [
        "# Accelerator simulator",
        "",
        "Written by `python benchmarks/sim.py --workers 2`. Layers: SCALE-Sim's own tables "
        "(../shared/scalesim-topologies, unchanged from its repository): " + networks_note(pairs) + ". Each runs on "
        f"SCALE-Sim 3.0.0 with its default config ({CONFIG.rows}x{CONFIG.cols} array, {CONFIG.ifmap_sram_kb} KiB "
        "each of ifmap, filter and ofmap SRAM in one-byte words, InterfaceBandwidth CALC) under each dataflow, "
        "one layer per SCALE-Sim run. Ours: the same layer converted by `ConvLayer.graph()` (SCALE-Sim's "
        "output size ceil((H - F + S) / S); where its last window hangs over the edge, symmetric padding of "
        "half the overhang gives that size on the same input) in f32 on `accel_like_scalesim(config)` (= the "
        "`scalesim-calc` preset with that dataflow). Words: our bytes / 4. SCALE-Sim's numbers: *Total Cycles* "
        "(compute, no stalls in CALC mode), *Total Cycles (incl. prefetch)*, DRAM ifmap + filter reads and "
        "ofmap writes (DETAILED_ACCESS_REPORT). The *DMA model* columns run the same layer on "
        "`scalesim-default` (our default memory model: one shared 40 B/cycle interface, latency 1, "
        "double-buffered, partial sums accumulated on chip).",
        "",
        "How the calc model follows SCALE-Sim's memory system (CALC bandwidth mode). (1) Compute: the same "
        "fold model, so stall-free cycles are equal. (2) Reads: SCALE-Sim's read buffer fetches, per epoch, "
        "the distinct words the array asks for, an epoch closing when its active half (50 sets of 1% of the "
        "SRAM) has seen that many; `demand` replays each dataflow's fold order (os: per fold of 32 output "
        "pixels their windows term by term, the filter slice again per row fold; is: the same pixels, windows "
        "in slices of 32 terms; ws: per slice of 32 terms every pixel) in units of an input pixel's channels "
        "(or a block of them), and `readbuffer` counts the epochs exactly for those units; filters, GEMMs and "
        "windows that share no words are sweeps over disjoint sets, in closed form. (3) Fills: each operand "
        "fills the active half (or less) at 10 words per cycle on its own port in sets of 1% of the SRAM before "
        "compute; later refills are free. (4) Writes: every result once, plus (ws, is) the partial sums of "
        "every fold of K over the rows; the ofmap SRAM's remainder drains after compute at one word per "
        "column per cycle. Remaining differences: SCALE-Sim's ofmap writes count a few words of its last, "
        "partly filled drain line (+31 on most layers); on the small strided layers of mobilenet (Conv12, "
        "Conv24) our conversion's padding puts the windows one row and column earlier than SCALE-Sim's, which "
        "moves where its buffer's epochs fall (reads 0.87-0.91 there; with SCALE-Sim's own window positions "
        "the model gives 0.97-0.99); units of an input pixel's channels where SCALE-Sim splits a pixel "
        "between epochs.",
        "",
    ]
    if scalesim:
        text += ["## How many pairs match SCALE-Sim", "", *match_table(pairs), "",
                 "## Speed", "",
                 f"{SPEED_NETWORK}'s layers, SCALE-Sim run afresh in this run (one process, nothing cached) right "
                 "after ours, wall seconds on 2 cores shared with other work (expect noise). *simulate*: lowering, "
                 "timing and report of the already planned layer (calc model); *+ fuse, tile, memplan*: the whole "
                 "`simulate_graph` path. SCALE-Sim: its run of the layer (topology, demand matrices, memory model, "
                 "reports).", "", *speed_table(pairs, fresh), "",
                 "Every pair (SCALE-Sim's wall times as cached when each layer first ran, two at a time on a "
                 "machine often busier than now, so these ratios flatter us):", "", *speed_table(pairs, None), ""]
    text += ["## Per layer and dataflow", "", *pair_table(pairs), "",
             "## Example models on each preset", "",
             "Pipeline (`simulate_graph`): canonicalize, fuse, tile for the preset's scratchpad, memplan at the "
             "scratchpad's capacity (weights planned, 2 s deterministic budget), simulate. Bytes: *compulsory* "
             "(first reads of inputs and weights, only the elements kernels read, and writes of outputs), "
             "*spill + reload* (the memory plan's non-compulsory traffic), *streamed* (tile re-reads and "
             "intermediate writes/reads of tensors too big to keep whole in the scratchpad, which stay in DRAM; "
             "on `scalesim-calc` also the array operands' re-reads through SCALE-Sim's buffers), *partial sums* "
             "(`psum_writeback`: written per fold of K in ws and is; `scalesim-calc` is os, so none). Energy: "
             "the presets' per-access energies (edge-npu and tpu-like give MACs, vector ops, DRAM, scratchpad "
             "per operand and, edge-npu, static power; the SCALE-Sim presets give none). *scalesim-calc* times "
             "only operand fills and the final ofmap drain (SCALE-Sim's CALC interface), hence its far fewer "
             "cycles than *scalesim-default* with the same array. *prepare s*: fuse + tile + memplan; "
             "*simulate s*: lowering + timing + report only.", "", *model_table(), ""]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(text), encoding="utf-8")
    print("\n".join(text))


if __name__ == "__main__":
    main()
