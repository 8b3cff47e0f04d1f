#!/usr/bin/env bash
# (Ran at commit 9ffde66; later commits changed what it calls: check out 9ffde66 to repeat it.)
# Session 14, one H200: the Mosaic GPU FP4 matmul with scale codes (mgpu_layout: the E4M3 scale
# re-encoded at prepare time so the bf16 multiplier is one prmt + one mad per scale instead of
# cvt e4m3x2 -> f16 -> f32 -> mul -> bf16x2, ~14 instead of ~40 ops per 4 scales with moves).
# 14e measured the kernel without any scale conversion at 72-77% of copy (M = 1 / 8) against 62-66%
# with the old one.
# Prediction (written before the run): exact as before (relerr = the Triton kernel's); 8192 x
# 28672 M = 1 / 8 at 41-45 us (68-75% of copy); the sweep: tk 256 / 512 x 2-4 steps within 5%.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session14f.sh
source "$(dirname "$0")/../gpu_prelude.sh" r14f
timeout 280 python3 experiments/check_mgpu_matmul.py --out "$R/res" 2>&1 | grep -v Warning \
  | tee "$R/log.txt" | grep -E "^\||Error" | head -20
timeout 250 python3 experiments/check_mgpu_matmul.py --sweep --out "$R/res" 2>&1 \
  | grep -v Warning | tee "$R/log_sweep.txt" | grep -E "^\||Error" | head -20
cp -r "$R/res" "$R/log.txt" "$R/log_sweep.txt" "$OUT/" 2>/dev/null
exit 0
