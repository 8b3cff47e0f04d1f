#!/usr/bin/env bash
# Session 13, one H200: Nsight Compute with PC sampling of the FP4-KV attention v6 kernels
# (NVFP4, MXFP4; the KV caches in the kv_words layout) at B = 32 x 32K, for the next session's
# budget of where v6's cycles go (issue 7: NVFP4 58% of copy at this shape, 67-68% at
# 128 x 32K / 32 x 128K). Prediction (written before the run): still issue-bound (issue slots
# ~65-70% busy), integer ALU pipe below v4's 52%, fewer executed LOP3 / IMAD / PRMT per row.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session13e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r13e
ncu_source_profile "$R/ncu" decode_attention pallas_kernels.profile_attention
grep -E "Duration|Registers Per|Issue Slots Busy|Achieved Occupancy|DRAM Throughput" \
  "$R/ncu/details.txt" | head -16
tar czf "$OUT/session13e.tgz" -C /tmp r13e
head -40 "$R/ncu/summary.txt"
exit 0
