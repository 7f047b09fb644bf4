"""tilegraph's Triton backend against torch eager and torch.compile (Inductor) on one CUDA GPU.

    python benchmarks/triton_gpu.py            # every row, writes benchmarks/results/triton_gpu.md
    python benchmarks/triton_gpu.py --quick    # the rows that matter in under 5 minutes on an H100, compiles included
    python benchmarks/triton_gpu.py --dry-run  # no GPU: tiny sizes through the Triton interpreter on the CPU,
                                               # checks this script end to end; prints, writes nothing

Single kernels: fused softmax and layer norm (M=4096, N from 512 to 16K), a GELU-MLP epilogue
(gelu(x @ w + b)), attention on 4-D (B, H, L, D) tensors against F.scaled_dot_product_attention with
SDPA's own backend choice (flash for these shapes; `of roofline` is the fraction of SDPA forced onto its
flash kernel), and matmul 4096^3 in fp16 and bf16 (against cuBLAS). Whole models (note "model"), through
the fx frontend: a ResNet-18 basic block, ResNet-50, MobileNetV2, BERT-base, GPT-2 small, a Llama-style
decoder block and ViT-base (`torch_models.WHOLE_MODELS`: transformers configs, random weights kept O(1)),
at batch 1 and 32, in f32 and bf16. f32 rows allow TF32 on both sides: torch's flags are set, and
tilegraph's Triton build follows them. Every row runs the three implementations in one process on the
same tensors, checks tilegraph's result against eager (whole models: each side's drift from the same
weights in IEEE f32, since a random ResNet-50 amplifies rounding), and reports times, ratios (compile/tg > 1:
tilegraph is faster than torch.compile) and the first call's time of each compiler (cold: build, JIT
and autotuning). A whole model's tilegraph time replays its launches through a CUDA graph, as
torch.compile(backend="tilegraph") does by default; the table also gives its launches one by one and
torch.compile's mode="reduce-overhead" (CUDA graphs) beside its default mode. Memory-bound rows are also
given as a fraction of the measured device-to-device copy bandwidth; matmul-like rows as a fraction of cuBLAS
(torch.matmul). The tuner may hand a kernel that is one matmul (with an add and a short epilogue) to cuBLAS
(`backends/triton/library.py`), or a kernel that starts with one convolution to cuDNN, its other ops generated
(`library_conv.py`), where that is faster, as torch.compile's default mode does for every matmul and
convolution; the note says how many kernels ran so. The matmul rows leave that out, so that they measure the
generated kernel. `--both-layouts`: a model with convolutions is also built with its activations in the other
layout (NCHW, unless TILEGRAPH_CHANNELS_LAST=0 made that the first), checked against the first build and timed, in
the note: one run compares the layouts against the same torch.compile.

--quick: one size per single-kernel case (bf16 matmul only), the transformers models with 2 of their layers
at full width (per-call ratios hold, compiles are shorter; the note says so), batch 1 only for the small
models, whole models in the order bf16 batch 32, f32 batch 32, then batch 1, and a time budget
(`--budget`, 210 s by default there) after which the remaining rows are listed as skipped. The table is
written after every row, and a row that fails gets its error in the note while the run goes on.
tilegraph tunes each program on its first call for at most TILEGRAPH_TUNE_SECONDS (10 s with --quick,
120 s otherwise, unless set); winners are cached, so a second run starts faster.

With no CUDA device it prints why and exits without writing anything.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import gc
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

RESULTS = Path(__file__).resolve().parent / "results" / "triton_gpu.md"
DEVICE = "cuda"
BOTH_LAYOUTS = False  # --both-layouts
QUICK_BUDGET_S = 210.0  # no row starts after this; the last one may take a minute or more (ResNet-50, MobileNetV2)
# a quick run's model order: most kernels compiled per second of budget first, the many-kernel CNNs last
QUICK_ORDER = ("resnet18_basic_block", "llama_decoder_block", "bert_base", "gpt2_small", "vit_base", "resnet50",
               "mobilenetv2")
QUICK_LAYERS = 2  # transformers layers kept in a quick run
QUICK_TUNE_S, FULL_TUNE_S = 10, 120  # TILEGRAPH_TUNE_SECONDS unless set
SWITCHES = ("TILEGRAPH_CHANNELS_LAST", "TILEGRAPH_TUNE_TIMER", "TILEGRAPH_LIBRARY_CALLS")


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
    cublas_ms: float | None = None  # the roofline's own time (cuBLAS, or SDPA's flash kernel)
    roof_name: str = "cuBLAS"
    max_error: float = 0.0
    note: str = ""
    tilegraph_first_s: float | None = None  # build + first call (JIT compiles, autotuning)
    compiled_first_s: float | None = None  # torch.compile's first call (Inductor's compile)
    launched_ms: float | None = None  # whole models: the launches one by one (tilegraph_ms replays a CUDA graph)
    compiled_ro_ms: float | None = None  # whole models: torch.compile(mode="reduce-overhead"), CUDA graphs too


@dataclass
class Spec:
    """A row to run: `make()` builds its data and returns run_case's keyword arguments (built lazily, so a
    failure to build is that row's error, not the run's)."""

    case: str
    shape: str
    dtype: str
    make: Callable[[], dict]
    note: str = ""
    library_calls: bool = True  # False: the tuner leaves library calls out (TILEGRAPH_LIBRARY_CALLS=0)


DRY_RUN = False


def bench(fn) -> float:
    """Median milliseconds of fn() on the current device (triton's do_bench: flushes L2, syncs)."""
    if DRY_RUN:  # the interpreter on the CPU: one timed call, the numbers mean nothing
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100))


