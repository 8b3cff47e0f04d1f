#!/usr/bin/env bash
# Session-4 GPU call D on one H200 (results under $OUT as one tarball), in turn, each process alone
# on the GPU:
#   1. the rollout throughput benchmark (issue 8) at 32K only, --kernel_layout: session 3's run
#      shared its host with six RL processes and its 32K FP4 row with hints was 3.5x slower than
#      without hints; re-measured here with nothing else running.
#   2. quantize-with-hint bit-identity against the fixed NVFP4 reference (issue 7).
#   3. the decode-attention benchmark with the v4 kernel beside v3 and v2 (short sweep).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session4d.sh
# --loop 1 --stacked: how this ran (session 6 later made 8-step loops and per-layer params the defaults)
set -uo pipefail
OUT=${OUT:-/tmp/gpu_out}
R=/tmp/r4d
mkdir -p "$OUT" "$R"
export PYTHONUNBUFFERED=1
nvidia-smi -L
timeout 210 python3 experiments/bench_rollout.py --loop 1 --stacked --config configs/qwen3_30b_a3b.py --layers 4 \
  --contexts 32768 --prefill_len 0 --time_budget_s 180 --kernel_layout --out "$R/bench" \
  > "$R/bench.txt" 2>&1
timeout 60 python3 -m pallas_kernels.bench_attention --out "$R/qh" \
  --skip v3check,sweep,attention,long,variants,append > "$R/qh.txt" 2>&1
timeout 220 python3 -m pallas_kernels.bench_attention --out "$R/attn" \
  --skip qh,variants,append,long --sweep-seconds 60 --max-seconds 170 > "$R/attn.txt" 2>&1
tar czf "$OUT/session4d.tgz" -C /tmp r4d
grep -A12 "^| engine | experts via" "$R/bench/rollout_throughput.md" | head -20
grep "^|" "$R/qh/kernels_attention.md" | head -12
grep "^|" "$R/attn/kernels_attention.md" | head -12
exit 0
