#!/usr/bin/env bash
# Issue 6, grouped kernel at 512 tokens (4096 rows, mean group 32, mp 56): what limits it
# (53.5% of copy on an H100 at 768 x 2048, against 75-77% at 128 tokens; nt 2 / 4 no help).
# Nsight Compute (speed of light, warp stalls, PC sampling) of the rows-layout kernel at 2048 x
# 768, 128 and 512 tokens with the library's tiles, then 512 tokens with nt 2; before that a
# sweep of mp (tokens per chunk) at 512 tokens, both expert shapes.
# Prediction (written before the run): per 64-row weight tile a program streams a 64 x 2048 bf16
# x tile (256 KB) against 68 KB of weight codes + scales, so at 4096 rows the SMs load ~500 MB
# from L2 for ~105 MB from DRAM: L2 throughput >= 70% of its peak and DRAM ~55% at 512 tokens;
# at 128 tokens (mean group 8, mp 16, a 24-row x tile: ~170 MB from L2) DRAM-side 75%, L2 < 50%.
# If so, nt 2 (x read once per 128 weight rows) should have cut L2 load by ~40%; its unchanged
# time (45c) would then say the L2 is not the limit either and the stall profile decides.
# mp sweep (route(512) groups: mean 32, max 47): a chunk computes mp + 8 rows whatever the group,
# so mp 56 / 48 / 40 / 32 compute 8192 / 7168 / 6480 / 7320 rows (mp 40: 7 experts stream
# their weights twice, mp 32: 55). If the MMA or the x stream limits, mp 48 ~8-12% and mp 40
# ~10-15% faster than mp 56; if the weight stream does, all within 3% (mp 32 slower). The
# stages: at mp 56 a tk-256 step holds 32 KB of x for 8-16 KB of weights, so 2 stages fill
# ~100 KB of shared memory (2 programs per SM, against 4 at 128 tokens) and the down projection
# (K 768) has only 3 steps per chunk; if that latency limits, tk 128 with 3-4 stages 5-15% faster.
# A second model, also written before the run (Little's law): at mp 56 a stage's x (64 x 256
# bf16, 32 KB) crowds shared memory, so an SM holds 2 programs x 1 stage ahead = ~16 KB of
# weight bytes in flight, against the ~25 KB per SM the H100's copy needs (~3.3 TB/s x ~1 us over
# 132 SMs); at 128 tokens (x 12 KB a stage) 5 programs fit, ~40 KB. That model alone gives
# ~60% of copy at 512 tokens (measured 53.5%). Per stage (tk 256): codes 8 KB x nt, scales
# 1 KB x nt, x (mp + 8) x 512 B; at 2048 x 768 (nt 1) mp 56 fits 2 programs per SM and mp 48
# 3 (predicted ~1.3x), at 768 x 2048 (nt 2) both 2 (mp 48 ~1.1x from the MMA alone); tk 128 x
# 4 stages keeps 2 programs with 3 stages ahead (~1.2x); the ncu run's DRAM throughput and
# long-scoreboard stalls decide it. --tiles 1 adds nt 1 at mp 56 (768 x 2048: 2 programs per SM
# with 9 KB of weights a stage instead of 18) and nt 4 (45c measured nt 4 only at 2048 x 768,
# 3 tiles per expert: 384 programs; at 768 x 2048 a stage is 68 KB, 1 program per SM: slower).
# Chunk widths (fp4_matmul_mgpu.GROUPED_WIDTHS, new this session, CPU-tested only): a chunk
# whose columns (misalignment + group, mean ~35.5 here) end at or below a width runs a narrower
# K pipeline; widths 32,40,48 at mp 56 compute ~40 columns a chunk on average instead of 64
# (-38% MMA and x). If the MMA or the x stream limits: 15-25% faster, maxdiff 0; if the weight
# stream's latency does: within 5% (shared memory stays sized for 64 rows). Between 5% and 15%:
# both limits in part; the ncu stall mix at 512 tokens then says which dominates.
# At 512 tokens every group (max 47 rows) fits one mp-56 chunk, so no program switches between
# width pipelines there; a second call at 1024 tokens (mean group 64: many groups of two chunks,
# a full-width one and a narrow one) checks that the switch stores the same values (maxdiff 0
# required before the widths become a default) and times it.
# ~6 min (~8 on an H200); SHORT=1 (~5 min on an H200): 4 knobs and 2 width sets, no tiles, the
# first profile only.
# Usage (repo root, with .whl/ carried): [SHORT=1] bash experiments/gpu_sessions/gpu_session46b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r46b
late_vt_ab_if_h200  # (issue 7's A/B, gpu_session46a.sh's first part: on an H200 only, ~2 min)
install_wheels
if [ "${SHORT:-0}" = 1 ]; then  # fewer points
  SWEEP=(--knobs 56:256:2,48:256:2,40:256:2,56:128:4 --widths "32,40,48;48")
else
  SWEEP=(--knobs 56:256:2,48:256:2,40:256:2,32:256:2,56:256:3,56:128:4,48:128:4 --tiles 1,4
         --widths "32,40,48;40,48;48")
fi
timeout 240 python3 experiments/check_mgpu_matmul.py --grouped --tokens 512 "${SWEEP[@]}" \
  --out "$R/mp" > "$R/mp.txt" 2>&1
echo "mp sweep rc=$?"
tar -C "$R" -czf "$OUT/r46b.tar.gz" .
grep -E "^device" "$R/mp.txt"; grep -iE "error|fail" "$R/mp.txt" | head -5
grouped_summary "$R/mp/kernels_matmul_mgpu_grouped.json"
timeout 100 python3 experiments/check_mgpu_matmul.py --grouped --tokens 1024 --shapes 2048x768 \
  --knobs 56:256:2 --widths "32,40,48" --out "$R/w1024" > "$R/w1024.txt" 2>&1
echo "widths at 1024 tokens rc=$?"
grouped_summary "$R/w1024/kernels_matmul_mgpu_grouped.json"
tar -C "$R" -czf "$OUT/r46b.tar.gz" .
GROUPED_TOKENS=128,512 GROUPED_KN=2048x768 ncu_source_profile "$R/ncu_rows" body \
  experiments.run_mgpu_grouped_once
tar -C "$R" -czf "$OUT/r46b.tar.gz" .
[ "${SHORT:-0}" = 1 ] || GROUPED_TOKENS=512 GROUPED_KN=2048x768 GROUPED_NT=2 ncu_source_profile "$R/ncu_nt2" body \
  experiments.run_mgpu_grouped_once
tar -C "$R" -czf "$OUT/r46b.tar.gz" .
for d in ncu_rows ncu_nt2; do
  [ -d "$R/$d" ] || continue
  echo "== $d"; grep -E "rel err" "$R/$d/ncu_log.txt"
  grep -E "^  body|Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per" \
    "$R/$d/details.txt" | sed -E 's/ +/ /g' | head -60
  grep -A3 "^== raw" "$R/$d/summary.txt" | head -12
done
exit 0
