#!/usr/bin/env bash
# Session 45, the last few device minutes: the smallest slice of gpu_session45b.sh (its
# prediction applies): rows vs aligned x layout at 32 / 128 tokens (2048 x 768), then weight
# tiles per program at 512 tokens. ~2.5 min on an H100.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session45c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r45c
install_wheels
timeout 110 python3 experiments/check_mgpu_matmul.py --grouped --aligned --tokens 32,128 \
  --shapes 2048x768 --max-seconds 90 --out "$R/layouts" > "$R/layouts.txt" 2>&1
echo "layouts rc=$?"
tar -C "$R" -czf "$OUT/r45c.tar.gz" .
timeout 80 python3 experiments/check_mgpu_matmul.py --grouped --tokens 512 --tiles 2,4 \
  --shapes 2048x768 --max-seconds 60 --out "$R/nt512" > "$R/nt512.txt" 2>&1
echo "nt512 rc=$?"
tar -C "$R" -czf "$OUT/r45c.tar.gz" .
cat "$R"/layouts.txt "$R"/nt512.txt | grep -E "^device|^  k="
grep -hiE "Error|Traceback" "$R"/*.txt | sort | uniq -c | head -6
exit 0
