#!/usr/bin/env bash
# Session 12, one H200: where the dense FP4 decode matmul's warps wait (Nsight Compute stall
# reasons; session 11c collected them but printed only the summary page).
#  1. The stall breakdown of session 11c's report (carried as .carry/dense11c.ncu-rep, if there).
#  2. A new profile of the same launches with PC sampling (SourceCounters): stall samples per
#     SASS instruction, summed by opcode (experiments/ncu_source_summary.py).
# Prediction (written before the run): "long scoreboard" (waiting on global/L2 loads) is not the
# top reason at M = 1 (Triton's cp.async pipeline holds 3 stages); the top two are "wait"
# (fixed-latency dependencies in the decode chain) and "short scoreboard" / "mio throttle"
# (shared-memory reads of the staged weights), and "no eligible" 40% of cycles as in 11c.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session12a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r12a
export XLA_PYTHON_CLIENT_PREALLOCATE=false
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found (PATH, /opt/nvidia/nsight-compute/*/ncu)"; exit 1; }
"$NCU" --version | tail -1
if [ -f .carry/dense11c.ncu-rep ]; then
  "$NCU" --import .carry/dense11c.ncu-rep --page raw --csv > "$R/raw11c.csv" 2>&1
fi
timeout 300 "$NCU" --clock-control none -k 'regex:fp4_matmul' -o "$R/dense" \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section SourceCounters --import-source no \
  python3 -m pallas_kernels.profile_dense > "$R/ncu_log.txt" 2>&1
echo "ncu rc=$?"
"$NCU" --import "$R/dense.ncu-rep" --page raw --csv > "$R/raw.csv" 2>&1
"$NCU" --import "$R/dense.ncu-rep" --page source --csv --print-source sass > "$R/source.csv" 2>&1
echo "source page rc=$? lines $(wc -l < "$R/source.csv")"
grep "launch " "$R/ncu_log.txt"
python3 experiments/ncu_source_summary.py "$R" > "$R/summary.txt" 2>&1
tar czf "$OUT/session12a.tgz" -C /tmp r12a
cat "$R/summary.txt" | head -120
exit 0
