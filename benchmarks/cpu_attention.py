"""The C++ backend's FlashAttention kernel against generic kernels with the scores materialised, on the CPU.

    python benchmarks/cpu_attention.py     # writes benchmarks/results/cpu_attention.md

Why a CPU target's default pipeline runs attention as generic kernels (`driver.default_pipeline`:
`fuse{attention=false}`): one attention of 12 heads of width 64, batch 1, at the lengths of the models in
`dynamo_gpu.py --cpu` (BERT and GPT-2 at 128 tokens, ViT-base at 197) and a longer one, built both ways
with the same tile target and timed interleaved in one process (median of rounds, one call each per round).
"""
from __future__ import annotations

import datetime
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "cpu_attention.md"
LENGTHS = (128, 197, 512)
PIPELINES = {"flash": "canonicalize,fuse,tile{target=cpu}", "generic": "canonicalize,fuse{attention=false},tile{target=cpu}"}


def main() -> int:
    import tilegraph
    from tilegraph.frontends.dsl import parse

    rows = []
    for length in LENGTHS:
        shape = f"f32[1, 12, {length}, 64]"
        graph = parse(f"def f(q: {shape}, k: {shape}, v: {shape}) -> {shape} {{ return attention(q, k, v) }}")
        builds = {name: tilegraph.compile(graph, target="cpp", pipeline=p) for name, p in PIPELINES.items()}
        inputs = [np.random.default_rng(i).standard_normal((1, 12, length, 64), dtype=np.float32) for i in range(3)]
        want = builds["generic"](*inputs)[0]
        error = float(np.abs(builds["flash"](*inputs)[0] - want).max())
        times: dict[str, list[float]] = {name: [] for name in builds}
        for _ in range(30):
            for name, fn in builds.items():
                start = time.perf_counter()
                fn(*inputs)
                times[name].append(time.perf_counter() - start)
        flash, generic = (statistics.median(times[n]) * 1e3 for n in ("flash", "generic"))
        tiles = " ".join(f"{n}={t}" for n, t in builds["flash"].program.kernels[0].tiles)
        rows.append(f"| {length} | {flash:.3f} | {generic:.3f} | {flash / generic:.2f} | {error:.1e} | {tiles} |")
        print(rows[-1], flush=True)
    import torch

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    RESULTS.write_text("\n".join([
        "# C++ FlashAttention kernel vs generic kernels (scores materialised), CPU", "",
        f"Run {stamp} by `python benchmarks/cpu_attention.py`; {os.cpu_count()} CPUs, torch {torch.__version__} "
        "(threads as torch sets them). One attention, batch 1, 12 heads of width 64; median ms per call over 30 "
        "interleaved rounds. flash/generic > 1: the FlashAttention kernel is slower. err: max abs difference.", "",
        "| tokens | flash ms | generic ms | flash / generic | err | flash tiles |", "|---:|---:|---:|---:|---:|---|",
        *rows, ""]))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
