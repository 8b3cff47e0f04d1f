#!/usr/bin/env bash
# Prepared in session 7 for the next session's first GPU call on one H200 (not yet run): the RL
# train step again after the MoE dispatch's gather backwards (session 7's call D profiles showed
# 4 scatter-add fusions per layer: ~2 ms of small.py's 15.5 ms trace step, 4.1 ms listed at the
# 30B shape; predicted: small.py ~13 ms trace, 30B ~84 ms trace, ratios about unchanged).
# Usage (repo root): bash experiments/gpu_session8a.sh
source "$(dirname "$0")/gpu_prelude.sh" r8a
timeout 280 python3 experiments/bench_train_step.py --config configs/small.py --profile_steps 3 \
  --out "$R/small" > "$R/small.txt" 2>&1
timeout 200 python3 experiments/bench_train_step.py --config configs/qwen3_30b_a3b.py --layers 2 \
  --batch 8 --seq_len 1024 --steps 10 --profile_steps 3 --out "$R/30b" > "$R/30b.txt" 2>&1
tar czf "$OUT/session8a.tgz" -C /tmp r8a
for s in small 30b; do tail -7 "$R/$s/train_step.md"; done
grep -h scatter "$R"/*/train_step_profile_trace.md | cut -c1-120
exit 0
