#!/usr/bin/env bash
# (Ran at commit 0b8f603; later commits changed what it calls: check out 0b8f603 to repeat it.)
# Session 14, one H200: first run of the Mosaic GPU FP4 matmul prototype
# (pallas_kernels/fp4_matmul_mgpu.py: NVFP4 codes decoded in registers into wgmma's A operand,
# out^T = W^T x^T): exactness and device time against the Pallas-Triton FP4 kernel (issue 6:
# dense decode 46-48% of copy) and the XLA bf16 dot.
# Prediction (written before the run): the first compile may fail (layouts, inline_mgpu); if it
# runs, exact up to f32 summation order (relerr <= 1e-6 vs the reference, as the Triton kernel),
# and at 8192 x 28672 with tk 256 / 4 steps 45-70% of copy at M = 1..8 (one warpgroup per CTA,
# wgmma_wait each step: latency may dominate), better than Triton at M = 32..64 (Triton 16-28%).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session14d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r14d
timeout 500 python3 experiments/check_mgpu_matmul.py --out "$R/res" 2>&1 | grep -v Warning \
  | tee "$R/log.txt" | tail -60
cp -r "$R/res" "$R/log.txt" "$OUT/" 2>/dev/null
exit 0
