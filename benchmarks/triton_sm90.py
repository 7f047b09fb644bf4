"""What the Triton backend's whole-model kernels become on Hopper, without a GPU: every kernel compiled
for sm_90 (`TritonProgram.compile_ahead`, Triton's bundled ptxas) and read back.

    python benchmarks/triton_sm90.py                 # writes benchmarks/results/triton_sm90.md
    python benchmarks/triton_sm90.py --only resnet50 # some models (comma-separated)
    python benchmarks/triton_sm90.py --nchw --out benchmarks/results/triton_sm90_nchw.md  # NCHW activations

Per model (`torch_models.WHOLE_MODELS`, transformers with 2 of their layers at full width, as
`triton_gpu.py --quick` runs them) at batch 32 and 1, in f32 and bf16, at the Program's own tiles and the
untuned launch configuration (`autotune.default_config`: 4 warps, 8 for a dot's 128 x 128 accumulator and
up; 3 pipeline stages for dot kernels whose blocks fit, else 2), f32 products in TF32 (as
`triton_gpu.py` allows on both sides) and also in IEEE f32 (`f32 ieee`: torch's default for matmuls, as
`dynamo_gpu.py` runs; such dots run on FMA units): how many distinct kernels, how
many run `tl.dot` and on which tensor-core instructions (`wgmma`, Hopper's; `mma.sync`; none), how
many stage loads with `cp.async` (what the software pipeliner overlaps with the math), how many loads move
single elements, registers, spills and shared memory. No times: this is the static half of issue 20, the GPU
tables are the other.
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results" / "triton_sm90.md"
LAYERS = 2
PLAN = ((32, "f32"), (32, "bf16"), (32, "f32 ieee"), (1, "f32"), (1, "f32 ieee"))  # f32 ieee: TF32 off


def row(name: str, batch: int, dtype: str, channels_last: bool = True) -> str:
    from torch_models import whole_model

    import tilegraph
    from tilegraph.backends.base import get_backend
    from tilegraph.backends.triton.autotune import canonical
    from tilegraph.driver import default_pipeline

    graph = whole_model(name).traced(dtype.split()[0], batch, layers=LAYERS)
    start = time.perf_counter()
    pipeline = default_pipeline(get_backend("triton").tile_target, channels_last)
    fn = tilegraph.compile(graph, target="triton", tf32=dtype == "f32", pipeline=pipeline)
    build = time.perf_counter() - start
    start = time.perf_counter()
    records = {r.function: r for r in fn.compile_ahead(90)}
    seconds = time.perf_counter() - start
    first: dict[str, object] = {}  # kernel text up to names -> its first source (a repeated layer's are aliases)
    for source in fn.generated.kernels:
        if source is not None:
            first.setdefault(canonical(source.text), source)
    distinct = [source.function for source in first.values()]
    dots = [records[source.function] for source in first.values() if source.uses_dot]
    cores = {kind: sum(r.tensor_cores == kind for r in dots) for kind in ("wgmma", "mma", "none")}
    kept = [records[f] for f in distinct]
    spilled = [r.spills for r in kept if r.spills]
    spills = f"{len(spilled)} ({max(spilled)} B)" if spilled else "0"
    registers = max((r.registers or 0) for r in kept)
    shared = max(r.shared_bytes for r in kept) / 1024
    launches = len(fn.generated.kernels)
    return (f"| {name} | {batch} | {dtype} | {launches} | {len(distinct)} | {len(dots)} | {library_share(fn):.0%} | "
            f"{cores['wgmma']} | "
            f"{cores['mma']} | {cores['none']} | {sum(r.cp_async for r in dots)} | "
            f"{sum(r.cp_async_bytes == 16 for r in dots)} | {sum(r.narrow_loads for r in dots)} | {spills} | {registers} | "
            f"{shared:.0f} | {build:.1f} | {seconds:.0f} |")


def library_share(fn) -> float:
    """The share of the program's dot FLOPs in kernels the tuner can also run as a library call
    (`backends/triton/library.py`: one matmul, an add, a short epilogue, by cuBLAS; `library_conv.py`: a
    convolution by cuDNN, the kernel's other ops over its output points generated)."""
    from tilegraph.backends.triton.tuner import library_candidate

    kernels = [(p, s) for p, s in enumerate(fn.generated.kernels) if s is not None and s.uses_dot]
    flops = sum(fn.program.kernels[p].flops for p, _ in kernels)
    library = sum(fn.program.kernels[p].flops for p, s in kernels if library_candidate(fn, p, s) is not None)
    return library / flops if flops else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--nchw", action="store_true",
                        help="build with NCHW activations (no layout pass), for comparison")
    parser.add_argument("--out", default=str(RESULTS), help="where to write the table")
    args = parser.parse_args(argv)
    from torch_models import WHOLE_MODELS

    import torch

    names = [m.name for m in WHOLE_MODELS if not args.only or m.name in args.only.split(",")]
    rows = []
    for batch, dtype in PLAN:
        for name in names:
            try:
                rows.append(row(name, batch, dtype, not args.nchw))
            except Exception as error:  # one model's failure is its row's note
                rows.append(f"| {name} | {batch} | {dtype} | {type(error).__name__}: "
                            f"{str(error).splitlines()[0][:120]} ||||||||||||||")
            print(rows[-1], flush=True)
    import triton

    from tilegraph.backends.triton.launch import compile_threads

    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "python benchmarks/triton_sm90.py" + (f" --only {args.only}" if args.only else "") + \
        (" --nchw" if args.nchw else "") + (f" --out {args.out}" if args.out != str(RESULTS) else "")
    layout = "NCHW activations" if args.nchw else "Channels-last (NHWC) activations around convolutions"
    Path(args.out).write_text(f"""# Triton whole-model kernels compiled for sm_90 (no GPU)

Run {when} by `{command}` (Triton {triton.__version__}, torch {torch.__version__}; the GPU
machine runs Triton 3.6, whose code can differ). {layout}. Transformers with {LAYERS} layers at full width. Program
tiles, the untuned launch configuration (4 warps, 8 for a dot's 128 x 128 accumulator and up; 3 stages for dot
kernels whose blocks fit, else 2). `f32`: products in TF32; `f32 ieee`: TF32 off (torch's default for matmuls),
so dots run on FMA units (`none`).
`kernels`: Triton launches per call; `distinct`: functions compiled (repeated layers share one); `dot`: distinct
kernels with `tl.dot`; `library-able`: the share of the dot FLOPs in kernels the tuner also times as a cuBLAS or
cuDNN call (`backends/triton/library.py`, `library_conv.py`); then the dot kernels by tensor-core instruction;
`cp.async`: dot kernels whose loads are staged (pipelined), `16 B`: of them, those copying some operand in whole
16-byte vectors; `narrow`: load instructions in the dot kernels' PTX that move one element where a vector would do
(cp.async under 16 B, 1-2 byte ld.global; a static count: a gather along a strided axis shows here); `spills`:
kernels with a stack frame (spilled registers: `cuobjdump`'s STACK), and the largest frame; `regs`, `shared KiB`: the largest of any kernel; `build s`: seconds of
`tilegraph.compile` (passes, parameters in the model's dtype, code generation); `s`: seconds to compile the
kernels for sm_90 here (on {compile_threads()} threads, `launch.compile_threads`).

| model | batch | dtype | kernels | distinct | dot | library-able | wgmma | mma | none | cp.async | 16 B | narrow | spills | regs | shared KiB | build s | s |
|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
""" + "\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
