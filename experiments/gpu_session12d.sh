#!/usr/bin/env bash
# Session 12, one H200: Nsight Compute PC sampling (executed instruction mix and stall reasons
# per opcode, experiments/ncu_source_summary.py) of the other two kernels that miss their
# targets: the fused quantize-with-hint (53-58% of copy; profile_quantize: 65536 x 4096 NVFP4
# and MXFP4 row scope) and the grouped FP4 expert matmul (43-49%; profile_grouped, FP4
# launches: 32 tokens x top-8 of 128 experts, 2048 x 768).
# Prediction (written before the run): quantize is ALU-pipe bound like the dense matmul
# ("math pipe throttle" and "wait" the top reasons, integer LOP3/SHF/ISETP/SEL > 50% of the
# executed mix); grouped has the dense kernel's mix (LOP3, IMAD.MOV, PRMT, HMUL2, SHF).
# Usage (repo root): bash experiments/gpu_session12d.sh
source "$(dirname "$0")/gpu_prelude.sh" r12d
export XLA_PYTHON_CLIENT_PREALLOCATE=false
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
for v in quantize grouped; do
  mkdir -p "$R/$v"
  kern='regex:quantize_with_hint'; [ "$v" = grouped ] && kern='regex:fp4_matmul'
  timeout 200 "$NCU" --clock-control none -k "$kern" -o "$R/$v/prof" --section SpeedOfLight \
    --section WarpStateStats --section SourceCounters --section LaunchStats \
    --section Occupancy --section ComputeWorkloadAnalysis --import-source no \
    python3 -m "pallas_kernels.profile_$v" > "$R/$v/ncu_log.txt" 2>&1
  echo "$v ncu rc=$?"; grep "launch " "$R/$v/ncu_log.txt"
  "$NCU" --import "$R/$v/prof.ncu-rep" --page raw --csv > "$R/$v/raw.csv" 2>&1
  "$NCU" --import "$R/$v/prof.ncu-rep" --page source --csv --print-source sass \
    > "$R/$v/source.csv" 2>&1
  "$NCU" --import "$R/$v/prof.ncu-rep" --page details > "$R/$v/details.txt" 2>&1
  python3 experiments/ncu_source_summary.py "$R/$v" > "$R/$v/summary.txt" 2>&1
done
tar czf "$OUT/session12d.tgz" -C /tmp r12d
for v in quantize grouped; do
  echo "=== $v"
  grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|pipeline" "$R/$v/details.txt" | head -12
  grep -A3 "^== raw" "$R/$v/summary.txt" | head -8
  sed -n '/source page/,/all opcodes/p' "$R/$v/summary.txt" | head -20
done
exit 0
