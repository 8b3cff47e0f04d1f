#!/usr/bin/env bash
# Session 43 (issue 6), after 43c: tk 128 / 256 x 2 / 3 stages with 2 tiles and 1 split at
# M = 33 / 40 / 56 / 64, at 8192 x 28672 and 2048 x 8192, device time. (Run as this command
# line on a warm H100; committed as a script afterwards.)
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session43d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r43d
install_wheels
timeout 200 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672,2048x8192 \
  --ms 33,40,56,64 --tk 128,256 --steps 2,3 --splits 1 --tiles 2 --baselines "" \
  --max-seconds 180 --out "$R/run1" > "$R/run1.txt" 2>&1
echo "rc=$?"
tar -C "$R" -czf "$OUT/r43d.tar.gz" .
dense_summary run1
