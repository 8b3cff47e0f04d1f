#!/usr/bin/env bash
# Session 13, one H200, after gpu_session13a's attention table (v6 1.055-1.089x v4 for NVFP4,
# 67-68% of copy at 128 x 32K / 32 x 128K; MXFP4 v6 0.99-1.02x, v5 1.05-1.07x):
# 1) v5 / v6 knobs in device time (bench_attention_v5 --sweep: block_k 32/64 x 1/2 warps x 2/3
#    stages at 32 x 32K, the best two re-timed at 128 x 32K and 32 x 128K). Prediction: v6's
#    registers fell 165 -> 137, so its best knobs may move; NVFP4 within 5% of the default,
#    MXFP4 v6 at 1 warp / block_k 32 (NVFP4's knobs) >= its 2-warp default.
# (It also ran a decode-step A/B, which failed without the ml-collections wheel on the host; that
# part now lives in gpu_session13c.sh.)
# Usage (repo root): bash experiments/gpu_sessions/gpu_session13b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r13b
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 250 python3 -m pallas_kernels.bench_attention_v5 --sweep --out "$R" > "$R/sweep.txt" 2>&1
echo "sweep rc=$?"
tar czf "$OUT/session13b.tgz" -C /tmp r13b
grep -iE "error|Traceback" "$R/sweep.txt" | head -3
grep -E "\| (32 x 32K|128 x 32K|32 x 128K) " "$R/kernels_attention_v5_sweep.md" | head -40
exit 0
