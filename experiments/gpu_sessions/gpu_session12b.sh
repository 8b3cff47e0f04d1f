#!/usr/bin/env bash
# Session 12, one H200: the dense FP4 decode matmul's warps-per-program and K-step knobs, never
# swept (session 11 held 4 warps and BK 256): `python -m pallas_kernels.sweep_dense --grid warps`
# (8192 x 28672 NVFP4, device time; phase 1 at M = 1, 8, phase 2 the best at M = 1, 8, 32, 64).
# Prediction (written before the run): 8 warps (half the registers per thread, up to 2x the
# resident warps) 1.05-1.15x faster at M <= 8 if the ~40% no-eligible cycles are latency that
# more warps hide; BK 512 (half the loop and address work per element) 0-5%; 2 warps slower.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session12b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r12b
timeout 570 python3 -m pallas_kernels.sweep_dense --grid warps --out "$R" --max-seconds 470 \
  > "$R/log.txt" 2>&1
echo "rc=$?"
tar czf "$OUT/session12b.tgz" -C /tmp r12b
grep "default\|phase\|Error" "$R/log.txt" | cut -c1-120
sort -t'|' -k5 -n "$R/kernels_matmul_dense_warps.md" 2>/dev/null | grep "^| " | head -25
exit 0
