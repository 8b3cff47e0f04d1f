#!/usr/bin/env bash
# (Ran at commit 989b912; the next commit changed the token -> expert lookup: check out 989b912 to repeat it.)
# Session 14, one H200: the grouped Mosaic GPU FP4 matmul without the wrapper's scatter and
# column gather (14j: kernel 38 us inside a 105 us call): chunks of mp tokens read straight from
# the sorted x (mp + 8 rows from an 8-aligned start), the accumulator stored transposed into a
# padded [P, N] output, one row gather back. The 30B decode shapes against the Triton grouped
# kernel, then mp / stages at 2048 x 768, 111 tokens.
# Prediction (written before the run): exact; calls 45-55 us at 888 rows (1.5-1.8x the Triton
# kernel's ~81 us), the kernel alone within 10% of 14j's 38 us (mp + 8 = 24 token columns per
# MMA instead of 16).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session14k.sh
source "$(dirname "$0")/../gpu_prelude.sh" r14k
timeout 200 python3 experiments/check_mgpu_matmul.py --grouped --out "$R/res" 2>&1 \
  | grep -v Warning | tee "$R/log.txt" | grep -E "^\||Error|error" | head -10
timeout 150 python3 experiments/check_mgpu_matmul.py --grouped --sweep --out "$R/res" 2>&1 \
  | grep -v Warning | tee "$R/log_sweep.txt" | grep -E "^  k=|Error|error" | head -6
cp -r "$R/res" "$R/log.txt" "$R/log_sweep.txt" "$OUT/" 2>/dev/null
exit 0
