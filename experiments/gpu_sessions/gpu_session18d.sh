#!/usr/bin/env bash
# Ran at commit 3f8b242 (session 18).
# Session 18, one H200: the Mosaic FP4-KV attention after 18c's ncu (sub 2 + lazy sum: 195
# registers, 2 CTAs per SM, issue slots 59% busy, ALU pipe 59%; 37 warp instructions per cache
# row against the design's ~18). Changes: i32 instead of 64-bit index math in the inline pieces
# (all variants), fast_full (full steps skip the row masks), approx_math, no auto barriers.
# Prediction (written before the run), 111 x 32K: sub2L 987 -> ~940 us (i32); fast_full ~-8%
# (~870); approx ~0; no_auto_barriers ~-3%; all: ~840 us (Triton ~735); hi only ~680.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session18d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r18d
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
F="sub=2,lazy_sum=1,fast_full=1"
timeout 130 python3 experiments/debug_mgpu_attention.py \
  --variants "sub=1;$F;$F,approx=1,no_auto_barriers=1" > "$R/debug.txt" 2>&1
echo "debug rc=$?"; cut -c1-200 "$R/debug.txt" | grep -v "best row" | tail -40
timeout 330 python3 experiments/check_mgpu_attention.py --out "$R/check" \
  --shapes 32:32768,111:32768 --variants "sub=2,lazy_sum=1;$F;$F,approx=1;$F,no_auto_barriers=1;$F,approx=1,no_auto_barriers=1;$F,approx=1,no_auto_barriers=1,p_terms=1;sub=1,lazy_sum=1,fast_full=1,approx=1,no_auto_barriers=1" \
  > "$R/check.txt" 2>&1
echo "check rc=$?"
tar -C "$R" -czf "$OUT/r18d.tar.gz" .
grep -iE "error|Traceback" "$R/check.txt" | head -5
# (as run: an inline summary of the JSON, now gpu_prelude's mgpu_attention_summary)
mgpu_attention_summary check
exit 0
