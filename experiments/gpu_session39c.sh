#!/usr/bin/env bash
# Session 39, one H100 (80 GB), after gpu_session39b.sh: the FP4-weights-only engine (W4A4
# experts, bf16 KV cache, hints on) at the same 72 GB budget, the user's other option on an
# 80 GB card. bench_rollout's sizing gives it 15 / 3 sequences at 32K / 128K (BF16: 2 / 0;
# full FP4: 50 / 12).
# Prediction (before the run): ~30-36 ms / step at 32K (~48 GB of bf16 KV + ~18 GB of experts
# at ~2 TB/s), ~420-500 tokens/s = 2.3-2.7x BF16's 184.3 from 39b; ~20-26 ms at 128K, ~115-150
# tokens/s (full FP4: 416).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_session39c.sh
source "$(dirname "$0")/gpu_prelude.sh" r39c
install_wheels
timeout "${LIMIT:-250}" python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py \
  --kernel_layout --prefill_len 0 --loop 8 --steps 16 --breakdown never --copy_gb 1 \
  --hbm_gb 72 --contexts 32768,131072 --engines fp4w_bf16kv --time_budget_s 200 \
  --out "$R/h100w" > "$R/h100w.txt" 2>&1
echo "h100w rc=$?"
tar -C "$R" -czf "$OUT/r39c.tar.gz" .
grep -E "ctx|Error" "$R/h100w.txt" | cut -c1-160 | head -6
exit 0
