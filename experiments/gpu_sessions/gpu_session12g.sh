#!/usr/bin/env bash
# Session 12, one H200: NVFP4 row-scope quantize-with-hint, one walk vs two walks with the v4
# math (`python -m pallas_kernels.sweep_quantize --grid walks`). Session 12f: one walk holds the
# row block in registers (112-118 per thread) and stays at 63% of copy while MXFP4 / per-tensor
# (36-55 registers) reach 72-74%; the two-walk schedule (row amax first, x re-read from L2) at
# session 4's tiles (8 rows x 256) already measured 372 us against one walk's 602 us at those tiles.
# Prediction (written before the run): two walks at 2-4 rows x 512-1024 within 0.9-1.0x of
# MXFP4's 230 us (NVFP4 row ~235-255 us, 66-70%), bit-identical.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session12g.sh
source "$(dirname "$0")/../gpu_prelude.sh" r12g
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 400 python3 -m pallas_kernels.sweep_quantize --grid walks --out "$R" --max-seconds 300 \
  > "$R/log.txt" 2>&1
echo "sweep rc=$?"
tar czf "$OUT/session12g.tgz" -C /tmp r12g
grep -E "phase|Error|identical=False" "$R/log.txt" | cut -c1-140 | head -10
grep "^| " "$R/kernels_quantize_walks.md" | head -45
exit 0
