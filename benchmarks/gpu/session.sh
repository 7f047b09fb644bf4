#!/usr/bin/env bash
# One prepared GPU session (issues 19 and 20): set up, GPU tests, then the benchmarks, each under its
# own time limit, so that a lent device's few minutes give every table that fits.
#   bash benchmarks/gpu/session.sh [all|dynamo|triton|convs] [dynamo-budget-s] [triton-budget-s]
# Run on the device machine from the repository root; .whl/ holds the wheels the image lacks
# (lark, ortools and its pins; see the device tool's README). Results and logs go to $OUT.
# A session has 15 device minutes and 10 a call, the machine's start included. On 2026-11-27 one H100 call ran
# the Triton GPU tests (50 s) and `triton_gpu.py --quick --both-layouts --budget 270` (the single kernels and
# the six bf16 model rows, 300 s), a second call on the warm machine the model rows again with f32 and
# MobileNetV2 (`--only <models> --dtype f32,bf16 --budget 300`, 330 s): 12 of the 15 minutes. Next, `convs 0 240`
# first: the GPU tests, then the convolutional rows, channels-last against NCHW: the layout pass now tiles
# MobileNetV2's depthwise convolutions for NHWC, and cuDNN calls over NHWC activations (fixed after that run)
# compete in the tuner; then the batch-1 rows, which have never run on a GPU:
#   python3 benchmarks/triton_gpu.py --quick --batch 1 --only resnet18_basic_block,llama_decoder_block,mobilenetv2 \
#     --budget 200 --out $OUT/batch1.md
# and `triton 0 300` for the rest. Since 7368788 the tuner also times a persistent version of each many-wave dot
# kernel's best tiling (label "... persistent 132" in the log's per-kernel tuning lines): whether it wins is in
# those lines.
set -uo pipefail
WHAT=${1:-all}; DYNAMO_BUDGET=${2:-150}; TRITON_BUDGET=${3:-120}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TILEGRAPH_CACHE_DIR=/tmp/tg-cache
start=$(date +%s)
stamp() { echo "== $(( $(date +%s) - start )) s: $*"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUT/setup.log" 2>&1 || { cat "$OUT/setup.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
stamp "set up"
if [ "$WHAT" = all ] || [ "$WHAT" = dynamo ]; then
  timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/frontends/test_dynamo_gpu.py -k "not fused_attention" 2>&1 | tail -15 | tee "$OUT/test_dynamo_gpu.log"
  stamp "dynamo GPU tests"
  # training through CUDA's fused attention ops (flash for bf16, memory-efficient for f32): its own run, so
  # that a failure above (-x) does not skip it
  timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/frontends/test_dynamo_gpu.py -k fused_attention 2>&1 | tee "$OUT/test_attention_training_gpu.log" | tail -30
  stamp "training with fused attention on CUDA"
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/frontends/test_fx_training.py -k cuda 2>&1 | tail -6 | tee "$OUT/test_training_gpu.log"
  stamp "training on CUDA"
  timeout $((DYNAMO_BUDGET + 90)) python3 benchmarks/dynamo_gpu.py --quick --budget "$DYNAMO_BUDGET" >"$OUT/dynamo_gpu.log" 2>&1
  cp benchmarks/results/dynamo_gpu.md "$OUT/" 2>/dev/null; grep -E "^\||geometric|Not run" "$OUT/dynamo_gpu.log" | tail -20
  stamp "dynamo_gpu.py"
  # where the f32 transformers' time goes, per kernel (the FMA-dot regression of the 2026-11-26 H100 run)
  timeout 90 python3 benchmarks/gpu/profile_kernels.py bert_base vit_base --layers 2 >"$OUT/profile_kernels.log" 2>&1
  grep -E "^##|total CUDA|^ +[0-9]" "$OUT/profile_kernels.log" | head -16
  stamp "profile_kernels.py"
fi
if [ "$WHAT" = all ] || [ "$WHAT" = triton ]; then
  timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/backends/test_triton_gpu.py 2>&1 | tee "$OUT/test_triton_gpu.log" | tail -25
  stamp "triton GPU tests"
  timeout 120 python3 benchmarks/launch_overhead.py --gpu >"$OUT/launch_overhead.log" 2>&1
  cp benchmarks/results/launch_overhead.md "$OUT/" 2>/dev/null; grep -E "^\|" "$OUT/launch_overhead.log" | tail -6
  stamp "launch_overhead.py --gpu"
  timeout $((TRITON_BUDGET + 90)) python3 benchmarks/triton_gpu.py --quick --budget "$TRITON_BUDGET" >"$OUT/triton_gpu.log" 2>&1
  cp benchmarks/results/triton_gpu.md "$OUT/" 2>/dev/null; grep -E "^\||geometric" "$OUT/triton_gpu.log" | tail -30
  stamp "triton_gpu.py"
fi
if [ "$WHAT" = convs ]; then
  timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/backends/test_triton_gpu.py 2>&1 | tee "$OUT/test_triton_gpu.log" | tail -8
  stamp "triton GPU tests"
  timeout $((TRITON_BUDGET + 120)) python3 benchmarks/triton_gpu.py --quick --both-layouts \
    --only resnet18_basic_block,resnet50,mobilenetv2 --budget "$TRITON_BUDGET" --out "$OUT/triton_gpu_layouts.md" \
    >"$OUT/triton_gpu_layouts.log" 2>&1
  grep -E "^\||geometric" "$OUT/triton_gpu_layouts.log" | tail -12
  stamp "triton_gpu.py --both-layouts"
fi
if [ "$WHAT" = rest ]; then
  # the rows that never ran on a GPU (batch 1; MobileNetV2 f32) and the convolutional ones the layout pass changed
  timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/backends/test_triton_gpu.py 2>&1 | tee "$OUT/test_triton_gpu.log" | tail -8
  stamp "triton GPU tests"
  timeout $((TRITON_BUDGET + 90)) python3 benchmarks/triton_gpu.py --quick --batch 1 --dtype bf16,f32 \
    --only resnet18_basic_block,llama_decoder_block,mobilenetv2 --budget "$TRITON_BUDGET" --out "$OUT/batch1.md" \
    >"$OUT/batch1.log" 2>&1
  grep -E "^\||geometric|Not run" "$OUT/batch1.log" | tail -10
  stamp "batch-1 rows"
  timeout $((TRITON_BUDGET + 90)) python3 benchmarks/triton_gpu.py --quick --batch 32 --dtype bf16,f32 \
    --only mobilenetv2,resnet50,resnet18_basic_block --budget "$TRITON_BUDGET" --out "$OUT/convs32.md" \
    >"$OUT/convs32.log" 2>&1
  grep -E "^\||geometric|Not run" "$OUT/convs32.log" | tail -10
  stamp "batch-32 convolutional rows"
fi
