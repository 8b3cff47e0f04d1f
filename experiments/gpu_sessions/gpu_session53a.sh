#!/usr/bin/env bash
# Issue 6, grouped kernel: does a deeper weight pipeline pay at the kernel's occupancy? Session 53
# (gpu_session52a.sh, H100, kernel device time) found, at 512 tokens with 2 CTAs an SM (the
# kernel's occupancy): the weight stream alone (weights_only:2) 45.3 / 47.2 us, the whole TMA
# stream (stream_only:2) 51.6 / 49.2, the kernel 62.4 / 65.1 (2048 x 768 / 768 x 2048). At 128
# tokens the kernel equals its stream (45.5 vs stream_only:2 45.2; weights_only:2 42.1). Both
# token counts run 2 pipeline stages: while a warpgroup decodes and multiplies one stage, one
# stage is in flight, ~9 KB of weights a CTA (x is 12-32 KB more, from L2).
# This call times the probes and the kernel with 3 and 4 stages (--knobs mp:tk:steps; the probes
# use the first triple):
#   512 tokens: weights_only:2 and x_only:2 at 4 stages, weights_only:2 at 3 (the kernel itself
#     at 3-4 stages of 41 KB fits one CTA an SM; it is timed beside them all the same);
#   128 tokens: the kernel at 2 / 3 / 4 stages (mp 16: 21 KB a stage, 4 stages still fit 2 CTAs
#     an SM), weights_only:2 at 4 stages.
# Prediction (before the run), H100: weights_only:2 at 4 stages 39-42 us at 512 tokens (2
# stages: 45.3 / 47.2; the uncapped 3-CTA probe 42.6 / 46.8), at 128 tokens 38-40 (42.1); the
# 128-token kernel at 4 stages 41-44 us (45.5 / 47.4 at 2).
# Rule: weights_only:2 at 4 stages >= 3 us faster than at 2 stages at 512 tokens -> build the
# split pipeline (weights 4 stages deep, x 2 stages: 2 x 36 + 2 x 64 KB fits 2 CTAs an SM) for
# the 512-token kernel; the 128-token kernel at 3 or 4 stages >= 2% faster at both shapes with
# maxdiff 0 -> make it default_grouped_knobs' decode pick. Otherwise neither.
# ~6 min on an H100. Usage (repo root, with .whl/ carried):
#   bash experiments/gpu_sessions/gpu_session53a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r53a
R="$OUT/r53a"; mkdir -p "$R"
install_wheels
grouped() {  # NAME TOKENS SECONDS KNOBS PROBES: check_mgpu_matmul --grouped into $R/NAME
  timeout $(($3 + 20)) python3 experiments/check_mgpu_matmul.py --grouped --tokens "$2" \
    --knobs "$4" --diag "$5" --max-seconds "$3" --out "$R/$1" > "$R/$1.txt" 2>&1
  echo "$1 rc=$?"; grep -iE "error|fail" "$R/$1.txt" | head -3
  grouped_summary "$R/$1/kernels_matmul_mgpu_grouped.json" | grep -v triton
}
grouped s4_512 512 110 56:256:4 weights_only:2,x_only:2
grouped s3_512 512 80 56:256:3 weights_only:2
grouped s4_128 128 130 16:256:4,16:256:2,16:256:3 weights_only:2
exit 0
