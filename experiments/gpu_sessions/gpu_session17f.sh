#!/usr/bin/env bash
# Ran at commit 0b36678 (session 17).
# Session 17, one H200: the grouped kernel after the review's refactor (program_plan shared with
# the CPU emulation, rows clipped to M): exactness at the 30B decode shapes and the call times.
# Prediction (written before the run): relerr as 17c (6.0e-5 / 4.1e-5), times within ~2% of
# 17c's (36.3 / 44.5 / 40.1 / 48.6 us): the clip is two scalar ops per program.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session17f.sh
source "$(dirname "$0")/../gpu_prelude.sh" r17f
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 150 python3 experiments/check_mgpu_matmul.py --grouped --out "$R/grouped" \
  > "$R/grouped.txt" 2>&1; echo "grouped rc=$?"
tar -C "$R" -czf "$OUT/r17f.tar.gz" .
# (as run: inline, now gpu_prelude's show_table)
show_table grouped
exit 0