def synchronize(torch) -> None:
    if not DRY_RUN:
        torch.cuda.synchronize()


def copy_bandwidth(torch) -> float:
    """Bytes per second of a device-to-device copy of 1 GiB (read + write counted)."""
    x = torch.empty(1 << (16 if DRY_RUN else 28), dtype=torch.float32, device=DEVICE)
    y = torch.empty_like(x)
    ms = bench(lambda: y.copy_(x))
    return 2 * x.numel() * x.element_size() / (ms * 1e-3)


def compiled(torch, fn, mode: str | None = None):
    """torch.compile(fn) (default mode unless `mode`), or None in a dry run."""
    if DRY_RUN:
        return None
    return torch.compile(fn, mode=mode)


def graphed(fn, inputs):
    """fn's launches replayed through a CUDA graph (captured on the second call) where that timed faster than
    launching them, as torch.compile(backend="tilegraph") runs them by default (`replays`: whether it does);
    None in a dry run (no CUDA)."""
    if DRY_RUN:
        return None
    from tilegraph.backends.triton.launch import GraphedLauncher

    launcher = fn.launcher()
    replay, inputs = GraphedLauncher(launcher), launcher.check(inputs)
    replay(*inputs)
    replay(*inputs)  # the capture, and the timing that keeps the replay or drops it
    run = lambda: replay(*inputs)  # noqa: E731
    run.replays = replay.replay
    return run


def tilegraph_fn(source, channels_last: bool | None = None):
    """The Triton build of a DSL source text, or of a Graph (a traced torch model); `channels_last`: the layout
    pass's option (None: the default pipeline's, $TILEGRAPH_CHANNELS_LAST)."""
    import tilegraph
    from tilegraph.backends.base import get_backend
    from tilegraph.driver import default_pipeline
    from tilegraph.frontends.dsl import parse

    pipeline = default_pipeline(get_backend("triton").tile_target, channels_last)
    return tilegraph.compile(parse(source) if isinstance(source, str) else source, target="triton",
                             pipeline=pipeline)


def other_layout(fn, source, inputs, got, tg_ms: float, comp_ms: float | None, tolerance: float) -> str:
    """The model built with its activations in the other layout (the layout pass's `channels_last`), tuned,
    checked against the first build's result `got` and timed as the row's tilegraph column is: for the note."""
    layout = not fn.program.layouts
    name = "channels-last" if layout else "NCHW"
    try:
        other = tilegraph_fn(source, channels_last=layout)
        run = lambda: other.run_torch(*inputs)  # noqa: E731
        apart = float((run()[0].float() - got.float()).abs().max())
        replay = graphed(other, inputs)
        ms = bench(replay if replay is not None else run)
    except Exception as exc:  # the other layout failing is its note, not the row's
        return f"{name} failed: {short_error(exc)}"
    versus = f", compile/tg {comp_ms / ms:.2f}" if comp_ms else ""
    mismatch = f", MISMATCH {apart:.2e} from the first build" if not apart <= tolerance else ""
    return f"{name} {ms:.3f} ms ({tg_ms / ms:.2f}x the first build's speed{versus}{mismatch})"


