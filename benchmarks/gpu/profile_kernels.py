"""Where a whole model's GPU time goes under torch.compile(backend="tilegraph"): per-kernel CUDA time.

    python benchmarks/gpu/profile_kernels.py gpt2_small bert_base --layers 2

Each model (the rows of benchmarks/dynamo_gpu.py) is compiled for Triton with CUDA graphs off, so
that the profiler sees each launch; one call is profiled and the kernels are listed by CUDA time
beside the backend report's line for each (grid, blocks, tl.dot). Also prints the output's error
against eager in IEEE f32 and with torch's default TF32 convolutions, as a yardstick of precision.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def error(got, want) -> float:
    return float((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-6))


def profile_model(name: str, layers: int | None, batch: int, top: int) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    import dynamo_gpu
    from tilegraph.frontends.fx.dynamo import tilegraph_backend

    model, inputs = dynamo_gpu.builders()[name](batch, False, layers)
    model = model.cuda().eval()
    inputs = tuple(x.cuda() for x in inputs)
    graphs = []

    def backend(gm, example_inputs, **kwargs):
        graphs.append(tilegraph_backend(gm, example_inputs, **kwargs))
        return graphs[-1]

    torch._dynamo.reset()
    fn = torch.compile(model, backend=backend, options={"cudagraphs": False})
    with torch.no_grad():
        got = fn(*inputs)
        tf32 = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = False
        ieee = model(*inputs)
        torch.backends.cudnn.allow_tf32 = True
        default = model(*inputs)
        torch.backends.cudnn.allow_tf32 = tf32
        print(f"convolutions in {'TF32' if tf32 else 'IEEE f32'} on both sides")
        for _ in range(3):
            fn(*inputs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn(*inputs)
            torch.cuda.synchronize()
    print(f"\n## {name} (layers {layers or 'all'}, batch {batch}): error vs IEEE eager {error(got, ieee):.2e}, "
          f"eager with TF32 convolutions vs IEEE {error(default, ieee):.2e}")
    report = {}
    for graph in graphs:
        for runner in graph._cache.values():
            for line in runner.program.backend_report().splitlines():
                head, _, rest = line.strip().partition(": ")
                report[head] = rest
    events = sorted(prof.key_averages(), key=lambda e: -e.device_time_total)
    total = sum(e.device_time_total for e in events)
    print(f"total CUDA time {total / 1e3:.3f} ms in {sum(e.count for e in events)} kernels")
    for e in events[:top]:
        kernel = e.key.removeprefix("kernel_")
        print(f"  {e.device_time_total / 1e3:8.3f} ms {100 * e.device_time_total / total:5.1f}%  x{e.count:<3} {e.key}"
              f"  {report.get(kernel, '')[:150]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--ieee", action="store_true", help="convolutions in IEEE f32 on both sides (TF32 off)")
    args = parser.parse_args()
    if args.ieee:
        import torch

        torch.backends.cudnn.allow_tf32 = False
    for name in args.models:
        try:
            profile_model(name, args.layers, args.batch, args.top)
        except Exception as exc:  # one model's failure must not lose the others
            print(f"\n## {name}: {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
