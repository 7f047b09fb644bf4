"""Benchmark: tilegraph-cpp against torch eager and torch.compile (Inductor, CPU), side by side.

    python benchmarks/cpu.py              # every row at 1 and 2 threads, writes benchmarks/results/cpu.md
    python benchmarks/cpu.py --quick      # fewer repetitions, no GPT-2, ResNet-50, MobileNetV2 (smoke test)
    python benchmarks/cpu.py --models resnet-50,mobilenet --threads 1   # rows whose name has a filter word

Rows: the DSL examples (examples/*.tg, run in torch through a small op-by-op interpreter of the
same graph with the same parameter values) and torch models (a ResNet-18 basic block, a
transformer encoder layer, GPT-2 tiny, ResNet-50 and MobileNetV2 from transformers' default
configs at 224x224, batch 1, with `zoo_models.py`'s weights that keep activations O(1), an MLP
at batch 1 and 256), converted with the fx frontend. Every row runs at each thread count in
`--threads`: `torch.set_num_threads(n)` sets both torch's and tilegraph's OpenMP threads (they
share torch's libgomp), and Inductor compiles afresh per count (its kernels fix their thread count).
All three systems run in this one process, interleaved round by round (one call each per round),
so machine load hits them alike; the time is the median per call, the ratios are tilegraph's time
over the other's (below 1: tilegraph is faster). Memory: the resident-set growth during one warm
call (`/proc/self/clear_refs` resets the high-water mark; allocators that reuse freed blocks show
0), and tilegraph's planned working memory, arena plus outputs, which it holds for the whole call.
Before timing, each row checks tilegraph's result against torch eager.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

# OMP_WAIT_POLICY is left as torch leaves it (`timing.wait_policy`): the peers at their default.

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tilegraph  # noqa: E402
from tilegraph.backends import reference  # noqa: E402
from tilegraph.frontends.dsl import parse_file  # noqa: E402
from tilegraph.frontends.fx import from_module  # noqa: E402
from timing import wait_policy  # noqa: E402
from torch_models import BasicBlock  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "cpu.md"


# ----- DSL graphs in torch: one torch call per node ----------------------------------------------------
def _attention(args, attrs):
    q, k, v, *mask = args
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[0] if mask else None, is_causal=attrs["causal"],
                                          scale=attrs["scale"])


def _layer_norm(args, attrs):
    x, *affine = args
    shape = [x.shape[a] for a in sorted(a % x.dim() for a in attrs["axes"])]
    return F.layer_norm(x, shape, affine[0] if affine else None, affine[1] if len(affine) > 1 else None, attrs["eps"])


def _batch_norm(args, attrs):
    x, mean, var, *affine = args
    return F.batch_norm(x, mean, var, affine[0] if affine else None, affine[1] if len(affine) > 1 else None,
                        training=False, eps=attrs["eps"])


TORCH_OPS = {
    "add": lambda a, at: a[0] + a[1],
    "matmul": lambda a, at: torch.matmul(a[0], a[1]),
    "relu": lambda a, at: F.relu(a[0]),
    "gelu": lambda a, at: F.gelu(a[0], approximate=at["approximate"]),
    "reshape": lambda a, at: a[0].reshape(at["shape"]),
    "transpose": lambda a, at: a[0].permute(at["perm"]),
    "log_softmax": lambda a, at: F.log_softmax(a[0], dim=at["axis"]),
    "conv2d": lambda a, at: F.conv2d(a[0], a[1], stride=at["stride"], padding=at["padding"],
                                     dilation=at["dilation"], groups=at["groups"]),
    "max_pool2d": lambda a, at: F.max_pool2d(a[0], at["kernel"], at["stride"] or at["kernel"], at["padding"]),
    "attention": _attention, "layer_norm": _layer_norm, "batch_norm": _batch_norm,
}


class GraphModule(torch.nn.Module):
    """A tilegraph Graph evaluated with torch ops (for the DSL rows), parameters as buffers."""

    def __init__(self, graph, params: dict) -> None:
        super().__init__()
        self.graph = graph
        self.names = {v: f"p{n}" for n, v in enumerate(graph.params)}
        for v in graph.params:
            self.register_buffer(self.names[v], torch.from_numpy(np.array(params[v])))

    def forward(self, *inputs):
        env = dict(zip(self.graph.inputs, inputs))
        env.update({v: getattr(self, name) for v, name in self.names.items()})
        for node in self.graph.nodes:
            env[node.result] = TORCH_OPS[node.op]([env[v] for v in node.inputs], node.attrs)
        return tuple(env[v] for v in self.graph.outputs)


# ----- models -----------------------------------------------------------------------------------------------
class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(784, 512), torch.nn.Linear(512, 512), torch.nn.Linear(512, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def gpt2_tiny():
    import transformers

    config = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=128,
                                     use_cache=False, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2Model(config).eval(), (torch.randint(0, 1000, (1, 64)),)


def transformers_vision(name: str):
    """transformers' ResNet-50 or MobileNetV2 (default configs), 224x224, batch 1, zoo weights."""
    import transformers
    from zoo_models import LastHidden, calibrate_batch_norms, image_inputs, init_weights

    config, cls = {"ResNet-50": ("ResNetConfig", "ResNetModel"),
                   "MobileNetV2": ("MobileNetV2Config", "MobileNetV2Model")}[name]
    model = init_weights(getattr(transformers, cls)(getattr(transformers, config)()))
    wrapped = calibrate_batch_norms(LastHidden(model, ("pixel_values",)), image_inputs(224, batch=2, seed=5))
    return wrapped, image_inputs(224)