def kernel_profile(torch, call, top: int = 10) -> tuple[float, str]:
    """Where one call's device time goes (torch profiler, launches one by one): the kernels' total ms, and for
    the log the `top` kernels, so that a slow row says which kernels (ours, or cuBLAS's for a library call) to
    look at."""
    from torch.profiler import ProfilerActivity, profile

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    events = sorted(prof.key_averages(), key=lambda e: -e.device_time_total)
    total = sum(e.device_time_total for e in events)
    lines = [f"  profile: {total / 1e3:.3f} ms of device time in {sum(e.count for e in events)} kernels"]
    lines += [f"    {e.device_time_total / 1e3:7.3f} ms {100 * e.device_time_total / max(total, 1e-9):5.1f}% "
              f"x{e.count:<3} {e.key[:110]}" for e in events[:top]]
    return total / 1e3, "\n".join(lines)


def compiled_kernels(torch, call) -> str:
    """The note's part for torch.compile's device time per call (its top kernels printed for the log)."""
    try:
        total, profile_log = kernel_profile(torch, call)
    except Exception as exc:  # noqa: BLE001 (the row keeps its times)
        return f"compile's profile failed: {short_error(exc)}"
    print(f"torch.compile's{profile_log}", flush=True)
    return f"compile's kernels {total:.3f} ms"


def short_error(exc: BaseException, limit: int = 160) -> str:
    """One line for the table's note: the exception's type and first line, without table separators."""
    text = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {text[0] if text else ''}".replace("|", "/")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def library_note(fn) -> str:
    """How many dot kernels the tuner handed to the vendor's libraries (`backends/triton/library.py`: cuBLAS,
    `library_conv.py`: cuDNN), for the note."""
    from tilegraph.backends.triton.library import MatmulCall
    from tilegraph.backends.triton.library_conv import ConvCall
    from tilegraph.backends.triton.tuner import installed

    dots = [s for s in fn.generated.kernels if s is not None and s.uses_dot]
    chosen = [installed(fn, s)[0] for s in dots]
    counts = [(sum(isinstance(c, kind) for c in chosen), name) for kind, name in ((MatmulCall, "cuBLAS"),
                                                                                   (ConvCall, "cuDNN"))]
    calls = " and ".join(f"{n} {name}" for n, name in counts if n)
    return f"{calls} calls for {len(dots)} dot kernels" if calls else ""


def tuning_log(fn) -> str:
    """What the first call's tuning timed and chose, per kernel function (the log's evidence when a row is slow):
    the block-size variants' ms, the launch configurations' ms, the winner, and whether calls launch directly."""
    lines = []
    for position, times in sorted(fn.timings.items()):
        tiles = ", ".join(f"{label}: {ms:.3f}" for label, ms in times.get("tiles", {}).items())
        configs = ", ".join(f"{w}w{s}s: {ms:.3f}" for (w, s), ms in times.get("config", {}).items())
        function = fn.generated.kernels[position].function  # (the profile's name, less a variant's suffix)
        lines.append(f"  {function} -> {fn.configs[position]}; tiles [{tiles}]; configs [{configs}]")
    launcher = fn.launcher()
    lines.append(f"  direct launch: {type(launcher.direct).__name__} {launcher.direct_error or ''}".rstrip())
    return "\n".join(lines)


