#!/usr/bin/env bash
# Issue 6, grouped kernel at 512 tokens (4096 rows over 128 experts), after session 48 (46b on an
# H200: chunk widths (32, 40, 48) now the default, 60.5 / 63.3 us = 43.5 / 41.5% of copy at
# 2048 x 768 / 768 x 2048; mp 48 alone 57.7 us at 2048 x 768, 12% faster than mp 56, but 3-4%
# slower at 768 x 2048). Runs after gpu_session48a.sh (or alone):
# 1. mp 56 with and without widths (32, 40, 48), then mp 48 with widths (32, 40, 48) and
#    (32, 40), both expert shapes, each call with its own no-width baseline (two processes);
# 2. mp 48 with widths at 1024 tokens, 2048 x 768 (groups of two chunks: maxdiff 0 required);
# 3. Nsight Compute of the library's kernel at 512 tokens, 2048 x 768 (46b's did not come back).
# Prediction (before the run): at 2048 x 768 mp 48 + (32, 40, 48) ~5% faster than mp 48 alone
# (a 56-column chunk wastes less than a 64-column one), ~55 us, 7-10% faster than mp 56 + widths;
# at 768 x 2048 mp 48 + widths ~66 us, 3-5% slower than mp 56 + widths (nt 2: 7 experts stream
# twice and x does not crowd shared memory). Rule: if mp 48 + widths is >= 3% faster than
# mp 56 + widths at 2048 x 768 (each against its own process's mp-56 baseline) and maxdiff 0 at
# 1024 tokens, make default_grouped_knobs pick mp 48 above 16 rows per expert where the call
# runs one 64-row tile per program (nt 1), after timing the fused gate / up pair the same way
# (the rollout's nt-1 call; this check runs single weights).
# Profile prediction: at 512 tokens SM throughput > 70% and DRAM < 50% of peak, with more
# math-pipe throttle than at 128 tokens (the wgmma runs 4x the columns per weight byte).
# ~5 min on an H200 or an H100.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session48b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r48b
install_wheels
timeout 110 python3 experiments/check_mgpu_matmul.py --grouped --tokens 512 \
  --knobs 56:256:2 --widths "32,40,48" --out "$R/mp56" > "$R/mp56.txt" 2>&1
echo "mp56 rc=$?"
timeout 130 python3 experiments/check_mgpu_matmul.py --grouped --tokens 512 \
  --knobs 48:256:2,56:256:2 --widths "32,40,48;32,40" --out "$R/mp48" > "$R/mp48.txt" 2>&1
echo "mp48 rc=$?"
tar -C "$R" -czf "$OUT/r48b.tar.gz" .
timeout 90 python3 experiments/check_mgpu_matmul.py --grouped --tokens 1024 --shapes 2048x768 \
  --knobs 48:256:2 --widths "32,40,48" --out "$R/w1024" > "$R/w1024.txt" 2>&1
echo "mp48 widths at 1024 tokens rc=$?"
for d in mp56 mp48 w1024; do
  grep -E "^device" "$R/$d.txt"; grep -iE "error|fail" "$R/$d.txt" | head -3
  grouped_summary "$R/$d/kernels_matmul_mgpu_grouped.json"
done
tar -C "$R" -czf "$OUT/r48b.tar.gz" .
GROUPED_TOKENS=512 GROUPED_KN=2048x768 ncu_source_profile "$R/ncu_512" body \
  experiments.run_mgpu_grouped_once
tar -C "$R" -czf "$OUT/r48b.tar.gz" .
if [ -d "$R/ncu_512" ]; then
  grep -E "rel err" "$R/ncu_512/ncu_log.txt"
  grep -E "^  body|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Block Limit (Registers|Shared)" \
    "$R/ncu_512/details.txt" | sed -E 's/ +/ /g' | head -20
  grep -A3 "^== raw" "$R/ncu_512/summary.txt" | head -6
fi
exit 0