def torch_rows(quick: bool, wanted=lambda name: True):
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, dropout=0.0,
                                             activation="gelu", batch_first=True)
    rows = [
        ("ResNet-18 basic block 1x64x56x56", BasicBlock(), (torch.randn(1, 64, 56, 56),)),
        ("transformer encoder layer 1x128x256", layer, (torch.randn(1, 128, 256),)),
        ("MLP 784-512-512-10, batch 1", MLP(), (torch.randn(1, 784),)),
        ("MLP 784-512-512-10, batch 256", MLP(), (torch.randn(256, 784),)),
    ]
    if not quick:
        try:
            model, inputs = gpt2_tiny()
            rows.insert(2, ("GPT-2 tiny (2 layers, 128 wide), 64 tokens", model, inputs))
            for name in ("ResNet-50", "MobileNetV2"):
                if wanted(f"{name} 1x3x224x224"):
                    rows.insert(-2, (f"{name} 1x3x224x224", *transformers_vision(name)))
        except ImportError:
            print("transformers is not installed: no GPT-2, ResNet-50 or MobileNetV2 rows", file=sys.stderr)
    for name, model, inputs in rows:
        if not wanted(name):
            continue
        model.eval()
        calibrated = name.startswith(("ResNet-50", "MobileNetV2"))  # zoo_models set their batch norms
        for m in model.modules():  # non-trivial inference-mode batch norms
            if isinstance(m, torch.nn.BatchNorm2d) and not calibrated:
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        yield name, model, inputs, from_module(model, inputs)


def dsl_rows(wanted=lambda name: True):
    for name in ("mlp", "transformer_block", "resnet_block", "lenet"):
        if not wanted(f"examples/{name}.tg"):
            continue
        graph = parse_file(ROOT / "examples" / f"{name}.tg")
        params = reference.random_params(graph)
        inputs = tuple(torch.from_numpy(a) for a in reference.random_inputs(graph))
        yield f"examples/{name}.tg", GraphModule(graph, params).eval(), inputs, graph, params


