#!/usr/bin/env bash
# Ran at commit 8bb1c47 (session 20).
# One H200, issue 6: the new grouped defaults in the 4-layer 30B FP4 decode step, side by side:
# the aligned x layout (default now; mp 8 at 128K's 216 routed rows, mp 16 at 32K's 888) against
# the rows layout, at 32K and 128K.
# Prediction (written before the run): 32K aligned 1.5-2.5% faster (20d: 4.48 vs 4.57 ms);
# 128K aligned with mp 8 1.5-3% faster (12 expert calls of ~35 us, kernel 9-14% faster).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session20e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r20e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
for lay in aligned rows; do
  rollout_4l "step_$lay" 150 fp4 32768,131072 --steps 16 --grouped_x_layout $lay
done
tar -C "$R" -czf "$OUT/r20e.tar.gz" .
rollout_rows step_aligned step_rows
exit 0
