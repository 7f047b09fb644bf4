"""benchmarks/triton_gpu.py without a GPU: its row plan, its table (failed rows, the budget, the model
geomean), and a dry run of a few single-kernel rows through the Triton interpreter."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import importlib.util  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

pytest.importorskip("torch", reason="the benchmark compares with torch")
pytest.importorskip("triton", reason="triton is not installed (pip install 'tilegraph[triton]')")

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("tilegraph_gpu_benchmark_plan", BENCHMARKS / "triton_gpu.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_whole_models_run_at_both_batches_and_dtypes(bench):
    from torch_models import WHOLE_MODELS

    names = {m.name for m in WHOLE_MODELS}
    assert names == {"resnet18_basic_block", "resnet50", "mobilenetv2", "bert_base", "gpt2_small",
                     "llama_decoder_block", "vit_base"}
    full = [(m.name, b, d) for m, b, d in bench.model_plan(quick=False)]
    assert sorted(full) == sorted((n, b, d) for n in names for b in (1, 32) for d in ("f32", "bf16"))
    quick = [(m, b, d) for m, b, d in bench.model_plan(quick=True)]
    assert {(m.name, d) for m, b, d in quick if b == 32} == {(n, d) for n in names for d in ("f32", "bf16")}
    assert all(m.small for m, b, _ in quick if b == 1)
    assert [(b, d) for _, b, d in quick[:len(names)]] == [(32, "bf16")] * len(names), "the most telling first"


def test_the_table_keeps_failed_rows_and_says_what_was_not_run(bench):
    Row = bench.Row
    rows = [Row("matmul", "4096^3", "bf16", 0.2, 0.25, 0.19, flops=2 * 4096 ** 3, cublas_ms=0.19),
            Row("resnet50", "batch 32", "bf16", 2.0, 3.0, 1.0, note="model"),
            Row("bert_base", "batch 32", "bf16", 1.0, 2.0, 2.0, note="model", launched_ms=1.5, compiled_ro_ms=0.8),
            Row("vit_base", "batch 32", "bf16", math.nan, math.nan, None,
                note="model; failed: TilegraphError: no lowering / here")]
    text = bench.table(rows, 3e12, "H100", "python benchmarks/triton_gpu.py --quick", ["gpt2_small batch 1 f32"])
    lines = text.splitlines()
    assert "geometric mean of compile/tg 1.00 over 2 rows, lowest 0.50 (resnet50)" in text
    assert "geometric mean of compile-ro/tg 0.80 over 1 rows, lowest 0.80 (bert_base)" in text
    bert = next(line for line in lines if line.startswith("| bert_base"))
    assert "| 1.000 | 1.500 | 2.000 | 2.000 | 0.800 |" in bert, "graph replay, launches one by one, eager, both modes"
    failed = next(line for line in lines if line.startswith("| vit_base"))
    assert "failed: TilegraphError" in failed and "| n/a |" in failed
    assert "Not run (over the time budget): gpt2_small batch 1 f32." in text
    header = next(line for line in lines if line.startswith("| case"))
    assert "compile/tg" in header and all(line.count("|") == header.count("|") for line in lines
                                          if line.startswith("| "))
    assert bench.short_error(ValueError("a | b\nsecond line")) == "ValueError: a / b"


def test_a_dry_run_of_single_kernels_passes(bench, capsys):
    import torch

    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())
    try:  # the run allows TF32 as its f32 rows do; the flags go back for the tests after this one
        assert bench.main(["--dry-run", "--only", "softmax,matmul,attention"]) == 0
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        torch.set_float32_matmul_precision(saved[2])
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
    out = capsys.readouterr().out
    assert "dry run: 5/5 cases ran; nothing written" in out
    assert "attention | 1x2x40x16" in out
