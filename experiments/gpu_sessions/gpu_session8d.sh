#!/usr/bin/env bash
# Session-8 GPU call D on one H200 (issue 8): the full-depth check of the 4-layer ratios, all 48
# layers of the 30B shape at 32K and 128K, BF16 and FP4 engines, 130 GB budget. Call A's attempt
# ran out of memory: JAX's allocator held 75% of the GPU (~112 GB); bench_rollout now asks for
# 95%. Prediction (4-layer steps + the lm_head's ~3% share): FP4/BF16 ~2.9x at 32K, ~2.6x at 128K.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session8d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r8d
timeout 570 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py \
  --kernel_layout --prefill_len 0 --loop 8 --steps 16 --breakdown never --copy_gb 1 \
  --contexts 32768,131072 --engines bf16,fp4 --time_budget_s 520 --out "$R/full" \
  > "$R/full.txt" 2>&1
tar czf "$OUT/session8d.tgz" -C /tmp r8d
grep -v "bfc_allocator\|If this is caused\|Current allocation" "$R/full.txt" | cut -c1-220 | tail -25
exit 0
