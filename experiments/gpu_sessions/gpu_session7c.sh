#!/usr/bin/env bash
# Session-7 GPU call C on one H200: the RL train step at the 30B shape (2 of 48 layers,
# 8 trajectories x 1024 tokens), which call A could not run (ragged_dot's dense gradient
# needed a 64 GiB intermediate), now on the Pallas grouped kernels with their backward.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session7c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r7c
timeout 420 python3 experiments/bench_train_step.py --config configs/qwen3_30b_a3b.py --layers 2 \
  --batch 8 --seq_len 1024 --steps 10 --profile_steps 3 --out "$R/30b" > "$R/30b.txt" 2>&1
tar czf "$OUT/session7c.tgz" -C /tmp r7c
tail -12 "$R/30b.txt" | cut -c1-200
for v in bf16 trace; do head -14 "$R/30b/train_step_profile_$v.md" | cut -c1-150; done
exit 0
