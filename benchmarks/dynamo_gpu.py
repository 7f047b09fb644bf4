"""torch.compile(backend="tilegraph") on the tensors' own device, against Inductor and eager.

    python benchmarks/dynamo_gpu.py            # writes benchmarks/results/dynamo_gpu.md
    python benchmarks/dynamo_gpu.py --quick    # fewer rows and layers, under 6 minutes on an H100
    python benchmarks/dynamo_gpu.py --cpu      # only the C++ path vs Inductor-CPU, to results/dynamo_cpu.md
    python benchmarks/dynamo_gpu.py --dry-run  # no GPU: tiny models through the Triton interpreter on
                                               # the CPU, checks this script end to end; writes nothing

Each row builds one model (transformers configs, random weights kept O(1), nothing downloaded),
moves it to the device in the row's dtype and runs, side by side in one process on the same
inputs: eager PyTorch, `torch.compile(backend="tilegraph")` (CUDA graphs on, as its default),
Inductor's default mode and Inductor's `mode="reduce-overhead"` (CUDA graphs). It reports per-call
time (triton.testing.do_bench), compile time (the first call, Dynamo's capture included, caches
emptied), the captured graphs, fallbacks, on which backend tilegraph ran them, device-to-host
copies in one steady-state call (torch profiler) and the error against eager relative to the
output's scale. CPU rows run the C++ path against Inductor-CPU at batch 1. A row that fails gets
its error in the note and the run goes on; `--budget` stops starting new rows after that many
seconds and lists those left out.
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import interleaved, wait_policy  # noqa: E402
from triton_gpu import ieee_f32, short_error  # noqa: E402  (TF32 off for a yardstick; a failed row's note)

RESULTS = Path(__file__).resolve().parent / "results" / "dynamo_gpu.md"
DRY_RUN = False


@dataclass(frozen=True)
class RowSpec:
    model: str
    device: str  # cuda | cpu
    dtype: str  # f32 | bf16
    batch: int
    layers: int | None = None  # transformer layers kept (None: all)


@dataclass
class Row:
    spec: RowSpec
    times: dict[str, float] = field(default_factory=dict)  # per-call ms by implementation
    compile_s: dict[str, float] = field(default_factory=dict)
    graphs: int = 0
    fallbacks: list[str] = field(default_factory=list)
    targets: set[str] = field(default_factory=set)
    d2h: int | None = None
    error: float | None = None
    note: str = ""


# ----- models ------------------------------------------------------------------------------------------
def llama4(batch: int, tiny: bool, layers: int | None):
    """A 4-layer Llama-style decoder (1024 wide, 16 heads, 4 key/value heads, SwiGLU 2816)."""
    import transformers
    from zoo_models import LastHidden, init_weights, text_inputs

    if tiny:
        config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                          num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                          use_cache=False)
    else:
        config = transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                                          num_hidden_layers=layers or 4, num_attention_heads=16,
                                          num_key_value_heads=4, max_position_embeddings=512, use_cache=False)
    model = init_weights(transformers.LlamaModel(config))
    return LastHidden(model, ("input_ids", "attention_mask")), text_inputs(batch, 16 if tiny else 128)


def overhead_mlp(batch: int, tiny: bool, layers: int | None):
    """Three small linear layers: per-call time here is launch overhead, not kernel time."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 64))
    return model.eval(), (torch.randn(batch, 64),)


def builders() -> dict:
    from torch_models import WHOLE_MODELS

    found = {m.name: m.build for m in WHOLE_MODELS}
    return {"overhead_mlp": overhead_mlp, "gpt2_small": found["gpt2_small"], "bert_base": found["bert_base"], "llama_4layer": llama4,
            "vit_base": found["vit_base"], "resnet50": found["resnet50"]}


