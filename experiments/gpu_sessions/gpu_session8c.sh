#!/usr/bin/env bash
# Session-8 GPU call C on one H200 (issues 6 and 7):
#   1. FP4 grouped matmul knob sweep in device time (pallas_kernels/sweep_grouped.py): call A's
#      Nsight Compute profile showed the default at 1.84 active warps per scheduler (82 KB of
#      shared memory per program), 0.54 issued per cycle, 39% of DRAM bandwidth. Prediction:
#      fewer stages / more programs per SM raise the issue rate; >= 1.2x at 888 rows if so.
#   2. Nsight Compute profile of the decode-attention kernels (pallas_kernels/profile_attention,
#      B=32 x 32K): is the NVFP4 v4 kernel issue-bound (time ~ instructions per row) or
#      latency-bound (few eligible warps)? Prediction: issued per scheduler >= 0.7 (issue-bound).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session8c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r8c
timeout 300 python3 -m pallas_kernels.sweep_grouped --out "$R/sweep" --max-seconds 260 \
  > "$R/sweep.txt" 2>&1
export XLA_PYTHON_CLIENT_PREALLOCATE=false
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 200 "$NCU" --clock-control none -k 'regex:decode_attention' -o "$R/attn" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
  python3 -m pallas_kernels.profile_attention > "$R/ncu_log.txt" 2>&1
"$NCU" --import "$R/attn.ncu-rep" --page details > "$R/ncu.txt" 2>&1
"$NCU" --import "$R/attn.ncu-rep" --page raw --csv > "$R/ncu_raw.csv" 2>&1
tar czf "$OUT/session8c.tgz" -C /tmp r8c
grep -E "^  \(|phase|copy" "$R/sweep.txt" | cut -c1-120 | tail -45
grep -E "launch [0-9]|decode_attention|Duration|DRAM Throughput|Registers Per|Issued Warp|No Eligible|Eligible Warps|Active Warps Per|Warp Cycles Per Issued|Achieved Occupancy|Grid Size" "$R/ncu.txt" | head -60
exit 0
