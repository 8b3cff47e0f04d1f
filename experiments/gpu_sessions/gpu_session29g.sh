#!/usr/bin/env bash
# One H200, issue 7 / the rollout headline: the full-depth (48-layer) 30B decode step with the
# attention's P rounded to bf16 (--attn_p_precision bf16; it applies to both engines' attention
# kernels), bf16 and fp4 engines at 32K and 128K, as rollout_48l (23a: FP4/BF16 3.00x / 2.74x
# with f32 P, FP4 50.30 / 46.80 ms).
# Prediction (written before the run; 29f: the 4-layer FP4 step 9.0% / 9.5% faster): FP4 step
# ~45.8 / ~42.4 ms, the BF16 engine within 3% of 23a (27.18 / 23.75 ms: its attention reads a
# bf16 cache at ~100% of copy, so P's precision matters less there), so ~3.3x / ~3.0x.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session29g.sh
source "$(dirname "$0")/../gpu_prelude.sh" r29g
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 285 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py \
  --kernel_layout --prefill_len 0 --loop 8 --steps 16 --breakdown never --copy_gb 1 \
  --contexts 32768,131072 --engines bf16,fp4 --time_budget_s 250 --attn_p_precision bf16 \
  --out "$R/full" > "$R/full.txt" 2>&1
echo "full rc=$?"
tar -C "$R" -czf "$OUT/r29g.tar.gz" .
rollout_rows full
exit 0