def rows(quick: bool, cpu: bool = False) -> list[RowSpec]:
    if cpu:  # the C++ path against Inductor-CPU, every model at batch 1 (runs on any machine)
        return [RowSpec(m, "cpu", "f32", 1, 2 if quick and m not in ("overhead_mlp", "resnet50") else None)
                for m in builders()]
    if DRY_RUN:
        return [RowSpec(m, "cuda", "f32", 1) for m in builders()] + [RowSpec("gpt2_small", "cuda", "bf16", 1),
                                                                     RowSpec("resnet50", "cpu", "f32", 1)]
    if quick:  # two layers of each transformer: the per-call ratios of whole models, a fraction of the compiles
        small = [RowSpec("overhead_mlp", "cuda", "f32", 1), RowSpec("gpt2_small", "cuda", "f32", 1, 2), RowSpec("bert_base", "cuda", "f32", 1, 2),
                 RowSpec("llama_4layer", "cuda", "f32", 1, 2), RowSpec("vit_base", "cuda", "f32", 1, 2),
                 RowSpec("resnet50", "cuda", "f32", 1)]
        return small + [RowSpec("gpt2_small", "cuda", "bf16", 1, 2), RowSpec("llama_4layer", "cuda", "bf16", 1, 2),
                        RowSpec("gpt2_small", "cuda", "f32", 32, 2), RowSpec("resnet50", "cuda", "bf16", 32),
                        RowSpec("gpt2_small", "cpu", "f32", 1, 2), RowSpec("resnet50", "cpu", "f32", 1)]
    full = []
    for model in builders():
        for dtype in ("f32", "bf16"):
            for batch in (1, 32):
                full.append(RowSpec(model, "cuda", dtype, batch))
        full.append(RowSpec(model, "cpu", "f32", 1))
    return full


# ----- measuring ---------------------------------------------------------------------------------------
def bench(torch, fn, device: str) -> float:
    """Median ms per call: do_bench on CUDA; on the CPU (and in dry runs) the median over samples of
    back-to-back calls, each sample at least a millisecond long (a 30 us call timed alone is mostly noise)."""
    if device == "cuda" and not DRY_RUN:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=10, rep=100))
    fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    calls = max(1, min(1000, int(1e-3 / once)))
    samples = max(3, min(50, int((0.05 if DRY_RUN else 3.0) / (calls * once))))  # within the time budget
    return interleaved({"call": fn}, samples, calls)["call"] * 1e3


def synchronize(torch, device: str) -> None:
    if device == "cuda" and not DRY_RUN:
        torch.cuda.synchronize()


def fresh(torch) -> None:
    """Empty Dynamo's and Inductor's in-process caches (the on-disk ones point at a fresh folder)."""
    torch._dynamo.reset()


def first_call(torch, fn, inputs, device: str) -> tuple[object, float]:
    start = time.perf_counter()
    with torch.no_grad():
        out = fn(*inputs)
    synchronize(torch, device)
    return out, time.perf_counter() - start


