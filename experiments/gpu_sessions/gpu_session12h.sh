#!/usr/bin/env bash
# Session 12, one H200: why NVFP4 per-row quantize-with-hint v4 trails per-tensor (266 vs 227
# us at 65536 x 4096, same per-element work): Nsight Compute with PC sampling of the three
# default launches (profile_quantize: NVFP4 row, MXFP4 row, NVFP4 tensor), executed mix and
# stall reasons by opcode. Prediction (written before the run): the row kernel executes
# within 5% of the tensor kernel's instructions; its extra time is stalls on the row-amax
# dependency (barrier / short scoreboard at the cross-warp max before any code is written).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session12h.sh
source "$(dirname "$0")/../gpu_prelude.sh" r12h
export XLA_PYTHON_CLIENT_PREALLOCATE=false
ncu_source_profile "$R" quantize_with_hint pallas_kernels.profile_quantize
tar czf "$OUT/session12h.tgz" -C /tmp r12h
grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|highest-utilized" "$R/details.txt"
grep -A2 "^  quantize" "$R/summary.txt" | head -12
grep -E "source page|all opcodes" "$R/summary.txt"
exit 0
