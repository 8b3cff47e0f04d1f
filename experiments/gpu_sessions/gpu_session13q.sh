#!/usr/bin/env bash
# Session 13, one H200: quantize-with-hint v5 against the v4 default (issue 7). v4's layout put
# each 16-element NVFP4 block (32-element MXFP4 block) over 2 (4) threads, so every per-block
# step -- the block-max shuffle, the E4M3 scale, the IEEE reciprocal -- ran in each of them. v5
# loads a block's eight-element parts as separate [block_m, chunk / bs, 8] tiles held by one
# thread. Static SASS per element (quantize_compilecheck, K = 4096): NVFP4 row 23.67 -> 21.14,
# NVFP4 tensor 22.47 -> 20.72, MXFP4 23.00 -> 19.03 (chunk 2048). Each warp-wide load now reads
# 16 of every 32 bytes (the other part's load reads the rest, from L1).
# Prediction (written before the run): NVFP4 row is issue-bound (12h profile: not_selected
# 1.08, selected 1.00 cycles per issue), so 255 us scales with the count to 230-245 us
# (68-73% of copy, target >= 70%); NVFP4 tensor and MXFP4 stall on memory already (long
# scoreboard): 0-6% faster (213-227 us); every row bit-identical.
# `python -m pallas_kernels.sweep_quantize --grid v5`.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session13q.sh
source "$(dirname "$0")/../gpu_prelude.sh" r13q
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 330 python3 -m pallas_kernels.sweep_quantize --grid v5 --out "$R" --max-seconds 240 \
  > "$R/log.txt" 2>&1
echo "sweep rc=$?"
tar czf "$OUT/session13q.tgz" -C /tmp r13q
grep -E "phase|Error|identical=False" "$R/log.txt" | cut -c1-140 | head -10
grep "^| 2 " "$R/kernels_quantize_v5.md" | head -30
exit 0
