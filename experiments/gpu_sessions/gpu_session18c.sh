#!/usr/bin/env bash
# Ran at commit 0c0d817 (session 18).
# Session 18, one H200: why the Mosaic FP4-KV attention prototype is slow. 18b: fewer softmax
# reductions per byte helped little (sub 2 + lazy sum 987 us vs 1091; Triton 735 at 111 x 32K),
# so the step's limit is elsewhere. Suspect: wgmma at N = 8 (the 8 query heads) runs far below
# the tensor pipe's peak, and P's hi + lo terms double the O^T wgmmas.
# Prediction (written before the run): hi alone (p_terms 1) ~20% faster if the wgmmas bind
# (relerr ~1e-3); ncu: tensor pipe busy > 50%, occupancy <= 4 CTAs per SM by registers.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session18c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r18c
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 150 python3 experiments/check_mgpu_attention.py --out "$R/check" --no-triton \
  --shapes 32:32768,111:32768 --variants 2:1:2,2:1:2:1,1:1:2:1 > "$R/check.txt" 2>&1
echo "check rc=$?"
ncu_source_profile "$R/ncu" body experiments.run_mgpu_attention_once
tar -C "$R" --exclude=raw.csv --exclude=source.csv -czf "$OUT/r18c.tar.gz" .
show_table check
grep -E "Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Duration|DRAM Throughput|Issue Slots Busy|Executed Ipc A" "$R/ncu/details.txt" | head -20
head -60 "$R/ncu/summary.txt"
exit 0
