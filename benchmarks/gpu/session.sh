#!/usr/bin/env bash
# One prepared GPU session (issues 19 and 20): set up, GPU tests, then the benchmarks, each under its
# own time limit, so that a lent device's few minutes give every table that fits.
#   bash benchmarks/gpu/session.sh [all|dynamo|triton|channels-last] [dynamo-budget-s] [triton-budget-s]
# Run on the device machine from the repository root; .whl/ holds the wheels the image lacks
# (lark, ortools and its pins; see the device tool's README). Results and logs go to $OUT.
# A session has 15 device minutes and 10 a call, the machine's start included: call `triton 0 300`
# first (GPU tests of the Triton backend, direct launches and packed weights included; launch times;
# then the quick whole-model table: about 8 minutes with the start), commit its tables, then
# `dynamo 120` if time is left. (On 2026-11-27 `triton 0 150` ran the bf16 rows at batch 32 in 260 s;
# the model rows now also time a CUDA-graph replay and torch.compile's reduce-overhead mode.) With time
# left, `channels-last 0 150`: the convolutional rows, each model built with channels-last activations (the
# default since 2026-11-27, on sm_90 evidence only) and again NCHW (`--both-layouts`) against the same
# torch.compile: flip the default back (`TritonOptions.channels_last`) if NCHW wins; then compare the tuner's
# timers on the rows where library calls compete:
#   TILEGRAPH_TUNE_TIMER=graph python3 benchmarks/triton_gpu.py --quick --only resnet50,bert_base \
#     --budget 60 --out $OUT/timer_graph.md
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
if [ "$WHAT" = channels-last ]; then
  timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/backends/test_triton_gpu.py -k channels_last 2>&1 | tee "$OUT/test_channels_last_gpu.log" | tail -8
  stamp "channels-last GPU tests"
  timeout $((TRITON_BUDGET + 120)) python3 benchmarks/triton_gpu.py --quick --both-layouts \
    --only resnet18_basic_block,resnet50,mobilenetv2 --budget "$TRITON_BUDGET" --out "$OUT/triton_gpu_layouts.md" \
    >"$OUT/triton_gpu_layouts.log" 2>&1
  grep -E "^\||geometric" "$OUT/triton_gpu_layouts.log" | tail -12
  stamp "triton_gpu.py --both-layouts"
fi
