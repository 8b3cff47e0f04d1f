#!/usr/bin/env bash
# Session 12, one H200: Nsight Compute PC sampling (executed instruction mix and stall reasons
# per opcode, experiments/ncu_source_summary.py) of the other two kernels that miss their
# targets: the fused quantize-with-hint (53-58% of copy; profile_quantize: 65536 x 4096 NVFP4
# and MXFP4 row scope) and the grouped FP4 expert matmul (43-49%; profile_grouped, FP4
# launches: 32 tokens x top-8 of 128 experts, 2048 x 768).
# Prediction (written before the run): quantize is ALU-pipe bound like the dense matmul
# ("math pipe throttle" and "wait" the top reasons, integer LOP3/SHF/ISETP/SEL > 50% of the
# executed mix); grouped has the dense kernel's mix (LOP3, IMAD.MOV, PRMT, HMUL2, SHF).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session12d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r12d
export XLA_PYTHON_CLIENT_PREALLOCATE=false
ncu_source_profile "$R/quantize" quantize_with_hint pallas_kernels.profile_quantize
ncu_source_profile "$R/grouped" fp4_matmul pallas_kernels.profile_grouped
tar czf "$OUT/session12d.tgz" -C /tmp r12d
for v in quantize grouped; do
  echo "=== $v"
  grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|pipeline" "$R/$v/details.txt" | head -12
  grep -A3 "^== raw" "$R/$v/summary.txt" | head -8
  sed -n '/source page/,/all opcodes/p' "$R/$v/summary.txt" | head -20
done
exit 0
