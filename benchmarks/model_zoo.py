"""Benchmark: transformers models under torch.compile, tilegraph (C++) against Inductor, side by side.

    python benchmarks/model_zoo.py --all      # every model of benchmarks/zoo_models.py (about 40 min on 2 shared cores)
    python benchmarks/model_zoo.py            # the fast subset (the test suite's ten models)
    python benchmarks/model_zoo.py --only GPT-2 Llama --check   # fallbacks and errors only: no Inductor, no timing

Writes benchmarks/results/model_zoo.md (`--out` elsewhere).

Per model, in one process: the captured graphs and the tilegraph graphs that fell back to eager
PyTorch (with the reason), the largest error against eager relative to the output's largest
magnitude, cold and warm compile times (first call of a fresh `torch.compile`; cold with empty
caches: a new tilegraph build cache, Inductor's `fresh_cache`; warm after `torch._dynamo.reset()`
with the caches filled), and the median time per call of both compiled models, interleaved round
by round so machine load hits them alike. Weights are random, re-initialised so that activations
stay O(1) (`zoo_models.init_weights`); the output's standard deviation is in the table to show it.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402

import tilegraph.frontends.fx  # noqa: E402,F401  (registers the backend)
from tilegraph.frontends.fx import TilegraphFallbackWarning  # noqa: E402
from tilegraph.frontends.fx.dynamo import tilegraph_backend  # noqa: E402
from timing import wait_policy  # noqa: E402
from zoo_models import MODELS, ZooModel, by_name  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "model_zoo.md"
TOLERANCE = 1e-3  # max |tilegraph - eager| / max |eager|


@dataclass
class Row:
    name: str
    family: str
    params: int
    out_std: float = 0.0
    graphs: int = 0
    fallbacks: list[str] = field(default_factory=list)
    kernels: int = 0
    error: float = math.nan
    cold: dict[str, float] = field(default_factory=dict)  # system -> seconds
    warm: dict[str, float] = field(default_factory=dict)
    per_call: dict[str, float] = field(default_factory=dict)
    failure: str = ""


class Recorder:
    """A Dynamo backend that hands each graph to tilegraph and keeps what came back."""

    def __init__(self) -> None:
        self.graphs = []

    def __call__(self, gm, example_inputs):
        compiled = tilegraph_backend(gm, example_inputs)
        self.graphs.append(compiled)
        return compiled

    def fallbacks(self) -> list[str]:
        return [f"{g.name}: {_first_line(g.fallback_reason)}" for g in self.graphs if g.eager]

    def kernels(self) -> int:
        return sum(len(c.program.program.kernels) for g in self.graphs for c in g._cache.values())


def _first_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return " ".join(lines[:3])[:300]


def tensors(output) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor)]


def relative_error(got, want) -> float:
    errors = []
    for g, w in zip(tensors(got), tensors(want)):
        if g.shape != w.shape:
            return math.inf
        scale = max(float(w.float().abs().max()), 1e-12)
        errors.append(float((g.float() - w.float()).abs().max()) / scale)
    return max(errors) if errors else math.inf


def first_call(model, inputs, backend) -> tuple[float, object]:
    """Seconds of the first call of a fresh torch.compile (capture, compile, run) and its output."""
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend)
    start = time.perf_counter()
    with torch.no_grad():
        out = compiled(*inputs)
    return time.perf_counter() - start, (compiled, out)


@contextlib.contextmanager
def tilegraph_cache(directory: str):
    """Point tilegraph's build cache (`$XDG_CACHE_HOME/tilegraph`) at `directory`."""
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = directory
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = old


def measure(systems: dict, rounds: int, budget_s: float) -> dict[str, float]:
    """Median seconds per call, the systems interleaved one call each per round."""
    for fn in systems.values():
        fn()
    times = {name: [] for name in systems}
    deadline = time.perf_counter() + budget_s
    for _ in range(rounds):
        for name, fn in systems.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
        if time.perf_counter() > deadline and len(times[next(iter(times))]) >= 5:
            break
    return {name: statistics.median(t) for name, t in times.items()}


def bench(spec: ZooModel, rounds: int, budget_s: float, timing: bool = True) -> Row:
    torch.manual_seed(0)
    model, inputs = spec.build()
    with torch.no_grad():
        want = model(*inputs)
    row = Row(spec.name, spec.family, sum(p.numel() for p in model.parameters()),
              out_std=float(tensors(want)[0].float().std()))
    recorder = Recorder()
    with tempfile.TemporaryDirectory(prefix="tg_zoo_") as cache, tilegraph_cache(cache):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TilegraphFallbackWarning)  # reported from the recorder
            row.cold["tilegraph"], (tg, got) = first_call(model, inputs, recorder)
            row.graphs, row.fallbacks, row.kernels = len(recorder.graphs), recorder.fallbacks(), recorder.kernels()
            row.error = relative_error(got, want)
            if timing:
                row.warm["tilegraph"], (tg, _) = first_call(model, inputs, Recorder())
        if not timing:
            return row
        with torch._inductor.utils.fresh_cache():
            row.cold["inductor"], (inductor, _) = first_call(model, inputs, "inductor")
            row.warm["inductor"], (inductor, _) = first_call(model, inputs, "inductor")

            def call(fn):
                def run():
                    with torch.no_grad():
                        fn(*inputs)
                return run

            row.per_call = measure({"tilegraph": call(tg), "inductor": call(inductor)}, rounds, budget_s)
    torch._dynamo.reset()
    return row


