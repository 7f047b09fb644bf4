"""Host time per kernel launch of the Triton backend: the generic walk (every step through its step
function and triton.jit's dispatch) against the direct path (`launch.DirectLaunch`: binaries bound once).

    python benchmarks/launch_overhead.py          # CPU, no GPU needed: the launcher's own Python per step,
                                                  # with the kernels stubbed out (Triton's launch not counted)
    python benchmarks/launch_overhead.py --gpu    # CUDA: real launches; host time to enqueue one call, and
                                                  # wall time per call (device included), per model at batch 1

Models: `torch_models.WHOLE_MODELS` at batch 1 in f32, transformers with 2 of their layers at full width.
Each mode is timed in interleaved rounds (the median is reported). Writes its section of
benchmarks/results/launch_overhead.md and keeps the other section.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import interleaved  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "launch_overhead.md"
CPU_MODELS = ("resnet18_basic_block", "resnet50", "mobilenetv2", "bert_base", "gpt2_small", "llama_decoder_block",
              "vit_base")
GPU_MODELS = ("resnet18_basic_block", "llama_decoder_block", "gpt2_small", "bert_base")
LAYERS = 2
ROUNDS, CALLS = 7, 50


class _Stub:
    """A kernel that launches nothing: what is left of a call is the launcher's own Python."""

    def __getitem__(self, grid):
        return self

    def __call__(self, *args, **kwargs):
        return None


def _stub_runner(fn, grid, args, warps, stages):
    return _Stub()


def build(name: str):
    """The model's Triton program and its inputs (CPU tensors)."""
    import torch
    from torch_models import whole_model

    import tilegraph
    from tilegraph.frontends.fx import from_module

    module, inputs = whole_model(name).build_in("f32", 1, layers=LAYERS)
    with torch.no_grad():
        graph = from_module(module, inputs)
    return tilegraph.compile(graph, target="triton"), inputs


def rounds(calls: dict, sync=None) -> dict[str, float]:
    """Median seconds per call of each callable, over interleaved rounds of CALLS calls."""
    return interleaved(calls, ROUNDS, CALLS, sync)


def cpu_rows() -> list[str]:
    rows = []
    for name in CPU_MODELS:
        fn, inputs = build(name)
        module = fn.module()
        for attr in [a for a in vars(module) if a.startswith("kernel_")]:
            setattr(module, attr, _Stub())
        launcher = fn.launcher()
        ready = launcher.check(list(inputs))
        launcher.bind_direct(ready, _stub_runner)
        configs = fn.configs
        t = rounds({"walk": lambda: launcher._walk(ready, lambda s, a: launcher._launch(s, a, *configs[s.position])),
                    "direct": lambda: launcher.direct(ready)})
        rows.append(f"| {name} | {_counts(fn)} | {t['walk'] * 1e6:.0f} | {t['direct'] * 1e6:.0f} | "
                    f"{t['walk'] / t['direct']:.1f}x |")
        print(rows[-1], flush=True)
    return rows


def _counts(fn) -> str:
    """'kernels | layout steps' of a program: Triton launches, and torch data movement (reshape, concat, gather)."""
    layout = sum(source is None for source in fn.generated.kernels)
    return f"{len(fn.generated.kernels) - layout} | {layout}"


def gpu_rows() -> list[str]:
    import torch

    rows = []
    for name in GPU_MODELS:
        fn, inputs = build(name)
        launcher = fn.launcher("cuda")
        ready = launcher.check([x.cuda() for x in inputs])
        launcher(*ready)  # compiles every kernel, then binds the direct path
        direct = launcher.direct
        if not direct:
            rows.append(f"| {name} | {_counts(fn)} | direct path not bound: {launcher.direct_error} ||||")
            continue
        launcher(*ready)
        torch.cuda.synchronize()

        def walk():
            launcher.direct = False
            launcher(*ready)
            launcher.direct = direct

        host = rounds({"walk": walk, "direct": lambda: launcher(*ready)})
        wall = rounds({"walk": walk, "direct": lambda: launcher(*ready)}, sync=torch.cuda.synchronize)
        rows.append(f"| {name} | {_counts(fn)} | {host['walk'] * 1e6:.0f} | {host['direct'] * 1e6:.0f} | "
                    f"{wall['walk'] * 1e6:.0f} | {wall['direct'] * 1e6:.0f} | {wall['walk'] / wall['direct']:.2f}x |")
        print(rows[-1], flush=True)
    return rows


def write(section: str, text: str) -> None:
    """Replace `section` (a `## ` heading) of the results file, keeping the other sections."""
    old = RESULTS.read_text() if RESULTS.exists() else "# Triton launcher: host time per kernel launch\n"
    parts = old.split("\n## ")
    kept = [p for p in parts[1:] if not p.startswith(section)]
    RESULTS.write_text("\n## ".join([parts[0].rstrip() + "\n", *kept, text.strip().removeprefix("## ") + "\n"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="real launches on the CUDA device")
    args = parser.parse_args(argv)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if args.gpu:
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device: nothing measured (run without --gpu for the CPU section)")
            return 0
        rows = gpu_rows()
        write("GPU", f"""## GPU: real launches on {torch.cuda.get_device_name()}

Run {when} by `python benchmarks/launch_overhead.py --gpu` (torch {torch.__version__}). Batch 1, f32,
transformers with {LAYERS} layers; no tuning (default launch configurations). Host: microseconds to
enqueue one call (no synchronisation); wall: microseconds per call with the device's work.

| model | Triton kernels | layout steps (torch) | host us, walk | host us, direct | wall us, walk | wall us, direct | walk/direct (wall) |
|---|---:|---:|---:|---:|---:|---:|---:|
""" + "\n".join(rows))
        return 0
    os.environ["TRITON_INTERPRET"] = "1"  # CPU tensors: the launcher runs, the stubbed kernels do nothing
    rows = cpu_rows()
    write("CPU", f"""## CPU: the launcher's own Python per kernel (kernels stubbed out)

Run {when} by `python benchmarks/launch_overhead.py` on {os.cpu_count()} CPU cores, batch 1, f32,
transformers with {LAYERS} layers. What a launch costs beyond Triton's own: the walk calls each step
function (it makes its arena views and binds its outputs) and then `kernel[grid](...)`, which is stubbed here,
so Triton's argument binding and cache lookup (the larger part on a GPU) are not counted; the direct path
hands each bound binary its tensors from a list. Layout steps (torch reshape, concat, gather) run in both,
on real CPU tensors. Microseconds per call, median of {ROUNDS} interleaved rounds of {CALLS} calls.

| model | Triton kernels | layout steps (torch) | us per call, walk | us per call, direct | walk/direct |
|---|---:|---:|---:|---:|---:|
""" + "\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