def run_case(torch, case: str, shape: str, dtype: str, source, inputs, eager, *, bytes_moved=None, flops=None,
             cublas=None, roof_name="cuBLAS", note="", tolerance=None, exact=None, model=False) -> Row:
    """Time one case: tilegraph, eager, torch.compile. A whole `model` replays tilegraph's launches through a
    CUDA graph (its launches one by one are timed too) and also times torch.compile's reduce-overhead mode."""
    start = time.perf_counter()
    fn = tilegraph_fn(source)
    ours = lambda: fn.run_torch(*inputs)  # noqa: E731
    got = ours()[0]
    synchronize(torch)
    tg_first = time.perf_counter() - start
    if not DRY_RUN:
        print(f"{case} {shape} {dtype}: tuning\n{tuning_log(fn)}", flush=True)
    note = "; ".join(part for part in (note, library_note(fn)) if part)
    if flops is None and source is not None and not isinstance(source, str):
        flops = sum(k.flops for k in fn.program.kernels) or None  # whole models: the Program's own count
    with torch.no_grad():
        want = eager(*inputs)
    error = float((got.float() - want.float()).abs().max())
    scale = max(float(want.float().abs().max()), 1.0)
    if exact is not None:  # both sides drift from the IEEE f32 result; tilegraph may drift twice as far as eager
        truth = exact(*inputs).float()
        drift, ours_drift = (float((x.float() - truth).abs().max()) for x in (want, got))
        if not ours_drift <= 2 * drift + (tolerance or 0) * scale:
            note = (note + f"; MISMATCH: {ours_drift:.2e} from IEEE f32, eager {drift:.2e}").strip("; ")
    elif tolerance is not None and not error <= tolerance * scale:
        note = (note + f"; MISMATCH: error {error:.2e} over {tolerance:g} x scale {scale:.2g}").strip("; ")
    comp_ms, comp_first, ro_ms = None, None, None
    for mode in (None, "reduce-overhead") if model else (None,):
        comp = compiled(torch, eager, mode)
        if comp is None:
            continue
        try:
            start = time.perf_counter()
            comp(*inputs)
            synchronize(torch)
            if mode is None:
                comp_first, comp_ms = time.perf_counter() - start, bench(lambda: comp(*inputs))
                if model and not DRY_RUN:  # its device time beside ours: a row lost on kernels or on launches
                    note = f"{note}; {compiled_kernels(torch, lambda: comp(*inputs))}"
            else:
                comp(*inputs)  # reduce-overhead records its CUDA graph on a later call
                ro_ms = bench(lambda: comp(*inputs))
        except Exception as exc:  # Inductor failing is a result, not a crash of the benchmark
            note = (note + f"; torch.compile({mode or ''}) failed: {short_error(exc)}").strip("; ")
    replay = None
    if model and not DRY_RUN:  # a failure here costs the row its extra columns, not its times
        try:  # the kernels' own time: how far a row is from host-bound
            kernels_ms, profile_log = kernel_profile(torch, ours)
            print(profile_log, flush=True)
            note = f"{note}; kernels {kernels_ms:.3f} ms"
        except Exception as exc:
            note = f"{note}; profile failed: {short_error(exc)}"
        try:
            replay = graphed(fn, inputs)
            apart = float((replay()[0].float() - got.float()).abs().max())
            if not apart <= (tolerance or 0) * scale:
                note = f"{note}; MISMATCH: the CUDA graph's replay is {apart:.2e} from the launches"
            if not replay.replays:
                note = f"{note}; no replay (launches timed faster at the capture)"
        except Exception as exc:
            note = f"{note}; CUDA graph failed (launches one by one timed): {short_error(exc)}"
    launched_ms = bench(ours)
    tg_ms = bench(replay) if replay is not None else launched_ms
    if model and BOTH_LAYOUTS and any(n.op == "conv2d" for n in fn.program.graph.nodes):
        release(torch)
        note = f"{note}; {other_layout(fn, source, inputs, got, tg_ms, comp_ms, (tolerance or 0) * scale)}"
    return Row(case, shape, dtype, tg_ms, bench(lambda: eager(*inputs)), comp_ms, bytes_moved, flops,
               bench(cublas) if cublas else None, roof_name, error, note, tg_first, comp_first,
               launched_ms if replay is not None else None, ro_ms)


