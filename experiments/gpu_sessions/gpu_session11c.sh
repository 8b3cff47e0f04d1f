#!/usr/bin/env bash
# Session 11, one H200: Nsight Compute profile of the dense FP4 decode matmul (8192 x 28672,
# NVFP4; the M = 1 and M = 64 defaults and M = 1 stream-K): is it issue-bound, as the static SASS
# count (~4.6 instructions per weight element) and session 11a's sweep suggest? Prediction: issue
# slots busy >= 60% of cycles (session 8's grouped kernel: 54%), DRAM at ~45% of peak at M = 1,
# the top stall not "long scoreboard" (memory) but "wait" / "math pipe throttle" / "not selected".
# Usage (repo root): bash experiments/gpu_sessions/gpu_session11c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r11c
export XLA_PYTHON_CLIENT_PREALLOCATE=false
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found (PATH, /opt/nvidia/nsight-compute/*/ncu)"; exit 1; }
timeout 300 "$NCU" --clock-control none -k 'regex:fp4_matmul' -o "$R/dense" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
  python3 -m pallas_kernels.profile_dense > "$R/ncu_log.txt" 2>&1
echo "ncu rc=$?"
"$NCU" --import "$R/dense.ncu-rep" --page details > "$R/ncu.txt" 2>&1
tar czf "$OUT/session11c.tgz" -C /tmp r11c
grep "launch " "$R/ncu_log.txt"
grep -E "fp4_matmul|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issued Warp|No Eligible|Issue Slots Busy|Stall|Block Limit|Grid Size|Executed Ipc" "$R/ncu.txt" | head -80
exit 0
