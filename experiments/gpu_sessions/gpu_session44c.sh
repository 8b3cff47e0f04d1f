#!/usr/bin/env bash
# Session 44, for a device budget of ~5 minutes: on an H200 only (an H100 exits at once),
# issue 7's late_vt A/B (gpu_session39d.sh, 60 s per format; decision rule in
# pallas_kernels/NOTES.md: turn LATE_VT on for NVFP4 if f32 P gains >= 1.5%), then the dense
# library picks at M = 32 / 48 / 64 (8192 x 28672; 43e's prediction for an H200: M = 64 68-74
# us against session 28's 73.7-74.1, M = 48 55-62 against 65.8).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session44c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r44c
if ! grep -q H200 <<<"$(nvidia-smi -L)"; then echo "not an H200: nothing run"; exit 0; fi
install_wheels
LIMIT=60 OUT=/tmp/r39d_out bash "$REPO/experiments/gpu_sessions/gpu_session39d.sh"
tar -C /tmp/r39d_out -czf "$OUT/r39d.tar.gz" .
timeout 100 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 32,48,64 \
  --splits auto --baselines "" --max-seconds 70 --out "$R/new" > "$R/new.txt" 2>&1
echo "new rc=$?"
tar -C "$R" -czf "$OUT/r44c.tar.gz" .
dense_summary new
exit 0
