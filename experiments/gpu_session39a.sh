#!/usr/bin/env bash
# Session 39, one H100 (80 GB; no H200 came): the full-depth (48-layer) 30B decode step at an
# H100-sized HBM budget, the question an RL user with 80 GB cards asks. 74 GB for every engine
# (of ~79.5 GB JAX may take at XLA_PYTHON_CLIENT_MEM_FRACTION=0.95; the H200 runs used 130 of
# ~134). bench_rollout's sizing gives BF16 12 / 3 / 0 sequences at 8K / 32K / 128K (its 61 GB of
# weights leave ~10 GB), FP4 209 / 52 / 13.
# Prediction (before the run): BF16 ~12 ms / step at 32K (B 3: ~21 GB at ~2.5 TB/s + fixed
# cost), ~20 ms at 8K (B 12 touches ~70% of the experts); FP4 ~25-35 ms at 32K and 8K (~63 GB
# at ~2.2 TB/s), so FP4 / BF16 tokens/s ~5-10x at 32K and ~8-14x at 8K; at 128K BF16 does not
# fit one sequence and FP4 runs 13.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_session39a.sh
source "$(dirname "$0")/gpu_prelude.sh" r39a
install_wheels
timeout 575 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py \
  --kernel_layout --prefill_len 0 --loop 8 --steps 16 --breakdown never --copy_gb 1 \
  --hbm_gb 74 --contexts 32768,131072,8192 --engines bf16,fp4 --time_budget_s 520 \
  --out "$R/h100" > "$R/h100.txt" 2>&1
echo "h100 rc=$?"
tar -C "$R" -czf "$OUT/r39a.tar.gz" .
grep -E "ctx|Error|error" "$R/h100.txt" | cut -c1-160 | head -12
grep "^|" "$R/h100/rollout_throughput.md" | cut -c1-200 | head -24
exit 0
