#!/usr/bin/env bash
# Run in session 15 at commit 9f9be79 (prepared in session 14 as gpu_session14l.sh).
# Session 14, one H200 (last ~3 device minutes): the grouped Mosaic GPU FP4 matmul with the
# wrapper's token -> expert lookup loop-free (14k: the call 84-92 us around a 39-48 us kernel;
# jnp.searchsorted on the GPU is a while loop, as session 6 found for the Triton wrapper's
# item tables).
# Prediction (written before the run): the call 50-60 us at 888 rows (1.35-1.6x Triton).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session15a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r15a
timeout 100 python3 experiments/check_mgpu_matmul.py --grouped --out "$R/res" 2>&1 \
  | grep -v Warning | tee "$R/log.txt" | grep -E "^\||Error|error" | head -10
timeout 200 python3 experiments/check_mgpu_matmul.py --grouped --sweep --out "$R/sweep" 2>&1 \
  | grep -v Warning | tee "$R/log_sweep.txt" | grep -E "^\||Error|error" | tail -14
cp -r "$R/sweep" "$R/log_sweep.txt" "$OUT/" 2>/dev/null
cp -r "$R/res" "$R/log.txt" "$OUT/" 2>/dev/null
exit 0
