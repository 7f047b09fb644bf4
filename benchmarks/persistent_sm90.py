"""What the tuner's persistent candidates become on Hopper, without a GPU: for every whole-model dot kernel whose
best block-size variant has more tiles than an H100 has SMs, that variant compiled for sm_90 as generated and as
a persistent kernel (one program per SM walking the tiles, `variants.Variant.persistent`), side by side.

    python benchmarks/persistent_sm90.py                 # writes benchmarks/results/persistent_sm90.md
    python benchmarks/persistent_sm90.py --only gpt2_small

Per model (`torch_models.WHOLE_MODELS`, transformers with 2 of their layers at full width, as `triton_gpu.py
--quick` runs them) at batch 32 in bf16, each distinct kernel once, at the warps and stages the tuner times
variants at (`tuner._variant_warps`, `tuner.VARIANT_STAGES`): whether both compile, tensor-core instructions,
registers, spills, shared memory, and the seconds each compile took (one process each, its start included). No
times on a GPU: whether a persistent kernel pays is the tuner's measurement (`triton_gpu.py` logs it).
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results" / "persistent_sm90.md"
LAYERS, BATCH, DTYPE, UNITS = 2, 32, "bf16", 132


def compiled(fn, kernel, variant, function: str):
    """(CompiledKernel or the error's first line, seconds) for one variant of `kernel` built for sm_90."""
    from tilegraph.backends.triton import hopper, tuner, variants
    from tilegraph.backends.triton.module import GeneratedModule

    generated = fn.generated
    source = variants.emit_variant(kernel, variant, function, False, generated.names, fn.options, generated.layouts,
                                   generated.rounded)
    module = GeneratedModule(generated.text + "\n\n" + source.text, generated.names, [source], generated.arena,
                             generated.steps)
    start = time.perf_counter()
    try:
        (record,) = hopper.compile_kernels_isolated(
            module, arch=90, configs=[(tuner._variant_warps(kernel, variant), tuner.VARIANT_STAGES)])
    except Exception as error:  # noqa: BLE001 (a failed build is a row of the table)
        return str(error).strip().splitlines()[-1][:80].replace("|", "/"), time.perf_counter() - start
    return record, time.perf_counter() - start


def cell(record) -> str:
    if isinstance(record, str):
        return f"failed: {record}"
    return (f"{record.tensor_cores}, {record.registers} regs, {record.spills} spills, "
            f"{record.shared_bytes // 1024} KiB")


def rows(name: str) -> list[str]:
    from torch_models import whole_model

    import tilegraph
    from tilegraph.backends.base import get_backend
    from tilegraph.backends.triton import variants
    from tilegraph.backends.triton.autotune import canonical
    from tilegraph.driver import default_pipeline

    graph = whole_model(name).traced(DTYPE, BATCH, layers=LAYERS)
    fn = tilegraph.compile(graph, target="triton", pipeline=default_pipeline(get_backend("triton").tile_target))
    seen, out = set(), []
    for position, source in enumerate(fn.generated.kernels):
        if source is None or not source.uses_dot or canonical(source.text) in seen:
            continue
        seen.add(canonical(source.text))
        kernel = fn.program.kernels[position]
        proposed = variants.dot_variants(kernel, fn.program.target, options=fn.options,
                                         orders=fn.program.storage_orders(), units=UNITS)
        persistent = next((v for v in proposed if v.persistent), None)
        if persistent is None:
            continue
        plain = variants.Variant(persistent.tiles, persistent.group_m)
        tiles = variants.dot_shape(kernel.with_tiles(plain.tiles), fn.options).programs
        (a, a_s), (b, b_s) = (compiled(fn, kernel, v, f"{source.function}_{tag}")
                              for v, tag in ((plain, "plain"), (persistent, "persistent")))
        out.append(f"| {name} | {kernel.name} | {tiles} | {cell(a)} | {cell(b)} | {a_s:.1f} / {b_s:.1f} |")
        print(out[-1], flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--out", default=str(RESULTS), help="where to write the table")
    args = parser.parse_args(argv)
    from torch_models import WHOLE_MODELS

    names = [m.name for m in WHOLE_MODELS if not args.only or m.name in args.only.split(",")]
    table = []
    for name in names:
        table += rows(name)
    command = "python benchmarks/persistent_sm90.py" + (f" --only {args.only}" if args.only else "")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join([
        "# Persistent candidates on sm_90, without a GPU",
        "",
        f"Run {stamp} by `{command}`: the whole models at batch {BATCH} in {DTYPE} (transformers with {LAYERS} of "
        f"their layers at full width), every distinct dot kernel whose best block-size variant has more tiles than "
        f"{UNITS} SMs. Each built for sm_90 by Triton's bundled ptxas at the variant's warps and "
        "3 stages, as generated (`plain`) and as a persistent kernel of one program per SM. `s`: seconds per "
        "build, its Python process's start included.",
        "",
        "| model | kernel | tiles | plain | persistent | s plain / persistent |",
        "|---|---|---:|---|---|---:|",
        *table,
        "",
    ])
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
