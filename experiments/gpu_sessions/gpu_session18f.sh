#!/usr/bin/env bash
# Ran at commit a4ef8f4 (session 18).
# Session 18, one H200: the Mosaic FP4-KV attention's split count. 18e: at 32 x 8K 8 splits
# (16 steps each) took 75.0 us against the default 64 splits' 100.3 (Triton 78.3); at 111 x 32K
# 8 splits 831.5 vs 16 splits 836.5; at 32 x 32K 32 splits 260.0 vs 64 splits 275.8.
# Prediction (written before the run): the best split count gives each program >= 16 steps with
# >= ~1000 programs: 32 x 8K best at 8, 32 x 32K at 16-32, 111 x 32K at 4-8, 8 x 128K at 32-64.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session18f.sh
source "$(dirname "$0")/../gpu_prelude.sh" r18f
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 300 python3 experiments/check_mgpu_attention.py --out "$R/check" \
  --shapes 32:8192,32:32768,111:32768,8:131072 \
  --variants "num_splits=2;num_splits=4;num_splits=8;num_splits=16;num_splits=32;num_splits=64" \
  > "$R/check.txt" 2>&1
echo "check rc=$?"
tar -C "$R" -czf "$OUT/r18f.tar.gz" .
grep -iE "error|Traceback" "$R/check.txt" | head -5
# (as run: an inline summary of the JSON, now gpu_prelude's mgpu_attention_summary)
mgpu_attention_summary check
exit 0
