#!/usr/bin/env bash
# Session 14, one H200: the Mosaic GPU FP4 matmul with (1) the code-word shared-memory load
# `optimized=True` (14g's profile: LEA 9% of executed instructions, R2UR / UIADD3 another 7%:
# per-element address arithmetic) and (2) scale codes converted in pairs, (S0, S1) per prmt + mad,
# each half broadcast in the decode asm (meant to fold into HMUL2 .H0_H0 / .H1_H1 selectors):
# half the scale ops. The overlap knob is gone (no gain, NaN twice in 14g).
# Prediction (written before the run): exact; 3-8% faster than 14f at M = 1 / 8 (44-46 us,
# 67-71% of copy); the sweep tk / steps within 5%.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session14h.sh
source "$(dirname "$0")/../gpu_prelude.sh" r14h
timeout 250 python3 experiments/check_mgpu_matmul.py --out "$R/res" 2>&1 | grep -v Warning \
  | tee "$R/log.txt" | grep -E "^\||Error" | head -20
timeout 200 python3 experiments/check_mgpu_matmul.py --sweep --out "$R/res" 2>&1 \
  | grep -v Warning | tee "$R/log_sweep.txt" | grep -E "^\||Error" | head -20
cp -r "$R/res" "$R/log.txt" "$R/log_sweep.txt" "$OUT/" 2>/dev/null
exit 0
