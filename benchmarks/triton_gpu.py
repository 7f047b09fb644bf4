"""tilegraph's Triton backend against torch eager and torch.compile (Inductor) on one CUDA GPU.

    python benchmarks/triton_gpu.py            # writes benchmarks/results/triton_gpu.md
    python benchmarks/triton_gpu.py --quick    # smaller sizes, a smoke run
    python benchmarks/triton_gpu.py --dry-run  # no GPU: tiny sizes through the Triton interpreter on the CPU,
                                        # checks this script end to end; prints, writes nothing

Cases (the issue's list): fused softmax and layer norm (M=4096, N from 512 to 16K), a GELU-MLP
epilogue (gelu(x @ w + b)), attention, and matmul 4096^3 in fp16 and bf16; then whole torch models in
f32 through the fx frontend (a ResNet-18 basic block, a transformer encoder layer, an MLP), with
TF32 off in torch so that both sides multiply in IEEE f32 as tilegraph's f32 tl.dot does. Every case runs the three
implementations side by side in one process on the same tensors, checks tilegraph's result against
eager, and reports times and ratios. Memory-bound cases are also given as a fraction of the measured
device-to-device copy bandwidth; matmul-like cases as a fraction of cuBLAS (torch.matmul).

With no CUDA device it prints why and exits without writing anything.
"""
from __future__ import annotations

import argparse
import datetime
import math
import sys
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "triton_gpu.md"
DEVICE = "cuda"


@dataclass
class Row:
    case: str
    shape: str
    dtype: str
    tilegraph_ms: float
    eager_ms: float
    compiled_ms: float | None
    bytes_moved: int | None = None  # memory-bound cases
    flops: int | None = None  # compute-bound cases
    cublas_ms: float | None = None
    max_error: float = 0.0
    note: str = ""


DRY_RUN = False


def bench(fn) -> float:
    """Median milliseconds of fn() on the current device (triton's do_bench: flushes L2, syncs)."""
    if DRY_RUN:  # the interpreter on the CPU: one timed call, the numbers mean nothing
        import time

        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100))


def copy_bandwidth(torch) -> float:
    """Bytes per second of a device-to-device copy of 1 GiB (read + write counted)."""
    x = torch.empty(1 << (16 if DRY_RUN else 28), dtype=torch.float32, device=DEVICE)
    y = torch.empty_like(x)
    ms = bench(lambda: y.copy_(x))
    return 2 * x.numel() * x.element_size() / (ms * 1e-3)


def compiled(torch, fn):
    """torch.compile(fn), or None when Inductor is unavailable here (or in a dry run)."""
    if DRY_RUN:
        return None
    try:
        return torch.compile(fn)
    except Exception:
        return None


def tilegraph_fn(source):
    """The Triton build of a DSL source text, or of a Graph (a traced torch model)."""
    import tilegraph
    from tilegraph.frontends.dsl import parse

    return tilegraph.compile(parse(source) if isinstance(source, str) else source, target="triton")


def run_case(torch, case: str, shape: str, dtype: str, source, inputs, eager, *, bytes_moved=None, flops=None,
             cublas=None, note="") -> Row:
    fn = tilegraph_fn(source)
    ours = lambda: fn.run_torch(*inputs)  # noqa: E731
    want = eager(*inputs)
    got = ours()[0]
    error = float((got.float() - want.float()).abs().max())
    comp = compiled(torch, eager)
    comp_ms = None
    if comp is not None:
        try:
            comp(*inputs)
            comp_ms = bench(lambda: comp(*inputs))
        except Exception as exc:  # Inductor failing is a result, not a crash of the benchmark
            note = (note + f" torch.compile failed: {type(exc).__name__}").strip()
    return Row(case, shape, dtype, bench(ours), bench(lambda: eager(*inputs)), comp_ms, bytes_moved, flops,
               bench(cublas) if cublas else None, error, note)