# ----- single kernels ---------------------------------------------------------------------------------------
def kernel_specs(torch, quick: bool) -> list[Spec]:
    import torch.nn.functional as F

    M = 4096
    widths = [8192] if quick else [512, 2048, 8192, 16384]
    if DRY_RUN:
        M, widths = 24, [40]
    dev = DEVICE
    specs = []

    def softmax(N):
        x = torch.randn(M, N, device=dev, dtype=torch.float16)
        src = f"def f(x: f16[{M}, {N}]) -> f16[{M}, {N}] {{ return softmax(x) }}"
        return dict(source=src, inputs=[x], eager=lambda x: torch.softmax(x, dim=-1), bytes_moved=2 * x.numel() * 2)

    def layer_norm(N):
        x = torch.randn(M, N, device=dev, dtype=torch.float16)
        s, t = (torch.randn(N, device=dev, dtype=torch.float16) for _ in range(2))
        src = (f"def f(x: f16[{M}, {N}], s: f16[{N}], t: f16[{N}]) -> f16[{M}, {N}] "
               f"{{ return layer_norm(x, s, t, eps=1e-5) }}")
        return dict(source=src, inputs=[x, s, t], eager=lambda x, s, t: F.layer_norm(x, (x.shape[-1],), s, t, 1e-5),
                    bytes_moved=2 * x.numel() * 2)

    for N in widths:
        specs.append(Spec("softmax", f"{M}x{N}", "f16", lambda N=N: softmax(N)))
    for N in widths:
        specs.append(Spec("layer_norm", f"{M}x{N}", "f16", lambda N=N: layer_norm(N)))

    K, N = (32, 48) if DRY_RUN else (1024, 4096)

    def mlp():
        x = torch.randn(M, K, device=dev, dtype=torch.float16) / math.sqrt(K)
        w = torch.randn(K, N, device=dev, dtype=torch.float16)
        b = torch.randn(N, device=dev, dtype=torch.float16)
        src = (f"def f(x: f16[{M}, {K}], w: f16[{K}, {N}], b: f16[{N}]) -> f16[{M}, {N}] "
               f"{{ return gelu(x @ w + b) }}")
        return dict(source=src, inputs=[x, w, b], eager=lambda x, w, b: F.gelu(x @ w + b), flops=2 * M * K * N,
                    cublas=lambda: x @ w)

    specs.append(Spec("gelu_mlp_epilogue", f"{M}x{K}x{N}", "f16", mlp))
    shapes = [(4, 16, 2048, 64, False)] if quick else [(4, 16, 2048, 64, False), (8, 16, 4096, 64, False),
                                                        (8, 16, 4096, 128, True)]
    if DRY_RUN:
        shapes = [(1, 2, 40, 16, False), (1, 2, 40, 16, True)]
    for B, H, L, D, causal in shapes:
        specs.append(Spec("attention", f"{B}x{H}x{L}x{D}", "f16", lambda B=B, H=H, L=L, D=D, c=causal:
                          attention(torch, B, H, L, D, c),
                          note=("causal; " if causal else "") + "eager = F.scaled_dot_product_attention "
                          "(4-D, its own backend choice)"))
    S = 48 if DRY_RUN else 4096
    for name in ("bf16",) if quick and not DRY_RUN else ("f16", "bf16"):
        def matmul(name=name):
            dt = getattr(torch, {"f16": "float16", "bf16": "bfloat16"}[name])
            a = torch.randn(S, S, device=dev, dtype=dt) / math.sqrt(S)
            c = torch.randn(S, S, device=dev, dtype=dt)
            src = f"def f(a: {name}[{S}, {S}], c: {name}[{S}, {S}]) -> {name}[{S}, {S}] {{ return a @ c }}"
            return dict(source=src, inputs=[a, c], eager=lambda a, c: a @ c, flops=2 * S ** 3,
                        cublas=lambda: a @ c)
        specs.append(Spec("matmul", f"{S}^3", name, matmul, note="the generated kernel (no library call)",
                          library_calls=False))
    return specs


def attention(torch, B: int, H: int, L: int, D: int, causal: bool) -> dict:
    """Attention on (B, H, L, D): SDPA picks its backend; the roofline is SDPA held to its flash kernel."""
    import torch.nn.functional as F

    q, k, v = (torch.randn(B, H, L, D, device=DEVICE, dtype=torch.float16) for _ in range(3))
    src = (f"def f(q: f16[{B}, {H}, {L}, {D}], k: f16[{B}, {H}, {L}, {D}], v: f16[{B}, {H}, {L}, {D}]) "
           f"-> f16[{B}, {H}, {L}, {D}] {{ return attention(q, k, v{', causal=true' if causal else ''}) }}")
    eager = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    flash = None
    if not DRY_RUN:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def flash():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return eager(q, k, v)
    flops = 4 * B * H * L * L * D // (2 if causal else 1)
    return dict(source=src, inputs=[q, k, v], eager=eager, flops=flops, cublas=flash, roof_name="flash")


