#!/usr/bin/env bash
# Session-6 GPU call C on one H200: where the decode step's device time goes after the
# loop-free grouped matmul tables (call A: FP4 expert matmuls 3.3 -> 1.8 ms in isolation, but
# the step time did not move and "rest" grew to 1.5 ms). bench_rollout --profile_steps traces
# 5 steps per engine (jax.profiler) and tables the kernels by device time (30B shape, 4 layers,
# --kernel_layout, 32K, bf16 / fp4 / fp4_nohints).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session6c.sh
# --loop 1 --stacked: how this ran (session 6 later made 8-step loops and per-layer params the defaults)
source "$(dirname "$0")/../gpu_prelude.sh" r6c
timeout 240 python3 experiments/bench_rollout.py --loop 1 --stacked --config configs/qwen3_30b_a3b.py --layers 4 \
  --contexts 32768 --prefill_len 0 --steps 10 --kernel_layout --engines bf16,fp4,fp4_nohints \
  --breakdown never --profile_steps 5 --out "$R/32k" > "$R/32k.txt" 2>&1
rm -rf "$R"/32k/profile/trace_*
tar czf "$OUT/session6c.tgz" -C /tmp r6c
for f in "$R"/32k/profile/*.md; do head -26 "$f" | cut -c1-160; done
tail -4 "$R/32k.txt"
exit 0