def device_to_host_copies(torch, fn) -> int:
    """Device-to-host memcpys in one call, as the torch profiler records them."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(e.count for e in prof.key_averages() if "DtoH" in e.key or "Device -> Pageable" in e.key)


def openmp_facts(torch) -> str:
    """A CPU row's threading, for reading its time on another host: torch's threads, the CPUs this process may
    use, and the OpenMP runtimes loaded (two would mean tilegraph's kernels and torch's do not share threads)."""
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        maps = []
    runtimes = sorted({name for name in (line.split()[-1].rsplit("/", 1)[-1] for line in maps)
                       if re.match(r"lib[gi]?omp[-.]", name)})
    return (f"threads: torch {torch.get_num_threads()}, CPUs {len(os.sched_getaffinity(0))} of {os.cpu_count()}; "
            f"OpenMP {', '.join(runtimes) or 'none found'}; {wait_policy()}")


def run_row(spec: RowSpec) -> Row:
    import torch

    from tilegraph.frontends.fx.dynamo import tilegraph_backend

    row = Row(spec)
    device = "cpu" if spec.device == "cpu" or DRY_RUN else "cuda"
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[spec.dtype]
    model, inputs = builders()[spec.model](spec.batch, DRY_RUN, spec.layers)
    model = model.to(device=device, dtype=dtype).eval()
    inputs = tuple(x.to(device=device, dtype=dtype if x.is_floating_point() else x.dtype) for x in inputs)
    with torch.no_grad():
        want = model(*inputs)
        # eager's own drift from IEEE f32 where its convolutions run in TF32 (torch's default on CUDA): a random
        # ResNet-50 amplifies rounding so much that two correct TF32 runs differ by tens of percent
        drift = None
        if device == "cuda" and spec.dtype == "f32" and torch.backends.cudnn.allow_tf32:
            with ieee_f32(torch):
                drift = float((model(*inputs).float() - want.float()).abs().max())
    scale = max(float(want.float().abs().max()), 1e-6)

    graphs = []

    def backend(gm, example_inputs, **kwargs):
        compiled = tilegraph_backend(gm, example_inputs, **kwargs)
        graphs.append(compiled)
        return compiled

    options = {"target": "triton"} if DRY_RUN and spec.device == "cuda" else {}
    impls = {"tilegraph": lambda: torch.compile(model, backend=backend, options=options)}
    if spec.model == "overhead_mlp" and device == "cuda":  # the launcher's own cost, one launch at a time
        impls["tilegraph-nocg"] = lambda: torch.compile(model, backend=backend, options={**options, "cudagraphs": False})
    if not DRY_RUN:
        impls["inductor"] = lambda: torch.compile(model)
        if device == "cuda":
            impls["inductor-ro"] = lambda: torch.compile(model, mode="reduce-overhead")
    for name, make in impls.items():
        fresh(torch)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn = make()
            got, row.compile_s[name] = first_call(torch, fn, inputs, device)
            with torch.no_grad():  # the second call: tilegraph and reduce-overhead capture CUDA graphs here
                fn(*inputs)
            synchronize(torch, device)

            def call(fn=fn):
                with torch.no_grad():
                    return fn(*inputs)

            row.times[name] = bench(torch, call, device)
        if name == "tilegraph-nocg":
            kernels = sum(len(r.program.program.kernels) for g in graphs for r in g._cache.values()) // 2
            row.note = (f"without CUDA graphs {row.times[name]:.3f} ms, "
                        f"{1e3 * row.times[name] / max(kernels, 1):.1f} us per kernel launch ({kernels} kernels)")
        if name == "tilegraph" and device == "cpu":
            row.note = openmp_facts(torch)
        if name == "tilegraph":
            row.fallbacks = [str(w.message) for w in caught if "eagerly" in str(w.message)]
            row.graphs = len(graphs)
            row.targets = {g.target or "eager" for g in graphs}
            row.error = float((got.float() - want.float()).abs().max()) / scale
            if drift is not None and drift / scale > 1e-3:
                row.note = (f"{row.note}; " if row.note else "") + \
                    f"eager's TF32 convolutions are {drift / scale:.1e} from its IEEE f32"
            if device == "cuda" and not DRY_RUN:
                row.d2h = device_to_host_copies(torch, call)
        del fn
    fresh(torch)
    with torch.no_grad():
        row.times["eager"] = bench(torch, lambda: model(*inputs), device)
    return row


# ----- the table ---------------------------------------------------------------------------------------
def ratio(row: Row, other: str) -> str:
    ours, theirs = row.times.get("tilegraph"), row.times.get(other)
    return f"{theirs / ours:.2f}" if ours and theirs else "-"


def fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(results: list[Row], skipped: list[RowSpec], header: str) -> str:
    lines = [header, "",
             "| model | device | dtype | batch | layers | tg ms | eager ms | inductor ms | ind-ro ms | eager/tg "
             "| ind/tg | ind-ro/tg | compile s tg / ind / ind-ro | graphs | ran on | fallbacks | D2H | err | note |",
             "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|---:|---|"]
    for r in results:
        s = r.spec
        compile_s = " / ".join(fmt(r.compile_s.get(k), 1) for k in ("tilegraph", "inductor", "inductor-ro"))
        lines.append(f"| {s.model} | {s.device} | {s.dtype} | {s.batch} | {s.layers or 'all'} "
                     f"| {fmt(r.times.get('tilegraph'))} | {fmt(r.times.get('eager'))} | {fmt(r.times.get('inductor'))} "
                     f"| {fmt(r.times.get('inductor-ro'))} | {ratio(r, 'eager')} | {ratio(r, 'inductor')} "
                     f"| {ratio(r, 'inductor-ro')} | {compile_s} | {r.graphs} | {', '.join(sorted(r.targets)) or '-'} "
                     f"| {len(r.fallbacks)} | {'-' if r.d2h is None else r.d2h} "
                     f"| {'-' if r.error is None else f'{r.error:.1e}'} | {r.note} |")
    gpu = [r for r in results if r.spec.device == "cuda" and "tilegraph" in r.times]
    for other in ("inductor", "inductor-ro", "eager"):
        ratios = [r.times[other] / r.times["tilegraph"] for r in gpu if other in r.times]
        if ratios:
            lines.append("")
            lines.append(f"GPU rows, geometric mean of {other}/tilegraph: "
                         f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f} ({len(ratios)} rows)")
    if skipped:
        lines += ["", "Not run (over the time budget): " + ", ".join(
            f"{s.model} {s.device} {s.dtype} b{s.batch}" for s in skipped)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    global DRY_RUN
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rows, two layers per transformer")
    parser.add_argument("--dry-run", action="store_true", help="tiny models through the Triton interpreter (no GPU)")
    parser.add_argument("--budget", type=float, default=None, help="seconds after which no new row starts")
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--cpu", action="store_true", help="only the CPU rows (C++ vs Inductor-CPU), no GPU needed")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.cpu and args.out == RESULTS:
        args.out = RESULTS.with_name("dynamo_cpu.md")
    DRY_RUN = args.dry_run
    if DRY_RUN:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if not DRY_RUN and not args.cpu and not torch.cuda.is_available():
        print("no CUDA device: nothing measured (use --dry-run to check the script on the CPU)")
        return 0
    specs = [s for s in rows(args.quick, args.cpu) if not args.only or s.model in args.only.split(",")]
    results, skipped, start = [], [], time.perf_counter()
    for spec in specs:
        if args.budget is not None and time.perf_counter() - start > args.budget:
            skipped.append(spec)
            continue
        t0 = time.perf_counter()
        try:
            row = run_row(spec)
        except Exception as exc:  # one broken row must not lose the others
            row = Row(spec, note=short_error(exc))
        results.append(row)
        print(f"{spec}: {row.times} compile {row.compile_s} targets {row.targets} fallbacks {len(row.fallbacks)} "
              f"d2h {row.d2h} err {row.error} {row.note} ({time.perf_counter() - t0:.0f} s)", flush=True)
    device = ("the Triton interpreter (dry run)" if DRY_RUN else
              f"the CPU ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)" if args.cpu
              else torch.cuda.get_device_name())
    header = (f"# torch.compile(backend=\"tilegraph\") vs Inductor and eager on {device}\n\n"
              f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC by `python benchmarks/dynamo_gpu.py"
              f"{' --quick' if args.quick else ''}{' --cpu' if args.cpu else ''}`; torch {torch.__version__}. Per-call ms from "
              "triton.testing.do_bench (CPU rows: median wall time over samples of back-to-back calls, each at least 1 ms); ratios > 1 mean tilegraph is faster. "
              "ind-ro = Inductor with mode=\"reduce-overhead\" (CUDA graphs); tilegraph replays CUDA graphs by "
              "default. compile s = the first call (Dynamo capture + compile + run), in-process caches emptied. "
              "D2H = device-to-host copies in one steady-state tilegraph call (torch profiler). err = max abs "
              "error vs eager over the output's max magnitude (where eager's TF32 convolutions are far from its "
              "IEEE f32 result, the note says how far: the yardstick for err). Precision: TF32 "
              f"{'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'} for matmuls, "
              f"{'on' if torch.backends.cudnn.allow_tf32 else 'off'} for convolutions, on both sides.")
    text = table(results, skipped, header)
    print(text)
    if not DRY_RUN:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
