#!/usr/bin/env bash
# Session 39, one H100 (80 GB), second try of gpu_session39a.sh: there every engine ran out of
# memory (BF16 at 32K B=3 in its decode loop; FP4 B=52 after it, as the failed engine's arrays
# were still alive) and the call timed out. Fixed since: bench_rollout unstacks the layers leaf
# by leaf through host memory (a jitted unstack held the 61 GB of bf16 weights twice) and
# collects a failed engine's garbage. A lower budget (72 GB: BF16 9 / 2 / 0 sequences at 8K /
# 32K / 128K, FP4 200 / 50 / 12), FP4 first so that a BF16 failure cannot cost its rows.
# Prediction (before the run): FP4 ~25-35 ms / step at 32K; BF16 ~10-12 ms at 32K (B 2);
# FP4 / BF16 tokens/s ~6-10x at 32K; at 128K BF16 does not fit one sequence.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_session39b.sh
source "$(dirname "$0")/gpu_prelude.sh" r39b
install_wheels
timeout "${LIMIT:-470}" python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py \
  --kernel_layout --prefill_len 0 --loop 8 --steps 16 --breakdown never --copy_gb 1 \
  --hbm_gb 72 --contexts 32768,131072,8192 --engines fp4,bf16 --time_budget_s 380 \
  --out "$R/h100" > "$R/h100.txt" 2>&1
echo "h100 rc=$?"
tar -C "$R" -czf "$OUT/r39b.tar.gz" .
grep -E "ctx|Error" "$R/h100.txt" | cut -c1-160 | head -12
grep "^|" "$R/h100/rollout_throughput.md" | cut -c1-200 | head -24
exit 0
