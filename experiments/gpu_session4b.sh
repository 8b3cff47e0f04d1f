#!/usr/bin/env bash
# Session-4 GPU call B on a 2-GPU host (results under $OUT):
#   GPU 0: the rollout throughput benchmark (issue 8) with --kernel_layout, the only process on its
#          GPU (session 3's run shared the host with six RL processes; its 32K FP4 row with hints
#          was 3.5x slower than without and is re-measured here).
#   GPU 1: quantize-with-hint bit-identity against the fixed NVFP4 reference (issue 7), then the
#          decode-attention benchmark with the v4 kernel beside v3 and v2.
# Usage (repo root): bash experiments/gpu_session4b.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_out}
R=/tmp/r4b
mkdir -p "$OUT" "$R"
export PYTHONUNBUFFERED=1
nvidia-smi -L
CUDA_VISIBLE_DEVICES=0 timeout 450 python3 experiments/bench_rollout.py \
  --config configs/qwen3_30b_a3b.py --layers 4 --contexts 8192,32768,131072 --prefill_len 8192 \
  --time_budget_s 360 --kernel_layout --out "$R/bench" > "$R/bench.txt" 2>&1 &
BENCH=$!
export CUDA_VISIBLE_DEVICES=1
timeout 120 python3 -m pallas_kernels.bench_attention --out "$R/qh" \
  --skip v3check,sweep,attention,long,variants,append > "$R/qh.txt" 2>&1
timeout 380 python3 -m pallas_kernels.bench_attention --out "$R/attn" \
  --skip qh,variants,append,long --sweep-seconds 110 --max-seconds 300 > "$R/attn.txt" 2>&1
wait $BENCH
tar czf "$OUT/session4b.tgz" -C /tmp r4b
grep -A12 "^| engine | experts via" "$R/bench/rollout_throughput.md" | head -30
grep "^|" "$R/qh/kernels_attention.md" | head -12
grep "^|" "$R/attn/kernels_attention.md" | head -12
grep -i "v3 GPU check\|v4" "$R/attn/kernels_attention.md" | tail -3 | cut -c1-600
exit 0
