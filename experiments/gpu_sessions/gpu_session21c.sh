#!/usr/bin/env bash
# Ran at commit 907824b (session 21).
# One H200, issue 6: the fused gate / up / SwiGLU kernel (default since 21b) at the 111 / 128
# token shapes, where it was no faster than the unfused stage at mp 16: mp 8 and mp 24 beside
# the default; then the full-depth (48-layer) 30B decode step with the fused default.
# Prediction (written before the run): mp 8 at 888 rows 5-15% slower than mp 16 (as 20d found
# unfused), mp 24 within 3%; 48 layers: FP4 at 32K 0-2% faster than 21a's 52.92 ms, at 128K
# within 1% of 21a's 49.46 ms (the stage there was 1.09x faster, but is ~5% of the step).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session21c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r21c
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 120 python3 experiments/check_mgpu_swiglu.py --out "$R/swiglu" --tokens 111,128 \
  --knobs "mp=8;mp=24" > "$R/swiglu.txt" 2>&1
echo "swiglu rc=$?"
rollout_48l full 420
tar -C "$R" -czf "$OUT/r21c.tar.gz" .
show_table swiglu
rollout_rows full
exit 0
