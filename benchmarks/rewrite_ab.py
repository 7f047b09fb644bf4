"""A graph rewrite on the CPU, A/B in one process: a model's C++ Program built with the rewrite against the same
graph built without it, calls alternating.

    python benchmarks/rewrite_ab.py concat               # writes benchmarks/results/concat_ab.md
    python benchmarks/rewrite_ab.py grouped_attention    # writes benchmarks/results/grouped_attention_ab.md
    python benchmarks/rewrite_ab.py sink                 # writes benchmarks/results/sink_ab.md
    python benchmarks/rewrite_ab.py gelu_tanh            # writes benchmarks/results/gelu_tanh_ab.md
    python benchmarks/rewrite_ab.py weight_panels        # writes benchmarks/results/weight_panels_ab.md
    python benchmarks/rewrite_ab.py lane_sums            # writes benchmarks/results/lane_sums_ab.md
    python benchmarks/rewrite_ab.py narrow_rows          # writes benchmarks/results/narrow_rows_ab.md
    python benchmarks/rewrite_ab.py concat --models vit_base --calls 21

Rewrites (`REWRITES`): `concat`, the structured concat (a select between padded reads; canonicalize reads its
operands' slices and negations in place) against concats as copies; `grouped_attention`, grouped-query attention
decomposed over [b, g, r, l, d] (each group's keys and values read through their broadcast) against the
[b, h, l, d] decomposition of k and v copied per head; `sink`, the fuse pass's sinking round (a kernel's last
elementwise node moved into its only reader's kernel: Llama's q * cos into the rotary kernel); `gelu_tanh`,
GPT-2's GELU (tanh approximation, written as nine ops) recognised as one op; `weight_panels`, the C++ backend
reading a matmul's weight from a load-time copy in panels one vector wide against row-major; `lane_sums`, the C++
backend reducing a one-point register block's row across a vector's lanes against one element at a time;
`narrow_rows`, convolutions whose output rows are narrower than a vector run as channel blocks against row
blocks. Models are rows of `dynamo_gpu.py --cpu`. Between
processes this 2-core machine's times for one Program spread by several percent; alternating calls of both
builds in one process put the same load on each. The median ms of each and their ratio; for the GPU, the Triton
Program's launches and modelled bytes (its kernels' inputs and outputs) at batch 32 in bf16.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results"


@contextlib.contextmanager
def concat_as_copies() -> Iterator[None]:
    """Concats as layout copies: the structured space and canonicalize's concat rule off."""
    from tilegraph.ir import domain
    from tilegraph.ir.ops import layout
    from tilegraph.passes import canonicalize

    rule, reads = canonicalize.SIMPLIFICATIONS["concat"], layout.CONCAT_READS
    layout.CONCAT_READS, canonicalize.SIMPLIFICATIONS["concat"] = 0, (lambda graph, node: None)
    domain._SPACES.clear()  # spaces are memoised per node structure
    try:
        yield
    finally:
        layout.CONCAT_READS, canonicalize.SIMPLIFICATIONS["concat"] = reads, rule
        domain._SPACES.clear()


@contextlib.contextmanager
def switched_off(module: str, attribute: str) -> Iterator[None]:
    """`module.attribute` (a rule returning what it found, or a pass round) returning None inside the block."""
    import importlib

    owner = importlib.import_module(module)
    path = attribute.split(".")
    for name in path[:-1]:
        owner = getattr(owner, name)
    kept = getattr(owner, path[-1])
    setattr(owner, path[-1], lambda *args: None)
    try:
        yield
    finally:
        setattr(owner, path[-1], kept)


@dataclass(frozen=True)
class Rewrite:
    """A rewrite to compare: `without()` switches it off for the builds inside it."""

    without: Callable[[], contextlib.AbstractContextManager]
    models: str
    off: str  # the build without it, as the table names it
    on: str


