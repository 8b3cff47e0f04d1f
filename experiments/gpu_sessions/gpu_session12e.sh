#!/usr/bin/env bash
# Session 12, one H200: quantize-with-hint v4 (magic-constant E2M1 rounding, no per-element NaN
# test: `quantize_hint._round_code`) against v3 and v2, `python -m pallas_kernels.sweep_quantize`
# (device time, bit-identical check against the jitted reference at every row), then the
# PC-sampling profile of the new default (profile_quantize) for its ALU-pipe share.
# Prediction (written before the run): session 12d found v3 ALU-pipe bound (86% busy; static
# ~15.5 ALU-pipe instructions per element); v4 compiles to ~12.3 (quantize_compilecheck), so
# 1.15-1.3x faster at 65536 x 4096 (NVFP4 row 314 -> ~250 us, ~65% of copy), bit-identical.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session12e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r12e
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 420 python3 -m pallas_kernels.sweep_quantize --out "$R" --max-seconds 330 \
  > "$R/log.txt" 2>&1
echo "sweep rc=$?"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  timeout 120 "$NCU" --clock-control none -k 'regex:quantize_with_hint' -o "$R/prof" \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
    python3 -m pallas_kernels.profile_quantize > "$R/ncu_log.txt" 2>&1
  "$NCU" --import "$R/prof.ncu-rep" --page details > "$R/details.txt" 2>&1
  grep "launch " "$R/ncu_log.txt"
  grep -E "Duration|Issue Slots Busy|highest-utilized" "$R/details.txt" | head -8
fi
tar czf "$OUT/session12e.tgz" -C /tmp r12e
grep -E "phase|Error|identical=False" "$R/log.txt" | cut -c1-140 | head -20
grep "^| 2 " "$R/kernels_quantize_sweep.md" | head -60
exit 0
