#!/usr/bin/env bash
# One H200, issue 7 (session 23): the issue's attention table on the model's kernels
# (pallas_kernels/bench_attention.py rewritten this session: FP4 caches in the kv_words layout,
# the v6 kernel with its default tiling, split rule and combine; the committed table was session
# 5's v3 / v4), wall and device time, the rollout shapes first; the 128K accuracy check,
# quantize-with-hint and the append.
# Prediction (written before the run): device time, NVFP4 69-71% of the device copy at 111 x 32K
# and 27 x 128K, 67-68% at 8 x 128K, 43-64% at 8K and at 8-32 sequences of 32K (session 19);
# MXFP4 3-10% below NVFP4; our bf16 kernel 90-103%; NVFP4 >= 3x the shipped bf16 kernel from 32K
# up (session 6: shipped ~1.0 TB/s); quantize-with-hint 78-86% at 65536 x 4096, bit-identical.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session23b.sh; SKIP=attention for
# the other sections alone (23c, after the long-context reference and quantize byte fixes)
source "$(dirname "$0")/../gpu_prelude.sh" r23b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
attention_table 540 420 ${SKIP:+--skip $SKIP}  # (experiments/gpu_prelude.sh)
tar -C "$R" -czf "$OUT/r23b.tar.gz" .
attention_table_rows
exit 0
