#!/usr/bin/env bash
# Session-7 GPU call A on one H200: the RL train step per numerics variant (PERFORMANCE.md
# target 5: hint-guided QAT <= 1.3x BF16), with each variant's top kernels by device time.
#   1. configs/small.py as the reproduction studies run it (128 trajectories x 20 tokens)
#   2. the 30B shape, 2 of 48 layers, 8 trajectories x 1024 tokens (a realistic token count)
# Usage (repo root): bash experiments/gpu_sessions/gpu_session7a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r7a
timeout 200 python3 experiments/bench_train_step.py --config configs/small.py --profile_steps 3 \
  --out "$R/small" > "$R/small.txt" 2>&1
timeout 300 python3 experiments/bench_train_step.py --config configs/qwen3_30b_a3b.py --layers 2 \
  --batch 8 --seq_len 1024 --steps 10 --profile_steps 3 --out "$R/30b" > "$R/30b.txt" 2>&1
tar czf "$OUT/session7a.tgz" -C /tmp r7a
tail -45 "$R/small.txt" | cut -c1-150
tail -45 "$R/30b.txt" | cut -c1-150
exit 0
