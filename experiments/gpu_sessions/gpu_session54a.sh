#!/usr/bin/env bash
# Ran in session 55 (H100, results/gpu/session55/54a): the rules failed; tiled weights
# (tile_mgpu, MgpuWeights.tile_k, --tiled, tiled=1) were removed after the run (commit 5915013
# has them), so this script no longer runs as written.
# Issue 6, the grouped kernel's weight stream: does its DRAM access pattern cost time? The kernel
# reads a (64-row tile, K step) code box as 64 rows of tk / 2 = 128 bytes at a stride of K / 2
# (1 KB at 2048 x 768, 384 B at 768 x 2048), the scale box as 4 rows of 256 B at a stride of
# 4 N; a program reads the rest of each row in its later K steps, microseconds later. Session 53
# (H100): the weight stream alone at the kernel's occupancy (weights_only:2) reads 85% of copy
# (42.1 / 42.6 us at 128 tokens), and at 128 tokens the kernel is its stream (45.5 / 47.4 us);
# the FP4-KV attention, whose tiles are contiguous, reads 92-93% of an H100's copy (session 50).
# `fp4_matmul_mgpu.tile_mgpu` (CPU-tested: the boxes, the round trip, the lowering) re-lays the
# weights so that each box is one contiguous block (8 KB of codes, 1 KB of scales at tk 256);
# both kernels take such weights (`MgpuWeights.tile_k`). The timed columns use weights tiled
# once before timing (`--tiled`), and so does the edge check (variant `tiled=1`).
# Prediction (before the run), H100, kernel device time: tiled weights_only:2 3-8% faster at
# both token counts; the tiled kernel 2-6% faster at 128 tokens (stream-bound), 0-4% at 512
# (11-16 us of compute over the stream there); the pair 0-4%. Bit for bit equal to the default.
# Rule: the edge check passes and the tiled kernel is >= 3% faster at 128 tokens on both shapes
# and not slower at 512 or the pair -> the expert weights get the tiled layout at prepare time
# (sync_weights) and it becomes the default; otherwise the knob is removed.
# The dense kernel reads the same boxes (K / 2 = 4 KB apart at 8192 x 28672): tiled weights
# at M = 1 / 8 (82.0 / 79.5% of an H100's copy, session 44). Prediction: 2-6% faster kernels.
# Rule: >= 3% at both, maxdiff_t1 0 -> the same prepare-time layout for the dense weights.
# ~9 min on an H100. Usage (repo root, with .whl/ carried):
#   [QUICK=1] bash experiments/gpu_sessions/gpu_session54a.sh
# QUICK=1 (~3 min, for a call with little device time left): no edge check and no pair; the
# tiled columns at 128 tokens with weights_only:2, and at 512 tokens (maxdiff against the default).
# QUICK=2 (~2 min): the tiled kernel beside the default at 2048 x 768 only, 128 and 512 tokens.
source "$(dirname "$0")/../gpu_prelude.sh" r54a
R="$OUT/r54a"; mkdir -p "$R"
install_wheels
if [ "${QUICK:-0}" = 2 ]; then  # (~2 min: 2048 x 768 only, the kernel tiled and untiled)
  grouped_check q128 128 40 --shapes 2048x768 --tiled --baselines ""
  grouped_check q512 512 40 --shapes 2048x768 --tiled --baselines ""
  exit 0
fi
if [ "${QUICK:-0}" = 1 ]; then
  grouped_check t128 128 70 --tiled --diag weights_only:2 --baselines ""
  grouped_check t512 512 60 --tiled --baselines ""
  exit 0
fi
timeout 120 python3 experiments/check_mgpu_grouped_edge.py --shapes 2048x768,768x2048 \
  --repeats 2 --pair --variants "tiled=1" > "$R/edge.txt" 2>&1
echo "edge rc=$?"; grep -E "FAIL|rror" "$R/edge.txt" | head -5; tail -1 "$R/edge.txt"
grouped_check t128 128 90 --tiled --diag weights_only:2
timeout 90 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 1,8 \
  --splits auto --tiled --breakdown --baselines "" --max-seconds 60 --out "$R/dense" \
  > "$R/dense.txt" 2>&1
echo "dense rc=$?"; grep -iE "error|fail" "$R/dense.txt" | head -3
python3 experiments/check_mgpu_matmul.py --summary "$R/dense/kernels_matmul_mgpu.json"
python3 - "$R/dense/kernels_matmul_mgpu.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(f"M={r['m']} tiled={r['tiled']} kernel {r.get('kernel_us', float('nan')):.2f} us "
          f"({r.get('kernel_pct_copy', float('nan')):.1f}%) maxdiff_t1 {r['maxdiff_t1']}")
PY
grouped_check t512 512 100 --tiled --diag weights_only:2
timeout 100 python3 experiments/check_mgpu_swiglu.py --tokens 512 --out "$R/pair" \
  --knobs "tiled=1" > "$R/pair.txt" 2>&1
echo "pair rc=$?"; grep -oE " fused(_tiled1)?_(maxdiff|kernel_us)=[0-9.e-]+" "$R/pair.txt"
exit 0