def cases(torch, quick: bool):
    import torch.nn.functional as F

    M = 1024 if quick else 4096
    widths = [512, 2048] if quick else [512, 2048, 8192, 16384]
    if DRY_RUN:
        M, widths = 24, [40]
    dev = DEVICE
    for N in widths:
        x = torch.randn(M, N, device=dev, dtype=torch.float16)
        src = f"def f(x: f16[{M}, {N}]) -> f16[{M}, {N}] {{ return softmax(x) }}"
        yield dict(case="softmax", shape=f"{M}x{N}", dtype="f16", source=src, inputs=[x],
                   eager=lambda x: torch.softmax(x, dim=-1), bytes_moved=2 * x.numel() * 2)
    for N in widths:
        x = torch.randn(M, N, device=dev, dtype=torch.float16)
        s = torch.randn(N, device=dev, dtype=torch.float16)
        t = torch.randn(N, device=dev, dtype=torch.float16)
        src = (f"def f(x: f16[{M}, {N}], s: f16[{N}], t: f16[{N}]) -> f16[{M}, {N}] "
               f"{{ return layer_norm(x, s, t, eps=1e-5) }}")
        yield dict(case="layer_norm", shape=f"{M}x{N}", dtype="f16", source=src, inputs=[x, s, t],
                   eager=lambda x, s, t: F.layer_norm(x, (x.shape[-1],), s, t, 1e-5), bytes_moved=2 * x.numel() * 2)
    K, N = (512, 1024) if quick else (1024, 4096)
    K, N = (32, 48) if DRY_RUN else (K, N)
    x = torch.randn(M, K, device=dev, dtype=torch.float16) / math.sqrt(K)
    w = torch.randn(K, N, device=dev, dtype=torch.float16)
    b = torch.randn(N, device=dev, dtype=torch.float16)
    src = (f"def f(x: f16[{M}, {K}], w: f16[{K}, {N}], b: f16[{N}]) -> f16[{M}, {N}] "
           f"{{ return gelu(x @ w + b) }}")
    yield dict(case="gelu_mlp_epilogue", shape=f"{M}x{K}x{N}", dtype="f16", source=src, inputs=[x, w, b],
               eager=lambda x, w, b: F.gelu(x @ w + b), flops=2 * M * K * N, cublas=lambda: x @ w)
    B, L, D = (8, 512, 64) if quick else (32, 2048, 64)
    B, L, D = (2, 40, 16) if DRY_RUN else (B, L, D)
    q, k, v = (torch.randn(B, L, D, device=dev, dtype=torch.float16) for _ in range(3))
    src = (f"def f(q: f16[{B}, {L}, {D}], k: f16[{B}, {L}, {D}], v: f16[{B}, {L}, {D}]) -> f16[{B}, {L}, {D}] "
           f"{{ return attention(q, k, v) }}")
    yield dict(case="attention", shape=f"{B}x{L}x{D}", dtype="f16", source=src, inputs=[q, k, v],
               eager=lambda q, k, v: F.scaled_dot_product_attention(q, k, v), flops=4 * B * L * L * D,
               note="eager = F.scaled_dot_product_attention")
    S = 48 if DRY_RUN else 1024 if quick else 4096
    for name, dt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        a = torch.randn(S, S, device=dev, dtype=dt) / math.sqrt(S)
        c = torch.randn(S, S, device=dev, dtype=dt)
        src = f"def f(a: {name}[{S}, {S}], c: {name}[{S}, {S}]) -> {name}[{S}, {S}] {{ return a @ c }}"
        yield dict(case="matmul", shape=f"{S}^3", dtype=name, source=src, inputs=[a, c],
                   eager=lambda a, c: a @ c, flops=2 * S ** 3, cublas=lambda a=a, c=c: a @ c)
    yield from model_cases(torch, quick)


def model_cases(torch, quick: bool):
    """Whole f32 models traced with the fx frontend; eager and torch.compile run the same module."""
    from torch_models import BasicBlock

    from tilegraph.frontends.fx import from_module

    batch = 1 if DRY_RUN else 8 if quick else 32
    c, hw = (8, 8) if DRY_RUN else (64, 56)
    d, tokens = (32, 16) if DRY_RUN else (256, 128)
    mlp_in, mlp_hidden = (64, 32) if DRY_RUN else (784, 512)
    layer = torch.nn.TransformerEncoderLayer(d_model=d, nhead=4, dim_feedforward=4 * d, dropout=0.0,
                                             activation="gelu", batch_first=True)
    mlp = torch.nn.Sequential(torch.nn.Linear(mlp_in, mlp_hidden), torch.nn.ReLU(),
                              torch.nn.Linear(mlp_hidden, mlp_hidden), torch.nn.ReLU(), torch.nn.Linear(mlp_hidden, 10))
    models = [("resnet18_basic_block", f"{batch}x{c}x{hw}x{hw}", BasicBlock(c), (batch, c, hw, hw),
               2 * 2 * batch * c * c * 9 * hw * hw),
              ("transformer_encoder_layer", f"{batch}x{tokens}x{d}", layer, (batch, tokens, d),
               batch * tokens * (2 * 4 * d * d + 2 * 2 * tokens * d + 2 * 2 * 4 * d * d)),
              ("mlp", f"{8 * batch}x{mlp_in}", mlp, (8 * batch, mlp_in),
               2 * 8 * batch * (mlp_in * mlp_hidden + mlp_hidden * mlp_hidden + mlp_hidden * 10))]
    for name, shape, module, input_shape, flops in models:
        module.eval()
        for m in module.modules():  # non-trivial inference-mode batch norms
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        example = torch.randn(*input_shape)
        graph = from_module(module, (example,))
        module = module.to(DEVICE)

        def eager(x, module=module):
            with torch.no_grad():
                return module(x)

        yield dict(case=name, shape=shape, dtype="f32", source=graph, inputs=[example.to(DEVICE)], eager=eager,
                   flops=flops, note="torch model via the fx frontend")


