#!/usr/bin/env bash
# Session 14, one H200: probe whether a Pallas Mosaic GPU kernel with the wgmma A operand
# decoded in registers (JAX's hopper_mixed_type_matmul_mgpu: int8 weights -> bf16, weights on
# the M side as in out^T = W^T x^T) streams near the copy bandwidth at 28672 x 8192, 64 / 8
# tokens (issue 6: the Pallas-Triton FP4 kernels reach 46-48% dense decode).
# Prediction (written before the run): 70-85% of copy for int8 weights at 64 tokens for the
# best tiling; 8 tokens may not compile (16-byte rows of x^T: swizzle).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session14c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r14c
timeout 400 python3 experiments/probe_mgpu_mixed.py 2>&1 | grep -v Warning | tee "$R/probe.txt"
cp "$R/probe.txt" "$OUT/"
exit 0
