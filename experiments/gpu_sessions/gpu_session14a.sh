#!/usr/bin/env bash
# Session 14, one H200: NVFP4 v6 decode attention over split counts (programs per wave) and a
# few block_k / stages variants, device time (issue 7: 68% of copy at 128 x 32K and 32 x 128K,
# 58% at 32 x 32K; target 70%).
# Why: session 13's Nsight Compute page says 11 programs fit per SM (shared memory: 20 KB per
# 1-warp program), 1452 slots on 132 SMs; the default split count gives 2048 programs at
# 128 x 32K and 32 x 128K = 1.41 waves, so the second wave runs the SMs 40% full.
# Prediction (written before the run): if the wave tail costs what that arithmetic says,
# 4096-8192 programs (2.8 / 5.6 waves) are 3-8% faster than the default at 128 x 32K and
# 32 x 128K (reaching ~70-73% of copy), with the split combine adding < 2% of the call; if
# the tail is already hidden (latency-bound programs run faster with fewer neighbours), all
# split counts within +-2%. block_k 16 (half the shared memory, more programs per SM but
# twice the per-row loop overhead): within +-5% of block_k 32; 4 stages: <= 2% gain.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session14a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r14a
python3 -m pallas_kernels.bench_attention_v5 --splits --out "$R/splits" 2>&1 | grep -v Warning
cp -r "$R/splits" "$OUT/"
exit 0
