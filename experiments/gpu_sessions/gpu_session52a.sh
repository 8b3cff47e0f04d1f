#!/usr/bin/env bash
# Issue 6, grouped kernel at 512 tokens: which stream sets the time. Session 52 (gpu_session51b.sh,
# H100, kernel device time) split the 512-token kernel with the timing probes: 2048 x 768 full
# 63.3 us, no_decode 59.2, stream_only 53.4 (the TMA pipeline alone: 68.8% of copy per call);
# 768 x 2048 65.5 / 58.4 / 50.1; at 128 tokens 47.4 / 45.2 / 43.7. So the stream alone is 76-84%
# of the kernel at 512 tokens, and it grows 9.7 us from 128 to 512 tokens with the same weights.
# The new probes `weights_only` (codes and scales streamed, no x) and `x_only` (x alone; x is
# re-read from L2 by every program of an expert) split the stream (`fp4_matmul_mgpu.STREAM_PROBES`;
# CPU test: their pipelines copy only their streams, one weight and the pair).
# Prediction (before the run), 512 tokens, H100: weights_only 43-46 us at both shapes (the
# 128-token stream: the same weight bytes); x_only 25-40 at 2048 x 768 (12 programs an expert
# each read its experts' x rows, ~36 rows padded x 4 KB: ~230 MB from L2) and 12-25 at 768 x 2048
# (nt 2: 16 programs x ~36 x 1.5 KB: ~110 MB); stream_only as in session 52.
# Rule: weights_only within 3 us of the 128-token stream_only and stream_only - weights_only
# >= 6 us at 512 tokens -> the x re-reads cost the 512-token stream its time: next, one x read
# per cluster of an expert's programs (TMA multicast). weights_only >= stream_only - 2 us ->
# the weight stream itself slows at 512 tokens (shorter pipelines: more chunks a program, each
# restarting its pipeline) and x is not the lever.
# On an H200 it then runs gpu_session51a.sh's H200 part (late_vt at the short splits, the
# grouped table), with the probes at 512 tokens only.
# ~5 min on an H100, ~9 on an H200. Usage (repo root, with .whl/ carried):
#   [QUICK=1] bash experiments/gpu_sessions/gpu_session52a.sh
# QUICK=1 (~2.5 min, for a call with little device time left): the probes at 512 tokens only,
# 110 s of timing, nothing else.
source "$(dirname "$0")/../gpu_prelude.sh" r52a
R="$OUT/r52a"; mkdir -p "$R"
install_wheels
h200=0; grep -q H200 <<<"$(nvidia-smi -L)" && h200=1
tokens=512,128; [ $h200 = 1 ] && tokens=512
secs=270; [ "${QUICK:-0}" = 1 ] && tokens=512 secs=110
timeout $((secs + 20)) python3 experiments/check_mgpu_matmul.py --grouped --tokens "$tokens" \
  --diag stream_only,weights_only,x_only --max-seconds $secs --out "$R/probes" \
  > "$R/probes.txt" 2>&1
echo "probes rc=$?"; grep -iE "error|fail" "$R/probes.txt" | head -3
grouped_summary "$R/probes/kernels_matmul_mgpu_grouped.json" | grep -v triton
[ $h200 = 1 ] && [ "${QUICK:-0}" != 1 ] || exit 0
TOKENS=none bash "$(dirname "$0")/gpu_session51a.sh"
exit 0