# ----- whole models -----------------------------------------------------------------------------------------
def model_plan(quick: bool, every_batch: bool = False) -> list[tuple[object, int, str]]:
    """(model, batch, dtype) in the order they run: the most telling first, so a budget cuts the least. A quick
    plan runs batch 1 for the small models only, unless `every_batch` (batches named on the command line)."""
    from torch_models import WHOLE_MODELS

    if DRY_RUN:
        bf16 = ("resnet18_basic_block", "llama_decoder_block")  # the bf16 paths of a conv and a transformer
        return [(m, 1, "f32") for m in WHOLE_MODELS] + [(m, 2, "bf16") for m in WHOLE_MODELS if m.name in bf16]
    plan = []
    models = sorted(WHOLE_MODELS, key=lambda m: QUICK_ORDER.index(m.name)) if quick else WHOLE_MODELS
    for batch, dtype in ((32, "bf16"), (32, "f32"), (1, "bf16"), (1, "f32")):
        for model in models:
            if not quick or every_batch or batch == 32 or model.small:
                plan.append((model, batch, dtype))
    return plan


def model_specs(torch, quick: bool, every_batch: bool = False) -> list[Spec]:
    specs = []
    for model, batch, dtype in model_plan(quick, every_batch):
        layers = QUICK_LAYERS if quick and model.layered else None
        note = "model" + (f"; {layers} layers of the model's, full width" if layers else "")
        specs.append(Spec(model.name, f"batch {batch}", dtype,
                          lambda model=model, batch=batch, dtype=dtype, layers=layers:
                          model_case(torch, model, batch, dtype, layers), note=note))
    return specs


def model_case(torch, model, batch: int, dtype: str, layers: int | None) -> dict:
    """Trace the model (f32 or bf16, on the CPU) with the fx frontend; eager and torch.compile run the same
    module on the device."""
    from tilegraph.frontends.fx import from_module

    module, inputs = model.build_in(dtype, batch, DRY_RUN, layers)
    with torch.no_grad():
        graph = from_module(module, inputs)
    module = module.to(DEVICE)

    def eager(*xs, module=module):
        with torch.no_grad():
            return module(*xs)

    # The yardstick is the same weights in IEEE f32: a random 50-layer ResNet amplifies rounding about 700-fold
    # (its bf16 eager is 60% off it, TF32 tens of percent), so each side is held to its drift from that.
    wide = copy.deepcopy(module).float() if dtype == "bf16" else module

    def exact(*xs, module=wide):
        with torch.no_grad(), ieee_f32(torch):
            return module(*(x.float() if x.is_floating_point() else x for x in xs))

    return dict(source=graph, inputs=[x.to(DEVICE) for x in inputs], eager=eager,
                tolerance=5e-2 if dtype == "bf16" else 1e-2, exact=exact, model=True)


