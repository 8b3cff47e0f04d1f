#!/usr/bin/env bash
# One H200, issue 6 (session 23): the down projection's K step and stages, never swept (the
# grouped --sweep skipped K = 768): 768 x 2048 at 888 rows (111 tokens), mp 16, nt 2, tk 128 /
# 192 / 256 / 384 with 2-4 stages (check_mgpu_matmul.py --grouped --sweep, DOWN_KNOBS).
# Prediction (written before the run): the default (tk 256, 2 stages, 3 steps per chunk) kernel
# ~38 us; tk 384 x 2 stages (both steps in flight at once) 0-5% faster; tk 128 with 3-4 stages
# within +-5%; no configuration more than 5% faster.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session23g.sh
source "$(dirname "$0")/../gpu_prelude.sh" r23g
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 240 python3 experiments/check_mgpu_matmul.py --grouped --sweep --shapes 768x2048 \
  --out "$R/down" > "$R/down.txt" 2>&1
echo "down rc=$?"
tar -C "$R" -czf "$OUT/r23g.tar.gz" .
grep -hE "^ *k=" "$R/down.txt" | tr ' ' '\n' | grep -E "kernel_us|_us=|pct_copy|relerr" | paste -sd' ' | fold -w 1000
grep -hiE "error|Traceback" "$R/down.txt" | head -6
exit 0
