"""TF32 operands rounded or truncated: how far each drifts a deep network from its f64 result, on the CPU.

    python benchmarks/tf32_rounding.py      # writes benchmarks/results/tf32_rounding.md

Tensor cores read the top 19 bits of an f32 operand: fed f32 bits, as Triton's `tl.dot(...,
input_precision="tf32")` feeds them (no `cvt.rna.tf32.f32` in its sm_80 or sm_90 PTX), they truncate toward
zero. cuBLAS and cuDNN round to nearest, so torch's TF32 does. Truncation errs one way on every product and the
errors add up: on the H100 the generated ResNet-50 drifted 3.64 from IEEE f32 where torch's TF32 drifted 1.12
(`triton_gpu.md`, 2026-11-27). This script emulates both on the CPU for the convolutional models
(`torch_models.WHOLE_MODELS`, batch 4, f32): every convolution's and linear layer's operands rounded or truncated
to TF32, the products in f32, the error against the same weights in f64. The Triton backend now rounds f32
dot operands to nearest TF32 in the kernel (`scalar._tg_tf32`) before a TF32 `tl.dot`.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results" / "tf32_rounding.md"
MODELS = ("resnet18_basic_block", "resnet50", "mobilenetv2", "vit_base")


def truncated(x):
    """x's f32 bits cut to TF32's (toward zero), as tensor cores read the f32 bits `tl.dot` feeds them."""
    import torch

    return (x.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)


def drift(module, inputs, exact, operand) -> float:
    """Max abs error against `exact` with every convolution's and linear layer's operands passed through
    `operand` (None: plain f32)."""
    import torch

    model = copy.deepcopy(module)
    if operand is not None:
        for layer in [m for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]:
            with torch.no_grad():
                layer.weight.copy_(operand(layer.weight))
            layer.register_forward_pre_hook(lambda _, args: (operand(args[0]), *args[1:]))
    with torch.no_grad():
        out = model(*inputs)
    out = out[0] if isinstance(out, (tuple, list)) else out
    return float((out.double() - exact).abs().max())


def model_row(name: str) -> str:
    import torch
    from torch_models import whole_model

    model = whole_model(name)
    module, inputs = model.build_in("f32", 4, False, 2 if model.layered else None)
    module.eval()
    with torch.no_grad():
        exact = copy.deepcopy(module).double()(*(x.double() if x.is_floating_point() else x for x in inputs))
    exact = exact[0] if isinstance(exact, (tuple, list)) else exact
    scale = float(exact.abs().max())
    from tilegraph.backends.triton.packing import to_tf32  # to nearest, ties away: what the backend binds

    f32, near, trunc = (drift(module, inputs, exact, op) for op in (None, to_tf32, truncated))
    return f"| {name} | {scale:.3g} | {f32:.2e} | {near:.2e} | {trunc:.2e} | {trunc / near:.1f} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = [model_row(name) for name in MODELS]
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join([f"# {__doc__.splitlines()[0]}", "",
                      f"Run {when} by `python benchmarks/tf32_rounding.py`: batch 4, f32 weights and inputs "
                      "(transformers with 2 layers), max abs error against the same model in f64.", "",
                      "| model | output scale | f32 | TF32 rounded (cuBLAS, cuDNN) | TF32 truncated (tl.dot fed f32) "
                      "| truncated / rounded |", "|---|---:|---:|---:|---:|---:|", *rows]) + "\n"
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
