#!/usr/bin/env bash
# Session 43 (issue 6), after 43b: the two best 2-tile M = 64 configs of 43b's sweep and the
# default, at M = 48 and 64, twice (run1, run2), 8192 x 28672, device time. (Run as this
# command line on a warm H100; committed as a script afterwards.)
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session43c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r43c
install_wheels
for i in 1 2; do
  timeout 150 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 48,64 \
    --tk 128,256 --steps 2,3 --splits 1 --tiles 2 --baselines "" --max-seconds 120 \
    --out "$R/run$i" > "$R/run$i.txt" 2>&1
  echo "run$i rc=$?"
done
tar -C "$R" -czf "$OUT/r43c.tar.gz" .
dense_summary run1 run2
