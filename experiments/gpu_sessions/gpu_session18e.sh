#!/usr/bin/env bash
# Ran at commit f6ce700 (session 18).
# Session 18, one H200: the Mosaic FP4-KV attention's new defaults (sub 1, lazy sum, fast_full,
# approx, no auto barriers: 18d's fastest f32-P variant, 835.5 us at 111 x 32K) against the
# Triton v6 kernel at four shapes, and its pipeline depth and split count.
# Prediction (written before the run): the default ~835 us at 111 x 32K and ~275 at 32 x 32K
# (Triton ~735 / ~240: 0.87-0.88x); steps 3 / 4 within 3%; 2x or 0.5x the splits within 5%.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session18e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r18e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 400 python3 experiments/check_mgpu_attention.py --out "$R/check" \
  --variants ";steps=3;steps=4;num_splits=8;num_splits=32;p_terms=1" > "$R/check.txt" 2>&1
echo "check rc=$?"
tar -C "$R" -czf "$OUT/r18e.tar.gz" .
grep -iE "error|Traceback" "$R/check.txt" | head -5
# (as run: an inline summary of the JSON, now gpu_prelude's mgpu_attention_summary)
mgpu_attention_summary check
exit 0
