#!/usr/bin/env bash
# One H200, issues 6 and 7 (session 23): the full-depth (48-layer) 30B decode step with every
# default as of session 22 (the aligned-layout bookkeeping kernel and the quantizer's values
# output had not been in a 48-layer run), now with bench_rollout's byte-ceiling table; then the
# grouped expert calls with the bookkeeping kernel in them (session 21's call numbers had the
# XLA bookkeeping): the down projection (768 x 2048) and the fused gate / up / SwiGLU.
# Prediction (written before the run): FP4 at 32K 49.5-50.0 ms (22a 50.65; 22f-g's bookkeeping
# kernel -2.1% of the 4-layer step, the values output ~0.2 ms), 2.98-3.05x; at 128K 46.9-47.3 ms
# (22a 47.69), 2.71-2.75x; byte ceiling ~4.15x / ~3.60x. The down projection call 2-3 us faster
# than 21f (37.8 / 45.6 us at 216 / 888 rows) -> 59-61% of copy; the fused gate / up call
# 66-69% (21d: 64.6-66.4%).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session23a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r23a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
rollout_48l full 330
timeout 90 python3 experiments/check_mgpu_matmul.py --grouped --shapes 768x2048 \
  --out "$R/grouped" > "$R/grouped.txt" 2>&1
echo "grouped rc=$?"
timeout 75 python3 experiments/check_mgpu_swiglu.py --out "$R/swiglu" --tokens 27,111 \
  > "$R/swiglu.txt" 2>&1
echo "swiglu rc=$?"
tar -C "$R" -czf "$OUT/r23a.tar.gz" .
rollout_rows full
sed -n '/## Byte ceiling/,/^$/p;/^| context | GB per/,/^$/p' "$R/full/rollout_throughput.md" | head -8
grep -hE "^ *(k|tokens)=" "$R/grouped.txt" "$R/swiglu.txt" | cut -c1-700
grep -hiE "error|Traceback" "$R/grouped.txt" "$R/swiglu.txt" | head -6
exit 0