# ----- the table ----------------------------------------------------------------------------------------------
def table(rows: list[Row], bandwidth: float, device: str, command: str, pending: list[str]) -> str:
    out = [f"# tilegraph Triton backend vs torch on {device}", "",
           f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by `{command}`. "
           f"Copy bandwidth measured: {bandwidth / 1e9:.0f} GB/s. Times in ms (triton.testing.do_bench). "
           "Ratios > 1 mean tilegraph is faster. `of roofline`: memory-bound cases as a fraction of the copy "
           "bandwidth, matmul-like cases as a fraction of cuBLAS (torch.matmul), attention as a fraction of SDPA "
           "held to its flash kernel, whole models in TFLOP/s. f32 rows allow TF32 on both sides. `first s`: "
           "seconds to the first result (tilegraph: build, JIT compiles, autotuning; torch.compile: Inductor). "
           "Whole-model rows say \"model\" in the note, and how many of their dot kernels the tuner handed to "
           "cuBLAS or cuDNN where it timed that faster (`backends/triton/library.py`, `library_conv.py`). A "
           "whole model's `tilegraph ms` replays its launches through a CUDA graph where that timed faster at its "
           "capture (else the note says \"no replay\"), as "
           "`torch.compile(backend=\"tilegraph\")` does by default; `tg launched` times them one by one (torch.compile's default mode launches one by one "
           "too); `compile-ro`: torch.compile(mode=\"reduce-overhead\"), which replays CUDA graphs. The note's "
           "`kernels` is tilegraph's device time per call (torch profiler): the floor a replay approaches; "
           "`compile's kernels`, torch.compile's (default mode).", ""]
    models = [r for r in rows if r.note.startswith("model") and r.compiled_ms and r.tilegraph_ms == r.tilegraph_ms]
    for label, peer in (("compile", "compiled_ms"), ("compile-ro", "compiled_ro_ms")):
        timed = [r for r in models if getattr(r, peer)]
        if timed:
            ratios = [getattr(r, peer) / r.tilegraph_ms for r in timed]
            geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            out += [f"Whole models: geometric mean of {label}/tg {geo:.2f} over {len(timed)} rows, lowest "
                    f"{min(ratios):.2f} ({timed[ratios.index(min(ratios))].case}).", ""]
    out += ["| case | shape | dtype | tilegraph ms | tg launched ms | eager ms | compile ms | compile-ro ms "
            "| eager/tg | compile/tg | compile-ro/tg | of roofline | max abs err | tg / compile first s | note |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ran = r.tilegraph_ms == r.tilegraph_ms  # not NaN
        comp = f"{r.compiled_ms:.3f}" if r.compiled_ms is not None else "n/a"
        comp_ratio = f"{r.compiled_ms / r.tilegraph_ms:.2f}" if r.compiled_ms is not None and ran else "n/a"
        if not ran:
            roof = ""
        elif r.bytes_moved:
            roof = f"{r.bytes_moved / (r.tilegraph_ms * 1e-3) / bandwidth:.0%} BW"
        elif r.cublas_ms:
            roof = f"{r.cublas_ms / r.tilegraph_ms:.0%} {r.roof_name}"
        elif r.flops:
            roof = f"{r.flops / (r.tilegraph_ms * 1e-3) / 1e12:.0f} TFLOP/s"
        else:
            roof = ""
        first = "" if r.tilegraph_first_s is None else f"{r.tilegraph_first_s:.1f}"
        if r.compiled_first_s is not None:
            first += f" / {r.compiled_first_s:.1f}"
        eager_ratio = f"{r.eager_ms / r.tilegraph_ms:.2f}" if ran else "n/a"
        launched = f"{r.launched_ms:.3f}" if r.launched_ms is not None else ""
        ro, ro_ratio = (f"{r.compiled_ro_ms:.3f}", f"{r.compiled_ro_ms / r.tilegraph_ms:.2f}" if ran else "n/a") \
            if r.compiled_ro_ms is not None else ("", "")
        out.append(f"| {r.case} | {r.shape} | {r.dtype} | {r.tilegraph_ms:.3f} | {launched} | {r.eager_ms:.3f} "
                   f"| {comp} | {ro} | {eager_ratio} | {comp_ratio} | {ro_ratio} | {roof} | {r.max_error:.2e} "
                   f"| {first} | {r.note} |")
    if pending:
        out += ["", f"Not run (over the time budget): {', '.join(pending)}."]
    return "\n".join(out) + "\n"


def library_calls(on: bool):
    """TILEGRAPH_LIBRARY_CALLS=0 for the block unless `on` (the matmul rows measure the generated kernel)."""
    from tilegraph.backends.triton.library import SWITCH

    return mock.patch.dict(os.environ, {} if on else {SWITCH: "0"})


def release(torch) -> None:
    """Drop one row's compiled graphs and tensors before the next (each row compiles its own)."""
    gc.collect()
    if not DRY_RUN:
        torch._dynamo.reset()
        torch.cuda.empty_cache()


@contextlib.contextmanager
def ieee_f32(torch):
    """f32 matmuls and convolutions in IEEE f32 (TF32 off) inside, torch's flags restored after."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def configure_torch(torch) -> None:
    """TF32 allowed for f32 matmuls and convolutions (both sides follow these flags); Dynamo may compile every
    row (rows share forward functions: without a higher limit, later rows would silently run eager)."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    import torch._dynamo

    for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                 "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 1024)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the rows that matter, in under 5 minutes on an H100")
    parser.add_argument("--dry-run", action="store_true",
                        help="no GPU needed: tiny sizes in the Triton interpreter on the CPU; writes nothing")
    parser.add_argument("--budget", type=float, default=None,
                        help=f"seconds after which no new row starts (default: {QUICK_BUDGET_S:.0f} with --quick, "
                             "else none)")
    parser.add_argument("--only", default="", help="comma-separated case names to run (default: all)")
    parser.add_argument("--dtype", default="", help="comma-separated dtypes to run (f16, bf16, f32; default: all)")
    parser.add_argument("--batch", default="", help="comma-separated batch sizes of the model rows to run "
                        "(default: all, but --quick runs batch 1 for the small models only; batches named here run for "
                        "every model; the single-kernel rows are kept)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"Markdown table to write (default {RESULTS})")
    parser.add_argument("--both-layouts", action="store_true",
                        help="models with convolutions: also build them with activations in the other layout "
                             "(NCHW; channels-last is the default) and give its time in the note")
    args = parser.parse_args(argv)
    global DRY_RUN, DEVICE, BOTH_LAYOUTS
    BOTH_LAYOUTS = args.both_layouts

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
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # torch_models, zoo_models
    # tilegraph's first-run tuning per program (block sizes, warps, stages), as its first-call time shows
    os.environ.setdefault("TILEGRAPH_TUNE_SECONDS", str(QUICK_TUNE_S if args.quick else FULL_TUNE_S))
    started = time.perf_counter()
    budget = args.budget if args.budget is not None else (QUICK_BUDGET_S if args.quick else math.inf)
    torch.manual_seed(0)
    configure_torch(torch)
    device = "CPU (Triton interpreter, dry run: times are meaningless)" if DRY_RUN else torch.cuda.get_device_name()
    # the switches that change what tilegraph builds or how it tunes, as the command set them
    switches = "".join(f"{name}={os.environ[name]} " for name in SWITCHES if name in os.environ)
    command = switches + "python benchmarks/triton_gpu.py" + (" --quick" if args.quick else "") + \
        (" --both-layouts" if args.both_layouts else "") + "".join(
        f" --{name} {value}" for name, value in (("only", args.only), ("dtype", args.dtype), ("batch", args.batch))
        if value)
    bandwidth = copy_bandwidth(torch)
    specs = kernel_specs(torch, args.quick) + model_specs(torch, args.quick, every_batch=bool(args.batch))
    if args.only:
        wanted = set(args.only.split(","))
        specs = [s for s in specs if s.case in wanted]
    if args.dtype:
        specs = [s for s in specs if s.dtype in args.dtype.split(",")]
    if args.batch:
        batches = {f"batch {b}" for b in args.batch.split(",")}
        specs = [s for s in specs if not s.shape.startswith("batch ") or s.shape in batches]
    rows: list[Row] = []
    for position, spec in enumerate(specs):
        label = f"{spec.case} {spec.shape} {spec.dtype}"
        if time.perf_counter() - started > budget:
            pending = [f"{s.case} {s.shape} {s.dtype}" for s in specs[position:]]
            print(f"time budget of {budget:.0f} s spent: {len(pending)} rows not run", flush=True)
            break
        pending = [f"{s.case} {s.shape} {s.dtype}" for s in specs[position + 1:]]
        try:
            with library_calls(spec.library_calls):
                row = run_case(torch, spec.case, spec.shape, spec.dtype, **spec.make(), note=spec.note)
        except Exception as exc:
            print(f"{label}: FAILED {short_error(exc, 2000)}", file=sys.stderr, flush=True)
            row = Row(spec.case, spec.shape, spec.dtype, math.nan, math.nan, None,
                      note=(spec.note + "; " if spec.note else "") + f"failed: {short_error(exc)}")
        else:
            print(f"{label}: tilegraph {row.tilegraph_ms:.3f} ms (launched {row.launched_ms} ms), eager "
                  f"{row.eager_ms:.3f} ms, compile {row.compiled_ms} ms, reduce-overhead {row.compiled_ro_ms} ms, "
                  f"err {row.max_error:.1e}, "
                  f"first {row.tilegraph_first_s:.1f} s / {row.compiled_first_s} s "
                  f"[{time.perf_counter() - started:.0f} s]", flush=True)
        rows.append(row)
        release(torch)
        if not DRY_RUN:  # the table so far, in case the run is cut short
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(table(rows, bandwidth, device, command, pending))
    else:
        pending = []
    text = table(rows, bandwidth, device, command, pending)
    failed = [r for r in rows if "failed:" in r.note]
    if DRY_RUN:
        print(text)
        print(f"dry run: {len(rows) - len(failed)}/{len(rows)} cases ran; nothing written")
        for r in failed:
            print(f"  {r.case} {r.shape} {r.dtype}: {r.note}")
        return 1 if failed else 0
    args.out.write_text(text)
    print(text)
    print(f"written {args.out} ({len(rows) - len(failed)}/{len(rows)} rows ran, {len(pending)} over the budget, "
          f"{time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
