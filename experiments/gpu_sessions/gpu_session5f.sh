#!/usr/bin/env bash
# Session-5 GPU call F on one H200: Nsight Compute profile of one launch of each grouped expert
# matmul (NVFP4 and BF16, persistent and one program per tile; 2048 x 768, 32 tokens x top-8 of
# 128 experts): where the FP4 kernel's time goes (stall reasons, occupancy, memory throughput).
# Session 5's run (then without the two fixes below) profiled 3 of the 4 launches in 220 s and
# lost them all to the timeout: JAX had preallocated 75% of the GPU, and ncu saved and restored
# that memory for every one of its 18 replay passes; ncu prints its results only at exit
# (log: experiments/results/gpu/ncu_grouped_s5_attempt.txt). Now: no preallocation, and the report
# goes to a file as it is taken (-o), printed with --import afterwards. Not yet run this way.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session5f.sh
source "$(dirname "$0")/../gpu_prelude.sh" r5f
export XLA_PYTHON_CLIENT_PREALLOCATE=false
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found (PATH, /opt/nvidia/nsight-compute/*/ncu)"; exit 1; }
timeout 220 "$NCU" --clock-control none -k 'regex:fp4_matmul|bf16_grouped' -o "$R/grouped" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis \
  python3 -m pallas_kernels.profile_grouped > "$R/ncu_log.txt" 2>&1
"$NCU" --import "$R/grouped.ncu-rep" --page details > "$R/ncu.txt" 2>&1
tar czf "$OUT/session5f.tgz" -C /tmp r5f
grep -E "launch [0-9]|==PROF==|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|Block Limit|Grid Size|Shared Memory Config" "$R/ncu.txt" | head -90
exit 0
