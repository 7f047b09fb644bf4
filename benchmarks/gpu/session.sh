#!/usr/bin/env bash
# One prepared GPU session (issues 19 and 20): set up, GPU tests, then the benchmarks, each under its
# own time limit, so that a lent device's few minutes give every table that fits.
#   bash benchmarks/gpu/session.sh [next|rest|convs|triton|dynamo|all] [dynamo-budget-s] [triton-budget-s]
# Run on the device machine from the repository root; .whl/ holds the wheels the image lacks
# (lark, ortools and its pins; see the device tool's README). Results and logs go to $OUT.
# A session has 15 device minutes and 10 a call, the machine's start included. On 2026-11-27 (fourth session)
# one H100 ran `next 0 130` (the GPU tests, the batch-1 bf16 rows of the larger models, the replay-choice rows,
# the ResNet-18 block in bf16, the host's CPU threads; 377 s), then, warm, the batch-1 f32 rows of the larger
# models (`--quick --budget 240`, 157 s) and one profile (results/triton_gpu.md): every whole-model row has now
# run. Next: `dynamo 150` (the torch.compile GPU tests and rows, which have not run since the direct-address
# runner, then the per-kernel profiles, HF Llama's IEEE attention among them), and on the warm machine
# `triton 0 150` (single kernels, launch overhead).
set -uo pipefail
WHAT=${1:-next}; DYNAMO_BUDGET=${2:-150}; TRITON_BUDGET=${3:-120}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TILEGRAPH_CACHE_DIR=/tmp/tg-cache
start=$(date +%s)
stamp() { echo "== $(( $(date +%s) - start )) s: $*"; }
triton_tests() {
  timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short tests/backends/test_triton_gpu.py 2>&1 \
    | tee "$OUT/test_triton_gpu.log" | tail -8
  stamp "triton GPU tests"
}
# rows NAME ARGS...: `triton_gpu.py --quick ARGS` under the Triton budget, its table and log as $OUT/NAME.md, .log
rows() {
  local name=$1; shift
  timeout $((TRITON_BUDGET + 100)) python3 benchmarks/triton_gpu.py --quick --budget "$TRITON_BUDGET" \
    --out "$OUT/$name.md" "$@" >"$OUT/$name.log" 2>&1
  grep -E "^\||geometric|Not run|no replay" "$OUT/$name.log" | tail -14
  stamp "$name"
}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/tmp/setup.log 2>&1 || { cat /tmp/setup.log; exit 1; }  # (not in $OUT: a call returns 8 files)
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
  # HF Llama's IEEE f32 attention at batch 32: 3.07 of 5.56 ms before its keys were walked 32 a step (db06a94)
  timeout 90 python3 benchmarks/gpu/profile_kernels.py llama_4layer --layers 1 --batch 32 >"$OUT/profile_llama.log" 2>&1
  grep -E "^##|total CUDA|^ +[0-9]" "$OUT/profile_llama.log" | head -8
  stamp "profile_kernels.py"
fi
if [ "$WHAT" = all ] || [ "$WHAT" = triton ]; then
  triton_tests
  timeout 120 python3 benchmarks/launch_overhead.py --gpu >"$OUT/launch_overhead.log" 2>&1
  cp benchmarks/results/launch_overhead.md "$OUT/" 2>/dev/null; grep -E "^\|" "$OUT/launch_overhead.log" | tail -6
  stamp "launch_overhead.py --gpu"
  timeout $((TRITON_BUDGET + 90)) python3 benchmarks/triton_gpu.py --quick --budget "$TRITON_BUDGET" >"$OUT/triton_gpu.log" 2>&1
  cp benchmarks/results/triton_gpu.md "$OUT/" 2>/dev/null; grep -E "^\||geometric" "$OUT/triton_gpu.log" | tail -30
  stamp "triton_gpu.py"
fi
if [ "$WHAT" = convs ]; then
  triton_tests
  rows triton_gpu_layouts --both-layouts --only resnet18_basic_block,resnet50,mobilenetv2
fi
if [ "$WHAT" = rest ]; then
  # the rows that never ran on a GPU (batch 1; MobileNetV2 f32) and the convolutional ones the layout pass changed
  triton_tests
  rows batch1 --batch 1 --dtype bf16,f32 --only resnet18_basic_block,llama_decoder_block,mobilenetv2
  rows convs32 --batch 32 --dtype bf16,f32 --only mobilenetv2,resnet50,resnet18_basic_block
fi
if [ "$WHAT" = next ]; then
  triton_tests
  rows batch1_large --batch 1 --dtype bf16,f32 --only bert_base,gpt2_small,vit_base,resnet50
  rows replay_choice --batch 32 --dtype f32 --only resnet18_basic_block,llama_decoder_block,vit_base
  # the ResNet-18 block in bf16 too, its input now copied channels-last (its first conv took 2.1x the second)
  rows r18_bf16 --batch 32 --dtype bf16 --only resnet18_basic_block
  # the host's CPU side (no GPU time but the wall clock, ~20 s): why the dynamo CPU row ran 4.4x slower than
  # Inductor on this host's 16 cores while 1.5x faster on 2
  timeout 120 python3 benchmarks/cpu_threads.py --out "$OUT/cpu_threads.md" >"$OUT/cpu_threads.log" 2>&1
  grep -E "^\|" "$OUT/cpu_threads.log" | cut -c1-400
  stamp "cpu_threads.py"
fi
