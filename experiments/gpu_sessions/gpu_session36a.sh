#!/usr/bin/env bash
# Session 36, one GPU (an H100 came; an H200 could not be started). Issue 7, the MXFP4 scale's
# NaN path, second A/B. Session 36's first call (gpu_session35a.sh with shapes shrunk to fit
# 80 GB: 55 x 32K, 13 x 128K) found on the H100: bf16 P (32, 1, 2) 4.8% faster with `f + (f - f)`
# at 55 x 32K (390.6 -> 372.2 us) and equal at 13 x 128K, but f32 P at its (64, 1, 2) default
# 5% SLOWER (416 -> 438 us, 368 -> 385 us), and f32 P (32, 1, 2) with fadd 407.9 / 378.6 us.
# This call: both paths at f32 P (64, 1, 2) and (32, 1, 2) and bf16 P (32, 1, 2), three shapes.
# Prediction: the f32-P slowdown at 64-row tiles repeats (255 registers: the two FADDs' live
# values reorder the loop); at 32-row tiles fadd is 0-3% faster than select; bf16 P fadd 0-5%.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session36a.sh (SH=B:S,... to override)
source "$(dirname "$0")/../gpu_prelude.sh" r36a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
# The issue's shapes. (Session 36's H100 calls used 55 x 32K, 27 x 64K, 13 x 128K: the check's
# eager KV word conversion then needed 30 GB at once; kv_layout.to_words is jitted since.)
SH=${SH:-111:32768,27:131072}; echo "shapes $SH"
timeout 400 python3 experiments/ab_mxfp4_scale_path.py --out "$R/ab" --shapes $SH \
  --triton-variants ";block_k=32,num_stages=2;bf16_p=1" > "$R/ab.txt" 2>&1
echo "ab rc=$?"; grep -iE "error|Traceback" "$R/ab.txt" | head -5
tar -C "$R" -czf "$OUT/r36a.tar.gz" .
for n in select fadd select2 fadd2; do echo "== $n"; mgpu_attention_summary "ab/$n"; done
exit 0
