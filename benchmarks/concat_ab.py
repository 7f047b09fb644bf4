"""The structured concat on the CPU, A/B in one process: a model's C++ Program with concats fused (a select
between padded reads, slices and negations read in place) against the same graph with concats as copies
(the structured space and canonicalize's concat rule switched off), calls alternating.

    python benchmarks/concat_ab.py        # the Llama decoder (4 layers) and ViT-base of dynamo_gpu.py --cpu,
                                          # writes benchmarks/results/concat_ab.md
    python benchmarks/concat_ab.py --models vit_base --calls 21

Between processes this 2-core machine's times for one Program spread by several percent; alternating calls
of both builds in one process put the same load on each. The median ms of each and their ratio.
"""
from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


RESULTS = Path(__file__).resolve().parent / "results" / "concat_ab.md"


def compare(model: str, calls: int) -> str:
    """One model's table row: kernels and median ms with concats as copies and fused, and the ratio."""
    import torch

    import dynamo_gpu
    import tilegraph
    from tilegraph.frontends.fx import from_module
    from tilegraph.ir import domain
    from tilegraph.ir.ops import layout
    from tilegraph.passes import canonicalize

    module, inputs = dynamo_gpu.builders()[model](1, False, None)
    with torch.no_grad():
        graph = from_module(module.eval(), inputs)
    rule, reads = canonicalize.SIMPLIFICATIONS["concat"], layout.CONCAT_READS
    builds = {}
    for label, fused in (("copies", False), ("fused", True)):
        layout.CONCAT_READS = reads if fused else 0
        canonicalize.SIMPLIFICATIONS["concat"] = rule if fused else (lambda graph, node: None)
        domain._SPACES.clear()  # spaces are memoised per node structure
        builds[label] = tilegraph.compile(graph, target="cpp", program_cache=False)
    layout.CONCAT_READS, canonicalize.SIMPLIFICATIONS["concat"] = reads, rule
    arrays = [x.numpy() for x in inputs]
    times: dict[str, list[float]] = {label: [] for label in builds}
    for fn in builds.values():
        fn(*arrays)
    for _ in range(calls):
        for label, fn in builds.items():
            start = time.perf_counter()
            fn(*arrays)
            times[label].append(time.perf_counter() - start)
    ms = {label: statistics.median(t) * 1e3 for label, t in times.items()}
    kernels = {label: len(fn.program.kernels) for label, fn in builds.items()}
    return (f"| {model} | {kernels['copies']} | {ms['copies']:.2f} | {kernels['fused']} | {ms['fused']:.2f} | "
            f"{ms['fused'] / ms['copies']:.3f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="llama_4layer,vit_base", help="rows of dynamo_gpu.py --cpu")
    parser.add_argument("--calls", type=int, default=31)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    rows = []
    for model in args.models.split(","):
        rows.append(compare(model, args.calls))
        print(rows[-1], flush=True)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    RESULTS.write_text(f"""# Structured concat on the CPU: fused against copies, in one process

Run {when} by `python benchmarks/concat_ab.py --models {args.models} --calls {args.calls}` ({args.threads}
threads, torch {torch.__version__}). Each model's C++ Program built twice from one graph: concats as copies
(the structured space and canonicalize's concat rule off) and fused (a select between padded reads, slices
and negations read in place); median ms of {args.calls} alternating calls. Ratio below 1: fused is faster.

| model | kernels (copies) | ms (copies) | kernels (fused) | ms (fused) | fused / copies |
|---|---:|---:|---:|---:|---:|
""" + "\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