# ----- measurement ----------------------------------------------------------------------------------------
def _status() -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in open("/proc/self/status") if line.startswith("Vm"))
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def peak_kib(fn) -> int:
    """RSS high-water mark during one call above the RSS before it (KiB)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return -1
    before, _ = _status()
    fn()
    _, peak = _status()
    return max(0, peak - before)


def measure(systems: dict, rounds: int) -> dict[str, float]:
    """Median seconds per call, interleaving the systems one call each per round."""
    for fn in systems.values():
        for _ in range(2):
            fn()
    times = {name: [] for name in systems}
    deadline = time.perf_counter() + 20.0
    for _ in range(rounds):
        for name, fn in systems.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
        if time.perf_counter() > deadline and len(times[next(iter(times))]) >= 5:
            break
    return {name: statistics.median(t) for name, t in times.items()}


def bench_row(name, module, inputs, graph, params, rounds: int) -> dict:
    torch._dynamo.reset()  # Inductor compiles for the current thread count
    np_inputs = [t.numpy() for t in inputs]
    start = time.perf_counter()
    compiled = tilegraph.compile(graph, target="cpp",
                                 params={v.name: a for v, a in params.items()} if params else None)
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    inductor = torch.compile(module, backend="inductor")
    with torch.no_grad():
        inductor(*inputs)
    inductor_s = time.perf_counter() - start
    with torch.no_grad():
        want = module(*inputs)
    want = [t for t in torch.utils._pytree.tree_leaves(want) if isinstance(t, torch.Tensor)]
    got = compiled(*np_inputs)
    error = max(float(np.abs(g - w.numpy()).max() / max(1.0, float(w.abs().max()))) for g, w in zip(got, want))

    def eager():
        with torch.no_grad():
            module(*inputs)

    def compiled_torch():
        with torch.no_grad():
            inductor(*inputs)

    systems = {"tilegraph": lambda: compiled(*np_inputs), "eager": eager, "inductor": compiled_torch}
    times = measure(systems, rounds)
    peaks = {k: peak_kib(fn) for k, fn in systems.items()}
    outputs = sum(v.type.nbytes for v in compiled.generated.outputs)
    return {"name": name, "threads": torch.get_num_threads(), "times": times, "peaks": peaks, "error": error,
            "kernels": len(compiled.program.kernels),
            "arena": compiled.generated.arena.size, "working": compiled.generated.arena.size + outputs,
            "build": build_s, "inductor_build": inductor_s}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}" if seconds < 0.01 else f"{seconds * 1e3:.2f}"


def _mib(kib: int) -> str:
    return "n/a" if kib < 0 else f"{kib / 1024:.1f}"


def write_table(rows: list[dict], path: Path, command: str) -> None:
    import platform

    build_times = ", ".join(f"{r['name']} tg {r['build']:.1f} / inductor {r['inductor_build']:.1f}" for r in rows
                            if r["threads"] == rows[0]["threads"])
    lines = [
        "# tilegraph-cpp vs torch eager vs torch.compile (Inductor), CPU",
        "",
        f"Command: `{command}`. Machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"threads per row as in the table (torch.set_num_threads, shared by torch and tilegraph), "
        f"{wait_policy()}.",
        "Median time per call, all three interleaved in one process; ratio = tilegraph time / other time "
        "(below 1: tilegraph faster). RSS growth = resident-set high-water during one warm call above the "
        "resident set before it (MiB; 0 when the allocator reuses freed blocks, as all three do here). "
        "tg working = tilegraph's arena + outputs (KiB), the most it holds during a call beyond inputs and "
        "weights. err = max abs error of tilegraph vs eager relative to the output magnitude. "
        f"Build times (s): {build_times}.",
        "",
        "| model | threads | tilegraph ms | eager ms | inductor ms | vs eager | vs inductor | "
        "RSS growth MiB tg / eager / ind | tg working KiB | kernels | err |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        t, p = r["times"], r["peaks"]
        lines.append(
            f"| {r['name']} | {r['threads']} | {_ms(t['tilegraph'])} | {_ms(t['eager'])} | {_ms(t['inductor'])} | "
            f"{t['tilegraph'] / t['eager']:.2f} | {t['tilegraph'] / t['inductor']:.2f} | "
            f"{_mib(p['tilegraph'])} / {_mib(p['eager'])} / {_mib(p['inductor'])} | {r['working'] / 1024:.0f} | "
            f"{r['kernels']} | {r['error']:.1e} |")
    lines.append("")
    for threads in sorted({r["threads"] for r in rows}):
        at = [r for r in rows if r["threads"] == threads]
        geo = lambda key: math.exp(statistics.mean(math.log(r["times"]["tilegraph"] / r["times"][key])  # noqa: E731
                                                   for r in at))
        slower = [r["name"] for r in at if r["times"]["tilegraph"] > r["times"]["inductor"]]
        lines.append(f"{threads} thread{'s' if threads > 1 else ''}: geometric mean ratio {geo('eager'):.2f} vs eager, "
                     f"{geo('inductor'):.2f} vs inductor; rows slower than inductor: {', '.join(slower) or 'none'}.")
    lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, no GPT-2")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--models", default=None,
                        help="comma-separated words; only rows whose name contains one (case-insensitive)")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    args = parser.parse_args()
    rounds = args.rounds or (5 if args.quick else 30)
    words = [w.strip().lower() for w in args.models.split(",")] if args.models else None
    wanted = lambda name: words is None or any(w in name.lower() for w in words)  # noqa: E731
    counts = [int(n) for n in args.threads.split(",")]
    rows = []
    for threads in counts:
        torch.set_num_threads(threads)
        torch.manual_seed(0)
        for name, module, inputs, graph, params in dsl_rows(wanted):
            rows.append(bench_row(name, module, inputs, graph, params, rounds))
            print(f"{name} at {threads} threads: done", file=sys.stderr)
        for name, module, inputs, graph in torch_rows(args.quick, wanted):
            rows.append(bench_row(name, module, inputs, graph, None, rounds))
            print(f"{name} at {threads} threads: done", file=sys.stderr)
    command = " ".join(["python benchmarks/cpu.py", *sys.argv[1:]])
    write_table(rows, args.out, command)


if __name__ == "__main__":
    main()
