#!/usr/bin/env bash
# (Ran at commit 90fbede; later commits changed what it calls: check out 90fbede to repeat it.)
# Session 14, one H200: knobs of the Mosaic GPU FP4 matmul prototype at 8192 x 28672, M = 1 / 8:
# tk 256 / 512 x pipeline steps 3 / 6 x overlap (wgmma_wait(1) with the x tile released one step
# later, so the next tile's decode runs under the MMA), and a diagnostic row without the E4M3
# scale conversion (~45% of the per-thread ALU work by count).
# Prediction (written before the run; 14d: 47.5 / 46.1 us = 64.6 / 66.6% of copy at tk 256,
# 4 steps): overlap 5-15% faster (the per-step wait serialises load -> decode -> MMA); tk / steps
# within 5%; the diagnostic 5-20% faster if the ALU work matters.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session14e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r14e
timeout 500 python3 experiments/check_mgpu_matmul.py --sweep --out "$R/res" 2>&1 \
  | grep -v Warning | tee "$R/log.txt" | tail -30
cp -r "$R/res" "$R/log.txt" "$OUT/" 2>/dev/null
exit 0