def table(rows: list[Row], bandwidth: float, device: str) -> str:
    out = [f"# tilegraph Triton backend vs torch on {device}", "",
           f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by `python benchmarks/triton_gpu.py`. "
           f"Copy bandwidth measured: {bandwidth / 1e9:.0f} GB/s. Times in ms (triton.testing.do_bench). "
           "Ratios > 1 mean tilegraph is faster. `of roofline`: memory-bound cases as a fraction of the copy "
           "bandwidth, matmul-like cases as a fraction of cuBLAS (torch.matmul).", "",
           "| case | shape | dtype | tilegraph ms | eager ms | compile ms | eager/tg | compile/tg | of roofline "
           "| max abs err | note |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        comp = f"{r.compiled_ms:.3f}" if r.compiled_ms is not None else "n/a"
        comp_ratio = f"{r.compiled_ms / r.tilegraph_ms:.2f}" if r.compiled_ms is not None else "n/a"
        if r.bytes_moved:
            roof = f"{r.bytes_moved / (r.tilegraph_ms * 1e-3) / bandwidth:.0%} BW"
        elif r.cublas_ms:
            roof = f"{r.cublas_ms / r.tilegraph_ms:.0%} cuBLAS"
        elif r.flops:
            roof = f"{r.flops / (r.tilegraph_ms * 1e-3) / 1e12:.0f} TFLOP/s"
        else:
            roof = ""
        out.append(f"| {r.case} | {r.shape} | {r.dtype} | {r.tilegraph_ms:.3f} | {r.eager_ms:.3f} | {comp} | "
                   f"{r.eager_ms / r.tilegraph_ms:.2f} | {comp_ratio} | {roof} | {r.max_error:.2e} | {r.note} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument("--dry-run", action="store_true",
                        help="no GPU needed: tiny sizes in the Triton interpreter on the CPU; writes nothing")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"Markdown table to write (default {RESULTS})")
    args = parser.parse_args(argv)
    global DRY_RUN, DEVICE
    import os

    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
        DRY_RUN, DEVICE = True, "cpu"
    try:
        import torch
        import triton  # noqa: F401
    except ImportError as exc:
        print(f"benchmarks/triton_gpu.py: needs torch and triton ({exc}); nothing written.", file=sys.stderr)
        return 2
    if not torch.cuda.is_available() and not DRY_RUN:
        print("benchmarks/triton_gpu.py: no CUDA device here; this benchmark only runs on a GPU (or try --dry-run "
              "to check the script through the Triton interpreter). Nothing written.", file=sys.stderr)
        return 2
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") and not DRY_RUN:
        print("benchmarks/triton_gpu.py: TRITON_INTERPRET is set; unset it to time real kernels. Nothing written.",
              file=sys.stderr)
        return 2
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False  # f32 rows: IEEE products on both sides
    torch.backends.cudnn.allow_tf32 = False
    device = "CPU (Triton interpreter, dry run: times are meaningless)" if DRY_RUN else torch.cuda.get_device_name()
    bandwidth = copy_bandwidth(torch)
    rows = []
    for spec in cases(torch, args.quick):
        label = f"{spec['case']} {spec['shape']} {spec['dtype']}"
        try:
            row = run_case(torch, **spec)
        except Exception as exc:
            print(f"{label}: FAILED {type(exc).__name__}: {exc}", file=sys.stderr)
            rows.append(Row(spec["case"], spec["shape"], spec["dtype"], math.nan, math.nan, None,
                            note=f"failed: {type(exc).__name__}"))
            continue
        rows.append(row)
        print(f"{label}: tilegraph {row.tilegraph_ms:.3f} ms, eager {row.eager_ms:.3f} ms, compile "
              f"{row.compiled_ms if row.compiled_ms is not None else 'n/a'} ms, err {row.max_error:.1e}", flush=True)
    text = table(rows, bandwidth, device)
    if DRY_RUN:
        print(text)
        failed = [r for r in rows if r.note.startswith("failed")]
        print(f"dry run: {len(rows) - len(failed)}/{len(rows)} cases ran; nothing written")
        return 1 if failed else 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
