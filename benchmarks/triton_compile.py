"""How long the Triton backend's first call spends compiling, kernels one at a time against side by side.

    python benchmarks/triton_compile.py                  # writes benchmarks/results/triton_compile.md
    python benchmarks/triton_compile.py --only gpt2_small

The launcher's first CUDA call binds every kernel to its compiled binary (`launch.DirectLaunch`), compiling
them on a pool of threads (`launch.parallel_compiles`, $TILEGRAPH_COMPILE_THREADS). Without a GPU this times
that very call on a paper sm_90 (`hopper.paper_gpu`: Triton's JIT specialises and compiles as on the
device; only loading the binaries is left out), in a fresh process with an empty Triton cache, once with
one compile thread (what the first walk did before) and once with one per CPU. Models as
`dynamo_gpu.py --quick` compiles them: transformers with 2 layers at full width, batch 1, f32.

`--tuning MODELS` also times the compiles of the first run's tuning (`Launcher.tune`, every candidate of every
kernel, no budget): `do_bench` is stubbed to 1 ms, so only compiling is timed; with one thread each
candidate compiles when it is reached, as before, with more they compile side by side per set.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results" / "triton_compile.md"
MODELS = ("resnet18_basic_block", "resnet50", "mobilenetv2", "bert_base", "gpt2_small", "llama_decoder_block",
          "vit_base")

FIRST_CALL = r"""
import json, sys, time
sys.path.insert(0, sys.argv[3])
import torch
from torch_models import WHOLE_MODELS
import tilegraph
from tilegraph.backends.triton import hopper, launch
from tilegraph.frontends.fx import from_module

model = next(m for m in WHOLE_MODELS if m.name == sys.argv[1])
module, inputs = model.build_in("f32", int(sys.argv[2]), layers=2)
with torch.no_grad():
    graph = from_module(module, inputs)
fn = tilegraph.compile(graph, target="triton", device="cpu")
launcher = fn.launcher()
ready = launcher.check([torch.as_tensor(t) for t in inputs])
tuning = None
with hopper.paper_gpu(90):
    if sys.argv[4] == "tuning":
        import triton.testing
        triton.testing.do_bench = lambda run, warmup, rep: 1.0  # compiles only: nothing launches on paper
        torch.cuda.get_device_name = lambda device=None: "Paper H100"
        start = time.perf_counter()
        launcher.tune(ready)
        tuning = time.perf_counter() - start
    start = time.perf_counter()
    launcher.bind_direct(ready, launch.compiled_runner)
    seconds = time.perf_counter() - start
assert launcher.direct, launcher.direct_error
print(json.dumps({"seconds": seconds, "tuning": tuning, "kernels": sum(s is not None for s in fn.generated.kernels),
                  "distinct": len({id(getattr(fn.module(), s.function)) for s in fn.generated.kernels if s is not None}),
                  "passes": sum(fn.compile_seconds.values())}))
"""


def first_call(name: str, batch: int, threads: int, tuning: bool) -> dict:
    """The first call's binding of `name` (after its tuning, if `tuning`), timed in a fresh process with an
    empty Triton cache."""
    from tilegraph.backends.triton.launch import COMPILE_THREADS

    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": cache,
               "TILEGRAPH_CACHE_DIR": str(Path(cache) / "tilegraph"), COMPILE_THREADS: str(threads),
               "TILEGRAPH_TUNE_SECONDS": "100000"}
        done = subprocess.run([sys.executable, "-c", FIRST_CALL, name, str(batch), str(Path(__file__).parent),
                               "tuning" if tuning else "binding"],
                              capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{name}: the first call failed\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--tuning", default="", help="comma-separated models whose tuning's compiles are also timed "
                                                      "(minutes each)")
    args = parser.parse_args(argv)
    from tilegraph.backends.triton.launch import compile_threads

    threads = compile_threads()
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    rows, ratios, tuning_rows = [], [], []
    for name in names:
        serial, parallel = first_call(name, args.batch, 1, False), first_call(name, args.batch, threads, False)
        ratios.append(serial["seconds"] / parallel["seconds"])
        rows.append(f"| {name} | {serial['kernels']} | {serial['distinct']} | {serial['passes']:.2f} | "
                    f"{serial['seconds']:.2f} | {parallel['seconds']:.2f} | {ratios[-1]:.2f}x |")
        if name in args.tuning.split(","):
            serial, parallel = first_call(name, args.batch, 1, True), first_call(name, args.batch, threads, True)
            tuning_rows.append(f"| {name} | {serial['tuning']:.1f} | {parallel['tuning']:.1f} | "
                               f"{serial['tuning'] / parallel['tuning']:.2f}x |")
            print(tuning_rows[-1], flush=True)
        print(rows[-1], flush=True)
    import torch
    import triton

    geomean = 1.0
    for ratio in ratios:
        geomean *= ratio ** (1 / len(ratios))
    command = "python benchmarks/triton_compile.py" + "".join(
        f" --{flag} {value}" for flag, value in (("only", args.only), ("batch", args.batch)) if value not in ("", 1)) + (
        f" --tuning {args.tuning}" if args.tuning else "")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join([
        "# Triton first-call compile: kernels one at a time vs side by side (sm_90 on paper)", "",
        f"Run {stamp} by `{command}`; Triton {triton.__version__}, torch {torch.__version__}, "
        f"{os.cpu_count()} CPUs, {threads} compile threads. The launcher's first-call binding of every kernel "
        "(`launch.DirectLaunch`), timed on a paper sm_90 (`hopper.paper_gpu`: Triton's JIT compiles as on the device, "
        "loading the binaries is left out), each in a fresh process with an empty Triton cache. Batch "
        f"{args.batch}, f32, transformers with 2 layers. `passes`: tilegraph's pass pipeline and code generation "
        "before it, for scale; `distinct`: functions compiled (a repeated layer's kernels are one). The GPU machine has 16 CPUs.", "",
        f"| model | kernels | distinct | passes s | 1 thread s | {threads} threads s | speed-up |",
        "|---|---:|---:|---:|---:|---:|---:|", *rows, "",
        f"Geometric mean speed-up with {threads} threads: {geomean:.2f}x over {len(ratios)} models.", ""])
    if tuning_rows:
        text += "\n".join([
            "", "## The first run's tuning, its compiles alone", "",
            "`--tuning`: `Launcher.tune` over every candidate of every kernel (no budget), `do_bench` stubbed to "
            "1 ms, in a fresh process with an empty Triton cache. One thread: each candidate compiles as it is "
            f"reached (as before); {threads}: each kernel's set compiles side by side first.", "",
            f"| model | 1 thread s | {threads} threads s | speed-up |", "|---|---:|---:|---:|",
            *tuning_rows, ""])
    RESULTS.write_text(text)
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
