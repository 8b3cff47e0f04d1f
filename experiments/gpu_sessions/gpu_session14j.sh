#!/usr/bin/env bash
# (Ran at commit 98929c0; later commits changed the grouped wrapper: check out 98929c0 to repeat it.)
# Session 14, one H200: where the grouped Mosaic GPU FP4 matmul's time goes (14i: 0.76-0.89x the
# Triton grouped kernel per call): the Mosaic kernel alone vs the whole call (the wrapper's
# zero-fill + scatter of x into expert-aligned chunks, the out^T gather), and mp / tk / stages,
# at 2048 x 768, 111 tokens x top-8 of 128 experts.
# Prediction (written before the run): the kernel alone 55-75 us of the ~108 us call (the
# wrapper 30-50 us); mp 8 (less padding) 5-15% faster; 2 stages no slower (K = 2048: 8 steps).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session14j.sh
source "$(dirname "$0")/../gpu_prelude.sh" r14j
timeout 250 python3 experiments/check_mgpu_matmul.py --grouped --sweep --out "$R/res" 2>&1 \
  | grep -v Warning | tee "$R/log.txt" | grep -E "^  k=|Error|error" | head -10
cp -r "$R/res" "$R/log.txt" "$OUT/" 2>/dev/null
exit 0
