"""Benchmark: C++ libraries that execute the memory plan within a byte limit, against the unlimited build.

    python benchmarks/memory_limit.py                  # every model and limit, writes results/memory_limit.md
    python benchmarks/memory_limit.py --models resnet  # rows whose model name has a filter word

For each model (the whole-model rows of `torch_models.py` at batch 1, through the fx frontend) the
unlimited build (liveness arena) and builds with `memory_limit=` 256 KiB, 1 MiB and 4 MiB: the
plan (intermediates only; parameters, inputs and outputs stay in the caller's memory) keeps tensors
at its offsets in an arena of the limit, spills and reloads through a far pool, and streams tensors
too big to keep whole from that pool. Columns: the arena and far pool the library uses, spill copies
and streamed tensors, the plan's solve time, per-call time (median, all builds of a model
interleaved in one process) and its ratio to the unlimited build, and the max difference from the
unlimited build's outputs.
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tilegraph  # noqa: E402
from tilegraph.frontends.fx import from_module  # noqa: E402
from tilegraph.ir import TilegraphError  # noqa: E402
from torch_models import whole_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "memory_limit.md"
LIMITS = ("256KiB", "1MiB", "4MiB")
MODELS = ("resnet18_basic_block", "mobilenetv2", "resnet50", "gpt2_small", "bert_base")


def kib(n: int) -> str:
    return f"{n / 1024:,.0f}"


def measure(name: str, rounds: int, layers: int | None) -> list[dict]:
    spec = whole_model(name)
    module, inputs = spec.build(1, False, layers if spec.layered else None)
    graph = from_module(module, inputs)
    arrays = [t.numpy() for t in inputs]
    builds: dict[str, object] = {}
    rows: list[dict] = []
    for limit in (None, *LIMITS):
        start = time.perf_counter()
        try:
            fn = tilegraph.compile(graph, target="cpp", memory_limit=limit)
        except TilegraphError as error:
            rows.append({"limit": limit, "error": str(error).splitlines()[0]})
            continue
        seconds = time.perf_counter() - start
        builds[limit] = fn
        plan = fn.program.memory_plan
        arena = fn.generated.arena
        rows.append({"limit": limit, "fn": fn, "arena": arena.size, "far": arena.far_size,
                     "spills": sum(c.kind == "store" for c in arena.copies), "streamed": len(arena.streamed),
                     "solve": plan.solve_time if plan is not None else 0.0, "compile": seconds})
    for fn in builds.values():
        fn(*arrays)  # warm up
    times: dict[str, list[float]] = {k: [] for k in builds}
    for _ in range(rounds):
        for key, fn in builds.items():
            start = time.perf_counter()
            fn(*arrays)
            times[key].append(time.perf_counter() - start)
    want = builds[None](*arrays)
    for row in rows:
        if "error" in row:
            continue
        got = row.pop("fn")(*arrays)
        row["ms"] = statistics.median(times[row["limit"]]) * 1e3
        row["ratio"] = row["ms"] / (statistics.median(times[None]) * 1e3)
        row["diff"] = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))
    return [{"model": name, **row} for row in rows]


def table(rows: list[dict]) -> str:
    lines = ["| model | limit | arena KiB | far pool KiB | spills | streamed | plan solve s | compile s | ms/call | "
             "vs unlimited | max diff |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        limit = r["limit"] or "none (liveness)"
        if "error" in r:
            lines.append(f"| {r['model']} | {limit} | {r['error']} |||||||||")
            continue
        lines.append(f"| {r['model']} | {limit} | {kib(r['arena'])} | {kib(r['far'])} | {r['spills']} | "
                     f"{r['streamed']} | {r['solve']:.1f} | {r['compile']:.1f} | {r['ms']:.2f} | {r['ratio']:.2f}x | "
                     f"{r['diff']:.1e} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated filter words")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--layers", type=int, default=2, help="layers kept of the transformer models")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    words = [w for w in args.models.split(",") if w]
    torch.set_num_threads(2)
    rows = []
    started = time.perf_counter()
    for name in MODELS:
        if words and not any(w in name for w in words):
            continue
        print(f"{name} ...", file=sys.stderr, flush=True)
        rows.extend(measure(name, args.rounds, args.layers))
    text = table(rows)
    print(text)
    if not args.no_write:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        RESULTS.write_text(
            "# C++ within a memory limit: executed memory plans vs the unlimited build\n\n"
            f"Run {stamp} by `python benchmarks/memory_limit.py{' --models ' + args.models if words else ''}` "
            f"({time.perf_counter() - started:.0f} s); 2 threads, batch 1, transformers models with "
            f"{args.layers} layers. The arena holds the plan's scratchpad (64-byte units); the far pool the "
            "spilled and streamed tensors; parameters, inputs and outputs stay in the caller's memory and are "
            "not counted. Per-thread kernel scratch comes on top (a few KiB, reported by the build). "
            "ms/call: median over interleaved rounds; max diff: against the unlimited build.\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
