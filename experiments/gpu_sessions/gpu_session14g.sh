#!/usr/bin/env bash
# (Ran at commit d89364e; later commits changed what it calls: check out d89364e to repeat it.)
# Session 14, one H200: the Mosaic GPU FP4 matmul with one wgmma per 64-column span ("chunked":
# the next span's decode can run under the previous span's asynchronous MMA, and only 16 A
# registers per span are live instead of 64 per 256-column step), swept against the whole-step
# decode; then Nsight Compute on both at M = 8 (registers, spills, stalls).
# Prediction (written before the run): chunked 5-12% faster at M = 1 / 8 (toward the 72-77% of
# copy that 14e measured without the scale conversion, which suggests a latency / register
# limit rather than ALU count: 14f's 3x cheaper conversion changed nothing).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session14g.sh
source "$(dirname "$0")/../gpu_prelude.sh" r14g
timeout 250 python3 experiments/check_mgpu_matmul.py --sweep --out "$R/res" 2>&1 \
  | grep -v Warning | tee "$R/log_sweep.txt" | grep -E "^\||Error" | head -24
ncu_source_profile "$R/ncu" body experiments.run_mgpu_once
grep -E "Duration|Registers Per|Issue Slots Busy|Achieved Occupancy|DRAM Throughput|Local Memory|Block Limit|Dynamic Shared" \
  "$R/ncu/details.txt" | head -40
head -30 "$R/ncu/summary.txt"
cp -r "$R/res" "$R/log_sweep.txt" "$OUT/" 2>/dev/null
cp "$R/ncu/details.txt" "$R/ncu/summary.txt" "$OUT/" 2>/dev/null
exit 0
