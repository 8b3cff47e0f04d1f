#!/usr/bin/env bash
# Session 43 (issue 6), one call that adapts to the card it gets. Session 43a (the 40a probes on
# an H100, experiments/results/gpu/session43/a) found the M = 64 default (2 tiles, tk 128,
# 3 stages, 1 split: 224 CTAs on 132 SMs) streams at 63% of copy with `stream_only`, against 83%
# for M = 32's config (1 tile, tk 256, 2 stages, 2 splits: 896 CTAs), and its wgmma adds 11 us
# over its stream (1.3 us at M = 32). This times M = 64 over tk {128, 256} x stages {2, 3} x
# splits {1, 2} x tiles {1, 2}, each with `stream_only` beside it, to separate the config's
# stream from its wgmma.
# Prediction (before the run), H100 device time: stream_only 51-56 us for every 896-CTA config
# (1 tile, 2 splits) and 58-70 us for the 224 / 448-CTA ones; full 80-90 us for all of them
# (the bf16 wgmma of 64 tokens, 30 GFLOP = 30 us at the dense bf16 peak, does not hide under
# a 43 us stream), the 2-tile tk 128 3-stage default among the fastest (session 28, H200).
# On an H200 it first runs the late_vt A/B (gpu_session39d.sh, ~2 min; issue 7's decision rule
# in NOTES.md), then the same sweep.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session43b.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
here=$(dirname "$0")
if grep -q H200 <<<"$(nvidia-smi -L)"; then
  OUT=/tmp/r39d_out bash "$here/gpu_session39d.sh"
  tar -C /tmp/r39d_out -czf "$OUT/r39d.tar.gz" .
fi
source "$here/../gpu_prelude.sh" r43b
install_wheels
timeout 200 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 64 \
  --tk 128,256 --steps 2,3 --splits 1,2 --tiles 1,2 --diag stream_only --baselines "" \
  --max-seconds 180 --out "$R/m64" > "$R/m64.txt" 2>&1
echo "m64 rc=$?"
tar -C "$R" -czf "$OUT/r43b.tar.gz" .
dense_summary m64
grep -hiE "Error|Traceback" "$R"/*.txt | sort | uniq -c | head -6
exit 0
