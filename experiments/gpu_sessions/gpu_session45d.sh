#!/usr/bin/env bash
# Session 45: gpu_session45c.sh's layout comparison at the down projection's shape (768 x 2048),
# 32 / 128 / 512 tokens, run on the warm H100 right after 45c (the same prediction, in
# gpu_session45b.sh). ~35 s on an H100.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session45d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r45d
install_wheels
timeout 100 python3 experiments/check_mgpu_matmul.py --grouped --aligned --tokens 32,128,512 \
  --shapes 768x2048 --max-seconds 80 --out "$R/down" > "$R/down.txt" 2>&1
echo "rc=$?"
tar -C "$R" -czf "$OUT/r45d.tar.gz" .
grep -E "^device|^  k=" "$R/down.txt"
grep -ciE "Error|Traceback" "$R/down.txt"
exit 0
