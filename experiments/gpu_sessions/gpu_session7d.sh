#!/usr/bin/env bash
# Session-7 GPU call D on one H200: the RL train step after the three train-step fixes (Pallas
# grouped expert matmul with a grouped backward; bf16 backward GEMMs for the f32-logit head;
# code-distance histogram as masked sums instead of a 15-bin scatter-add), at both shapes.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session7d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r7d
timeout 200 python3 experiments/bench_train_step.py --config configs/qwen3_30b_a3b.py --layers 2 \
  --batch 8 --seq_len 1024 --steps 10 --profile_steps 3 --out "$R/30b" > "$R/30b.txt" 2>&1
timeout 280 python3 experiments/bench_train_step.py --config configs/small.py --profile_steps 3 \
  --out "$R/small" > "$R/small.txt" 2>&1
tar czf "$OUT/session7d.tgz" -C /tmp r7d
for s in 30b small; do tail -7 "$R/$s/train_step.md"; done
for v in bf16 trace trace+codes; do head -10 "$R/30b/train_step_profile_$v.md" | cut -c1-150; done
exit 0
