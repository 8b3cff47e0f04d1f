#!/usr/bin/env bash
# Ran at commit 7244250 (session 19).
# One H200: the grouped Mosaic FP4 expert kernel on x without the wrapper's read pad
# (fp4_grouped_matmul_mgpu(x_pad=False): the last chunks' read-ahead rows past M come from TMA's
# out-of-bounds fill instead of a padded copy of x; they only reach accumulator columns that are
# never stored). Session 17: the pad and cumsum are 2.9-5.1 us of the 36-49 us calls.
# Prediction (written before the run): the same outputs (max diff 0 against the padded call);
# calls ~2-4 us faster at the four decode shapes; the kernel alone unchanged (within 2%).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session19g.sh
source "$(dirname "$0")/../gpu_prelude.sh" r19g
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 115 python3 experiments/check_mgpu_matmul.py --grouped --no-x-pad --out "$R/grouped" \
  > "$R/grouped.txt" 2>&1; echo "grouped rc=$?"
tar -C "$R" -czf "$OUT/r19g.tar.gz" .
grep -iE "error|Traceback" "$R/grouped.txt" | head -5
grep -E "^  " "$R/grouped.txt" | cut -c1-600 | tail -8
exit 0