def warm_up() -> None:
    """One small compile on each side first, so no model pays the one-off import and start-up costs."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).eval()
    x = torch.randn(2, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for backend in ("tilegraph", "inductor"):
            first_call(model, (x,), backend)


# ----- the table ----------------------------------------------------------------------------------------------
def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}"


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.2f}" if seconds < 0.1 else f"{seconds * 1e3:.0f}"


def _geomean(values: list[float]) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(statistics.mean(math.log(v) for v in values)) if values else math.nan


def code_state() -> str:
    """The commit measured, and the folders holding uncommitted changes to tracked files (in a shared
    working tree the backends may be someone's work in progress)."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout

    try:
        commit = git("rev-parse", "--short", "HEAD").strip()
        lines = git("status", "--porcelain", "--untracked-files=no").splitlines()
        changed = sorted({"/".join(line[3:].split("/")[:2]) for line in lines if len(line) > 3})
    except OSError:
        return "not a git checkout"
    return f"commit {commit}" + (f", uncommitted changes in {', '.join(changed)}" if changed else ", clean")


def table(rows: list[Row], command: str, wall_s: float, load: tuple[float, float]) -> str:
    import platform

    import transformers

    within = sum(1 for r in rows if r.error <= TOLERANCE and not r.failure)
    fallback_free = sum(1 for r in rows if not r.fallbacks and not r.failure)
    timed = [r for r in rows if r.per_call]
    lines = [
        "# Model zoo: transformers models under torch.compile, tilegraph (C++) vs Inductor, CPU",
        "",
        f"Command: `{command}` ({wall_s / 60:.1f} min). Machine: {platform.machine()}, {os.cpu_count()} cores "
        f"(shared), torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.get_num_threads()} torch threads, {wait_policy()}; "
        f"load average (1 min) {load[0]:.1f} at the start, {load[1]:.1f} at the end. Code: {code_state()}.",
        "",
        "Small configs (2 layers, hidden 64, 16 tokens with a padded second row; 32x32 or 64x64 images), random "
        "weights re-initialised so activations stay O(1) (out std: the output's standard deviation). graphs: "
        "graphs Dynamo captured; fallbacks: those tilegraph ran eagerly, with the reason. error: max |tilegraph - "
        f"eager| / max |eager| (tolerance {TOLERANCE:g}). Compile: seconds of the first call of a fresh "
        "`torch.compile`, cold with empty caches (a new tilegraph build cache; Inductor's `fresh_cache`), warm "
        "after `torch._dynamo.reset()` with the caches filled. Per call: median, the two compiled models "
        "interleaved in one process; ratio = tilegraph / Inductor (below 1: tilegraph faster).",
        "",
        f"**{fallback_free}/{len(rows)} models without fallbacks, {within}/{len(rows)} within tolerance.** "
        f"Geometric means over {len(timed)} models: per call tilegraph/Inductor "
        f"{_geomean([r.per_call['tilegraph'] / r.per_call['inductor'] for r in timed]):.2f}; cold compile "
        f"{_geomean([r.cold['tilegraph'] / r.cold['inductor'] for r in timed]):.2f}; warm compile "
        f"{_geomean([r.warm['tilegraph'] / r.warm['inductor'] for r in timed]):.2f}.",
        "",
        "| model | family | params | out std | graphs | fallbacks | kernels | error | cold s tg / ind | "
        "warm s tg / ind | tg ms | ind ms | ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|",
    ]
    for r in rows:
        ratio = f"{r.per_call['tilegraph'] / r.per_call['inductor']:.2f}" if r.per_call else "-"
        error = "failed" if r.failure else f"{r.error:.1e}"
        lines.append(
            f"| {r.name} | {r.family} | {r.params / 1e3:.0f}k | {r.out_std:.2f} | {r.graphs} | {len(r.fallbacks)} | "
            f"{r.kernels} | {error} | {_s(r.cold.get('tilegraph'))} / {_s(r.cold.get('inductor'))} | "
            f"{_s(r.warm.get('tilegraph'))} / {_s(r.warm.get('inductor'))} | {_ms(r.per_call.get('tilegraph'))} | "
            f"{_ms(r.per_call.get('inductor'))} | {ratio} |")
    notes = [f"- {r.name}: {reason}" for r in rows for reason in r.fallbacks]
    notes += [f"- {r.name}: failed: {r.failure}" for r in rows if r.failure]
    if notes:
        lines += ["", "Fallbacks and failures:", "", *notes]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="every model, not only the fast subset")
    parser.add_argument("--only", nargs="+", metavar="MODEL", help="these models (names as in the table)")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--budget", type=float, default=8.0, help="seconds of per-call timing per model")
    parser.add_argument("--check", action="store_true", help="only fallbacks and errors: no Inductor, no timing")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    specs = [by_name(n) for n in args.only] if args.only else [m for m in MODELS if m.fast or args.all]
    start, load = time.perf_counter(), os.getloadavg()[0]
    warm_up()
    rows = []
    for spec in specs:
        try:
            row = bench(spec, args.rounds, args.budget, timing=not args.check)
        except Exception as e:  # one broken model must not lose the others' rows
            row = Row(spec.name, spec.family, 0, failure=f"{type(e).__name__}: {_first_line(str(e))}")
        rows.append(row)
        print(f"{spec.name}: graphs {row.graphs}, fallbacks {len(row.fallbacks)}, error {row.error:.1e}, cold "
              f"{row.cold}, per call {row.per_call} {row.failure}", file=sys.stderr, flush=True)
    command = "python benchmarks/model_zoo.py" + (" --all" if args.all else "") + (" --check" if args.check else "") + \
        (f" --only {' '.join(args.only)}" if args.only else "")
    text = table(rows, command, time.perf_counter() - start, (load, os.getloadavg()[0]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
