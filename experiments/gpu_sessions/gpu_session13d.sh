#!/usr/bin/env bash
# Session 13, one H200: the full-depth (48-layer) 30B-shape decode step at 32K and 128K, BF16 vs
# FP4, as session 8's gpu_session8d.sh, now with the FP4 KV caches in the kv_words layout
# (attention v6). Needs the ml-collections wheel (device notes).
# Prediction (written before the run): per layer the FP4 step loses ~45-55 us of ~1260 us of
# attention+rest (4-layer run gpu_session13c: 5.08 -> 4.91 ms, -3.4%), so FP4/BF16 at 32K
# 2.51x -> 2.58-2.62x and at 128K 2.36x -> 2.43-2.47x; targets 3.5x / 5.4x still missed.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session13d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r13d
timeout 570 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py \
  --kernel_layout --prefill_len 0 --loop 8 --steps 16 --breakdown never --copy_gb 1 \
  --contexts 32768,131072 --engines bf16,fp4 --time_budget_s 520 --out "$R/full" \
  > "$R/full.txt" 2>&1
echo "rc=$?"
tar czf "$OUT/session13d.tgz" -C /tmp r13d
grep -v "bfc_allocator\|If this is caused\|Current allocation" "$R/full.txt" | cut -c1-220 | tail -12
exit 0