REWRITES = {
    "concat": Rewrite(concat_as_copies, "llama_4layer,vit_base", "copies", "fused"),
    # k and v repeated per head, then [b, h, l, d], as any other attention
    "grouped_attention": Rewrite(lambda: switched_off("tilegraph.ir.ops.composite", "_grouped"), "llama_4layer",
                                 "per head", "grouped"),
    # the fuse pass without its sinking round: a last elementwise node stays with its producer
    "sink": Rewrite(lambda: switched_off("tilegraph.passes.fusion.fuse", "_Fuser.sink"), "llama_4layer",
                    "kept", "sunk"),
    # GPT-2's tanh GELU left as the nine ops it is written with
    "gelu_tanh": Rewrite(lambda: switched_off("tilegraph.passes.canonicalize", "_gelu_tanh"), "gpt2_small",
                         "written out", "one op"),
    # the C++ backend's matmul weights read row-major, not from their panels (a code-generation choice: the
    # Programs, and the GPU columns, are the same both ways)
    "weight_panels": Rewrite(lambda: switched_off("tilegraph.backends.cpp.microkernel",
                                                  "RegisterBlocks.plan_weight_panels"),
                             "llama_4layer;gpt2_small;bert_base;vit_base;cpu:transformer;cpu:GPT-2;"
                             "cpu:MLP 784-512-512-10, batch 1;cpu:MLP 784-512-512-10, batch 256", "row-major", "panels"),
    # the C++ backend's one-point register blocks reducing one element at a time, not across a vector's lanes (a
    # layer norm's means over one-row tiles; also a code-generation choice)
    "lane_sums": Rewrite(lambda: switched_off("tilegraph.backends.cpp.microkernel", "RegisterBlocks._lane_loop"),
                         "vit_base;gpt2_small;bert_base;llama_4layer;cpu:transformer;cpu:GPT-2", "one by one", "lanes"),
    # the C++ backend's convolutions over output rows narrower than a vector as row blocks (vectors along the row,
    # most lanes idle), not channel blocks (vectors along the output channels)
    "narrow_rows": Rewrite(lambda: switched_off("tilegraph.backends.cpp.conv", "narrow_row"),
                           "resnet50;cpu:ResNet-50;cpu:MobileNetV2;cpu:ResNet-18", "row blocks", "channel blocks"),
}


def compare(rewrite: Rewrite, model: str, calls: int) -> str:
    """One model's table row: kernels and median ms without and with the rewrite, their ratio, and the Triton
    Program's launches and bytes at batch 32 in bf16 without and with it. A model named `cpu:<start>` is the
    `cpu.py` row whose name starts so (its graph as cpu.py builds it; no GPU columns)."""
    import torch

    import tilegraph
    from tilegraph.driver import compile_program
    from tilegraph.frontends.fx import from_module

    def graph_of(batch: int, dtype):
        import dynamo_gpu

        module, inputs = dynamo_gpu.builders()[model](batch, False, None)
        module = module.eval().to(dtype)
        inputs = tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)
        with torch.no_grad():
            return from_module(module, inputs), inputs

    if model.startswith("cpu:"):
        import cpu

        (_, _, inputs, graph), = cpu.torch_rows(False, lambda name: name.startswith(model[len("cpu:"):]))
        wide = None
    else:
        graph, inputs = graph_of(1, torch.float32)
        wide, _ = graph_of(32, torch.bfloat16)
    builds, gpu = {}, {}
    for label, switch in ((rewrite.off, rewrite.without), (rewrite.on, contextlib.nullcontext)):
        with switch():
            builds[label] = tilegraph.compile(graph, target="cpp", program_cache=False)
            program = compile_program(wide, None, "gpu-h100")[0] if wide is not None else None
        gpu[label] = (len(program.kernels), sum(k.io_bytes for k in program.kernels) / 2 ** 20) if program else None
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
    off, on = rewrite.off, rewrite.on
    columns = [f"{gpu[label][0]} / {gpu[label][1]:.0f}" if gpu[label] else "-" for label in (off, on)]
    return (f"| {model} | {kernels[off]} | {ms[off]:.3f} | {kernels[on]} | {ms[on]:.3f} | {ms[on] / ms[off]:.3f} | "
            f"{columns[0]} | {columns[1]} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rewrite", choices=sorted(REWRITES))
    parser.add_argument("--models", default=None, help="rows of dynamo_gpu.py --cpu, or cpu:<start of a cpu.py row's "
                        "name>; comma-separated, or by ';' (default: the rewrite's)")
    parser.add_argument("--calls", type=int, default=31)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    import torch

    rewrite = REWRITES[args.rewrite]
    models = args.models or rewrite.models
    torch.set_num_threads(args.threads)
    rows = []
    for model in models.split(";" if ";" in models else ","):  # (";" where a cpu.py row's name has commas)
        rows.append(compare(rewrite, model, args.calls))
        print(rows[-1], flush=True)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    off, on = rewrite.off, rewrite.on
    out = RESULTS / f"{args.rewrite}_ab.md"
    out.write_text(f"""# {args.rewrite}: {on} against {off} on the CPU, in one process

Run {when} by `python benchmarks/rewrite_ab.py {args.rewrite} --models {shlex.quote(models)} --calls {args.calls}`
({args.threads} threads, torch {torch.__version__}). Each model's C++ Program built twice from one graph (batch 1,
f32), {off} and {on} (`rewrite_ab.py` says what each means); median ms of {args.calls} alternating calls. Ratio
below 1: {on} is faster. GPU: the Triton Program of the same model at batch 32 in bf16, built both ways (not
run): launches / MiB its kernels read and write.

| model | kernels ({off}) | ms ({off}) | kernels ({on}) | ms ({on}) | {on} / {off} | GPU ({off}) | GPU ({on}) |
|---|---:|---:|---:|---:|---:|---:|---:|
""" + "\n".join(rows) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
