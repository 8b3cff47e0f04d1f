#!/usr/bin/env bash
# Ran at commit 2b62318 (session 17).
# Session 17, one H200: Nsight Compute on the grouped Mosaic FP4 kernel (direct store) at the 30B
# decode shapes (888 routed rows; 2048 x 768, then 768 x 2048). Question: what limits the
# kernel alone at ~67% of copy? Each CTA (expert, 64 weight rows) reads its chunk's x tile
# (mp + 8 = 24 rows x K bf16 = 96 KB at K = 2048) besides its 72 KB of weights, and the x
# tile is re-read from L2 by all N / 64 CTAs of the expert: ~1.4x the weight bytes again
# through L2 -> shared memory.
# Prediction (written before the run): DRAM throughput ~65-70% of peak, L2 throughput higher
# than DRAM's (x re-reads), issue slots busy < 60%; long-scoreboard / barrier stalls on the
# pipeline's waits rather than ALU throttling (the dense kernel's limit).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session17e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r17e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
ncu_source_profile "$R/ncu" body experiments.run_mgpu_grouped_once
tar -C "$R" --exclude=prof.ncu-rep -czf "$OUT/r17e.tar.gz" .
grep -E "Duration|Registers Per|Issue Slots Busy|Achieved Occupancy|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Memory Throughput|Block Limit|Dynamic Shared|Theoretical Occ" \
  "$R/ncu/details.txt" | head -60
head -40 "$R/ncu/summary.txt"
exit 0
