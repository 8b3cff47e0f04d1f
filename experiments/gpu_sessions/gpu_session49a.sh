#!/usr/bin/env bash
# Session 49, after the H100 calls of this session (48a, 48b, the late_vt shapes):
# 1. issue 7: NVFP4 f32 P with late_vt forced on and off at the shapes whose splits hold 256
#    cache rows (8 x 8K, 8 x 32K, 32 x 8K: late_vt 2.7-7.7% slower on the H100) and at 1024-row
#    shapes (8 x 128K: 1.6% slower on the H100; 32 x 32K, 128 x 8K: 1.4-1.7% faster), the
#    measurements behind `attention_triton.LATE_VT_MIN_ROWS` (1024), never taken on an H200;
# 2. issue 6: the grouped call at 512 tokens with tk 128 and 2 / 3 stages (half the x stage of
#    tk 256: the 512-token profile on the H100 showed 2 programs per SM, limited by registers
#    (253) and shared memory alike, 12% achieved occupancy, long-scoreboard stalls on the TMA
#    waits), against the default tk 256 x 2 stages.
# Prediction (before the run): (1) on an H200 as on the H100, late_vt 2-8% slower at 256 rows a
# split and 0-2% faster at 1024 (H200 session 48: +1.1-2.0% at 111 x 32K / 27 x 128K); rule:
# keep LATE_VT_MIN_ROWS = 1024 unless late_vt is > 1.5% faster at a 256-row shape or > 1.5%
# slower at two 1024-row shapes. (2) tk 128 x 2 stages within +-5% of tk 256 x 2 stages
# (registers still hold 2 programs per SM), 3 stages 0-5% faster than 2 at tk 128; rule: a
# config >= 5% faster on both expert shapes with maxdiff 0 becomes the mp-56 default after the
# fused pair is timed with it. The PTX / ptxas dumps of that call say where the registers go
# (253 a thread at tk 256 in 48b's profile).
# ~3 min on an H200 or an H100 (128 x 128K does not fit an H100 and is not run).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session49a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r49a
install_wheels
timeout 120 python3 experiments/check_mgpu_attention.py --no-mosaic --fmt nvfp4 \
  --shapes 8:8192,8:32768,32:8192,8:131072,32:32768,128:8192 \
  --triton-variants "late_vt=1;late_vt=0" --out "$R/late_vt" > "$R/late_vt.txt" 2>&1
echo "late_vt rc=$?"
python3 experiments/check_mgpu_attention.py --summary "$R/late_vt/kernels_attention_mgpu.json"
tar -C "$R" -czf "$OUT/r49a.tar.gz" .
mkdir -p "$R/ptx"
MOSAIC_GPU_DUMP_PTX=1 MOSAIC_GPU_DUMP_PTXAS=1 MOSAIC_GPU_DUMP_TO="$R/ptx" timeout 150 \
  python3 experiments/check_mgpu_matmul.py --grouped --tokens 512 \
  --knobs 56:256:2,56:128:2,56:128:3 --out "$R/tk" > "$R/tk.txt" 2>&1
echo "tk rc=$?"
grep -E "^device" "$R/tk.txt"; grep -iE "error|fail" "$R/tk.txt" | head -3
grouped_summary "$R/tk/kernels_matmul_mgpu_grouped.json"
ptxas_registers "$R/ptx" ptx  # (the PTX kept: it assembles offline too)
tar -C "$R" -czf "$OUT/r49a.tar.gz" .
exit 0
