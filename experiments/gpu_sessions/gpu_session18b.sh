#!/usr/bin/env bash
# Ran at commit 51af089 (session 18).
# Session 18, one H200: the Mosaic FP4-KV attention prototype's step shapes. 18a: exact (relerr
# 1.26e-5, Triton 1.11e-5) but 1091 vs 735 us at 111 x 32K (47% vs 70% of copy): one 64-row
# step per softmax costs 2 cross-warp reductions (4 warpgroup barriers) and a serial chain of
# decode -> wgmma -> wait -> softmax -> P^T stores -> decode -> wgmma -> wait.
# Prediction (written before the run): the lazy sum (1 reduction per step) ~10% faster; 128-row
# steps (sub 2) another ~20% (half the reductions, waits and barriers per byte): ~800 us at
# 111 x 32K; sub 4 about the same as sub 2 (registers); steps 3 within 3% of steps 2.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session18b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r18b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 130 python3 experiments/debug_mgpu_attention.py --variants 1:1,2:1,2:0,4:1 \
  > "$R/debug.txt" 2>&1
echo "debug rc=$?"; cut -c1-200 "$R/debug.txt" | grep -v "best row" | tail -40
timeout 300 python3 experiments/check_mgpu_attention.py --out "$R/check" \
  --shapes 32:8192,32:32768,111:32768 --variants 1:0:2,1:1:2,2:1:2,2:1:3,4:1:2 \
  > "$R/check.txt" 2>&1
echo "check rc=$?"
tar -C "$R" -czf "$OUT/r18b.tar.gz" .
grep -v "^|" "$R/check.txt" | cut -c1-300 | grep -iv "relerr" | tail -8
show_table check
exit 0
