#!/usr/bin/env bash
# Issue 6, grouped kernel at 512 tokens: which stream sets the time. Session 52 (gpu_session51b.sh,
# H100, kernel device time) split the 512-token kernel with the timing probes: 2048 x 768 full
# 63.3 us, no_decode 59.2, stream_only 53.4 (the TMA pipeline alone: 68.8% of copy per call);
# 768 x 2048 65.5 / 58.4 / 50.1; at 128 tokens 47.4 / 45.2 / 43.7. So the stream alone is 76-84%
# of the kernel at 512 tokens, and it grows 9.7 us from 128 to 512 tokens with the same weights
# (each expert is one chunk at both token counts: max group 47 < mp 56, 15 < 16).
# New probes (`fp4_matmul_mgpu.STREAM_PROBES`, CPU-tested): `weights_only` (codes and scales,
# no x) and `x_only` (x alone; every program of an expert re-reads its x rows from L2), and a
# cap `probe:2` (`_DIAG_CTAS`): a shared-memory pad so an SM holds 2 of the probe's CTAs, as it
# holds 2 of the kernel's (245-255 registers). Without it the probe, with few registers, fits
# 3 CTAs an SM at 512 tokens (mp 56 stages) and 5 at 128 (mp 16): the session-52 stream_only
# numbers had more bytes in flight than the kernel has, more so at 128 tokens.
# Prediction (before the run), H100, 512 tokens: stream_only:2 55-60 us (fewer CTAs than
# uncapped: slower) at both shapes; weights_only:2 44-48 (the 128-token stream's weight bytes);
# x_only:2 25-40 at 2048 x 768 (~230 MB of x tiles from L2) and 12-25 at 768 x 2048 (nt 2,
# ~110 MB). 128 tokens: stream_only:2 45-48 (uncapped 43.7).
# Rule: stream_only:2 within 3 us of the full kernel (63.3 / 65.5) -> the stream at the kernel's
# occupancy is the limit, and decode and wgmma are hidden; then weights_only:2 within 3 us of
# stream_only:2 -> the weight stream's bytes in flight (2 CTAs x 2 stages) are the lever (more
# stages per CTA within the registers; a smaller x stage); stream_only:2 - weights_only:2 >= 6 us
# -> the x re-reads are (one x read per cluster of an expert's programs: TMA multicast).
# On an H200 it then runs gpu_session51a.sh's H200 part (late_vt at the short splits, the
# grouped table), with the probes at 512 tokens only.
# ~7 min on an H100, ~9.5 on an H200. Usage (repo root, with .whl/ carried):
#   [QUICK=1] bash experiments/gpu_sessions/gpu_session52a.sh
# QUICK=1 (~2.5 min, for a call with little device time left): the capped probes and stream_only
# at 512 tokens, 110 s of timing, nothing else.
source "$(dirname "$0")/../gpu_prelude.sh" r52a
R="$OUT/r52a"; mkdir -p "$R"
install_wheels
h200=0; grep -q H200 <<<"$(nvidia-smi -L)" && h200=1
probes() {  # NAME TOKENS SECONDS PROBES: the grouped call's probe columns into $R/NAME
  timeout $(($3 + 20)) python3 experiments/check_mgpu_matmul.py --grouped --tokens "$2" \
    --diag "$4" --max-seconds "$3" --out "$R/$1" > "$R/$1.txt" 2>&1
  echo "$1 rc=$?"; grep -iE "error|fail" "$R/$1.txt" | head -3
  grouped_summary "$R/$1/kernels_matmul_mgpu_grouped.json" | grep -v triton
}
capped=stream_only:2,weights_only:2,x_only:2
if [ "${QUICK:-0}" = 1 ]; then
  probes p512 512 110 "stream_only,$capped"
  exit 0
fi
probes p512 512 $([ $h200 = 1 ] && echo 150 || echo 200) "stream_only,$capped,weights_only,x_only"
[ $h200 = 1 ] || { probes p128 128 140 "stream_only,stream_only:2,weights_only:2"; exit 0; }
TOKENS=none bash "$(dirname "$0")/gpu_session51a.sh"
exit 0
