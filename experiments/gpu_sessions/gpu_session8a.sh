#!/usr/bin/env bash
# Prepared in session 7 for the next session (one H200; not yet run; the train step after the MoE gather
# backwards is measured by rerunning gpu_session7d.sh):
#   1. the full-depth check of issue 8's 4-layer ratios: all 48 layers of the 30B shape at 32K
#      and 128K, BF16 and FP4 engines (prediction from the 4-layer steps: ~2.9x at 32K, ~2.6x at
#      128K; per-layer costs dominate, the lm_head is ~3% of the 4-layer FP4 step)
#   2. the Nsight Compute profile of the FP4 grouped matmul (gpu_session5f.sh, never run in its
#      fixed form): stall reasons for issue 6's 36-40%
# Usage (repo root): bash experiments/gpu_sessions/gpu_session8a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r8a
timeout 330 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py \
  --kernel_layout --prefill_len 0 --loop 8 --steps 16 --breakdown never --copy_gb 1 \
  --contexts 32768,131072 --engines bf16,fp4 --time_budget_s 280 --out "$R/full" \
  > "$R/full.txt" 2>&1
OUT=$R bash "$(dirname "$0")/gpu_session5f.sh" > "$R/ncu_call.txt" 2>&1
tar czf "$OUT/session8a.tgz" -C /tmp r8a r5f
grep -E "ctx|copy bandwidth" "$R/full.txt" | cut -c1-160
tail -40 "$R/ncu_call.txt"
exit 0
