#!/usr/bin/env bash
# Ran at commit 23e70ae (session 15).
# Session 15, one H200: the full-depth (48-layer) 30B-shape decode step at 32K and 128K, BF16 vs
# FP4, as gpu_session13d.sh, now with the Mosaic GPU grouped experts (expert_kernel auto).
# Prediction (written before the run): the 4-layer runs (15c/15d) put the Mosaic experts ~45 us
# per layer under the Triton ones, so the FP4 step at 32K 57.8 -> 55.5-56 ms (FP4/BF16 2.64x ->
# 2.72-2.76x) and at 128K 53.5 -> 51.3-52 ms (2.45x -> 2.52-2.56x); targets 3.5x / 5.4x missed.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session15e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r15e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 540 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py \
  --kernel_layout --prefill_len 0 --loop 8 --steps 16 --breakdown never --copy_gb 1 \
  --contexts 32768,131072 --engines bf16,fp4 --time_budget_s 500 --out "$R/full" \
  > "$R/full.txt" 2>&1
echo "rc=$?"
cp -r "$R/full" "$R/full.txt" "$OUT/" 2>/dev/null
grep -E "^\| (fp4|bf16) " "$R/full/rollout_throughput.md" | head -4
grep -v "bfc_allocator\|If this is caused\|Current allocation" "$R/full.txt" | cut -c1-220 | tail -4
exit 0
