"""One f32 matmul on the C++ backend at several tilings, timed side by side: where the tile search's choice stands.

    python benchmarks/cpu_matmul_tiles.py 128 2816 1024 d0=64,d1=16,d2=2816 d0=64,d1=32,d2=2816 d1=64,d0=16,d2=2816
    python benchmarks/cpu_matmul_tiles.py 128 3072 768 --out benchmarks/results/cpu_matmul_tiles.md ...

`x[M, K] @ w[K, N]` (w a parameter, as a model's weights are) through `canonicalize,fuse,tile{target=cpu}`; the
tile pass's own choice is the first row, then each tiling given (loops named as the kernel names them, outermost first: the order is part of the tiling). Every
build is checked against numpy, then all are timed in interleaved rounds (the median of 7 rounds of 3 calls) on
the threads OpenMP gives (OMP_NUM_THREADS, else every CPU of the process). `--out` appends the table to a file.
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import interleaved  # noqa: E402

ROUNDS, CALLS = 7, 3


def build(m: int, k: int, n: int):
    from tilegraph.frontends.dsl import parse
    from tilegraph.passes import PassManager

    graph = parse(f"def f(x: f32[{m}, {k}]) -> f32[{m}, {n}] {{\n  param w: f32[{k}, {n}]\n  return x @ w\n}}")
    program = PassManager("canonicalize,fuse,tile{target=cpu}").run(graph)
    (kernel,) = program.kernels
    return program, kernel


def parse_tiling(text: str) -> tuple[tuple[str, int], ...]:
    try:
        return tuple((name.strip(), int(size)) for name, size in (part.split("=") for part in text.split(",")))
    except ValueError:
        raise SystemExit(f"cpu_matmul_tiles.py: a tiling is loop=size,...: got {text!r}") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("m", type=int)
    parser.add_argument("k", type=int)
    parser.add_argument("n", type=int)
    parser.add_argument("tilings", nargs="*", help="loop=size,... outermost first (e.g. d0=64,d1=32,d2=2816)")
    parser.add_argument("--out", type=Path, default=None, help="Markdown file to append this run's table to")
    args = parser.parse_args()

    from tilegraph.backends import cpp

    program, kernel = build(args.m, args.k, args.n)
    names = {name for name, _ in kernel.tiles}
    tilings = [kernel.tiles] + [parse_tiling(t) for t in args.tilings]
    for tiling in tilings[1:]:
        if {name for name, _ in tiling} != names:
            raise SystemExit(f"cpu_matmul_tiles.py: name every loop of the kernel ({', '.join(sorted(names))})")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.m, args.k), dtype=np.float32)
    w = rng.standard_normal((args.k, args.n), dtype=np.float32)
    want = x @ w
    fns = []
    (param,) = program.graph.params
    for tiling in tilings:
        fn = cpp.build(program.with_kernels([kernel.with_tiles(tiling)]), {param: w})
        got = fn(x)[0]
        if not np.allclose(got, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max())):
            raise SystemExit(f"cpu_matmul_tiles.py: tiling {tiling} computes another product")
        fns.append(fn)
    seconds = interleaved({str(n): (lambda fn=fn: fn(x)) for n, fn in enumerate(fns)}, ROUNDS, CALLS)
    flops = 2 * args.m * args.k * args.n
    lines = ["| tiling (outermost first) | ms | GFLOP/s |", "|---|---:|---:|"]
    for n, tiling in enumerate(tilings):
        ms = seconds[str(n)] * 1e3
        label = ", ".join(f"{name}={size}" for name, size in tiling) + (" (the tile pass's)" if n == 0 else "")
        lines.append(f"| {label} | {ms:.2f} | {flops / ms / 1e6:.0f} |")
    print("\n".join(lines))
    if args.out is not None:
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        head = (f"\n## {args.m} x {args.k} x {args.n}\n\nRun {when} by `python benchmarks/cpu_matmul_tiles.py "
                f"{' '.join(sys.argv[1:])}`; {fns[0].threads} threads.\n")
        with args.out.open("a") as out:
            out.write(head + "\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
