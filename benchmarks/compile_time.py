"""Cold and warm compile time of torch.compile(backend="tilegraph") against Inductor on the CPU, per phase.

    python benchmarks/compile_time.py            # writes benchmarks/results/compile_time.md
    python benchmarks/compile_time.py --models gpt2_small

Models: GPT-2 small, BERT-base (12 layers each, 128 tokens) and ResNet-50 (224x224), batch 1, from
transformers configs (benchmarks/torch_models.py). Cold: the first call of a fresh torch.compile with
empty caches on both sides (a new tilegraph build cache; Inductor's `fresh_cache`). Warm: the same
again after `torch._dynamo.reset()`, caches filled: Dynamo captures again, tilegraph converts again,
takes the scheduled Program from its program cache and loads the library it built. tilegraph's cold
time is split into phases: Dynamo's capture (the rest, with binding the weights, the first run and
any garbage collection), conversion, the pass pipeline (through the program cache: the key and the
entry's write count here), code generation, and the C++ build.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import statistics
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from model_zoo import first_call, tilegraph_cache, warm_up  # noqa: E402
from torch_models import WHOLE_MODELS  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "compile_time.md"
MODELS = ("gpt2_small", "bert_base", "resnet50")
PHASES = ("conversion", "passes", "codegen", "build")


@contextlib.contextmanager
def phase_timer(seconds: dict[str, float]):
    """Add the time spent in each of tilegraph's compile phases to `seconds` while active."""
    from tilegraph import program_cache
    from tilegraph.backends import cpp
    from tilegraph.frontends.fx import dynamo

    patches = [(dynamo, "convert_graph_module", "conversion"), (program_cache, "run_cached", "passes"),
               (cpp, "generate", "codegen"), (cpp, "build_library", "build")]
    originals = [(module, name, getattr(module, name)) for module, name, _ in patches]

    def timed(function, phase):
        def run(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[phase] += time.perf_counter() - start
        return run

    for (module, name, phase), (_, _, function) in zip(patches, originals):
        setattr(module, name, timed(function, phase))
    try:
        yield
    finally:
        for module, name, function in originals:
            setattr(module, name, function)


def measure(name: str) -> dict:
    build = {m.name: m.build for m in WHOLE_MODELS}[name]
    model, inputs = build(1, False, None)
    row = {"model": name, "phases": defaultdict(float)}
    with tempfile.TemporaryDirectory(prefix="tg_compile_") as cache, tilegraph_cache(cache):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with phase_timer(row["phases"]):
                row["tg_cold"], _ = first_call(model, inputs, "tilegraph")
            row["tg_warm"], _ = first_call(model, inputs, "tilegraph")
    with torch._inductor.utils.fresh_cache():
        row["ind_cold"], _ = first_call(model, inputs, "inductor")
        row["ind_warm"], _ = first_call(model, inputs, "inductor")
    torch._dynamo.reset()
    return row


def table(rows: list[dict]) -> str:
    lines = ["| model | tilegraph cold s | Inductor cold s | cold speed-up | tilegraph warm s | Inductor warm s "
             "| tilegraph cold: capture + other / conversion / passes / codegen / build s |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        phases = r["phases"]
        rest = r["tg_cold"] - sum(phases[p] for p in PHASES)
        split = " / ".join(f"{v:.2f}" for v in (rest, *(phases[p] for p in PHASES)))
        lines.append(f"| {r['model']} | {r['tg_cold']:.2f} | {r['ind_cold']:.2f} | {r['ind_cold'] / r['tg_cold']:.2f}x "
                     f"| {r['tg_warm']:.2f} | {r['ind_warm']:.2f} | {split} |")
    speedups = [r["ind_cold"] / r["tg_cold"] for r in rows]
    lines += ["", f"Cold compile, geometric mean of Inductor / tilegraph: "
              f"{math.exp(statistics.mean(map(math.log, speedups))):.2f}x over {len(rows)} models; "
              f"tilegraph warm recompile {min(r['tg_warm'] for r in rows):.2f}-{max(r['tg_warm'] for r in rows):.2f} s."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    warm_up()
    rows = []
    for name in args.models.split(","):
        rows.append(measure(name))
        print(rows[-1], flush=True)
    header = (f"# Compile time: torch.compile(backend=\"tilegraph\") (C++) vs Inductor, CPU\n\n"
              f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC by `python benchmarks/compile_time.py`; "
              f"torch {torch.__version__}, {torch.get_num_threads()} threads. Batch 1; times are the first call of a fresh "
              "torch.compile (capture + compile + one run). Cold: empty caches on both sides; warm: again after "
              "torch._dynamo.reset() with the caches filled. The phases split tilegraph's cold time; 'capture + "
              "other' is Dynamo's capture and the first run.\n\n")
    text = header + table(rows)
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
