#!/usr/bin/env bash
# Session 11, one H200: the paired FP4 unit layout (matmul_layout "paired units": each decoded
# bf16x2 register is one plane of two adjacent units, the MMA's operand pair, so Triton no longer
# re-packs the decode's halves). 1) the decode is exact on the GPU (identity x, every code, scales
# from e4m3 subnormals to 448 / 2**+-40); 2) the dense sweep again (sweep_dense); 3) the grouped
# sweep (sweep_grouped) at the 30B decode shapes.
# Prediction (written before the run): static SASS per warp per 256 x 128 K step falls 14-15%
# (stream-K dense 1,181 -> 1,007, grouped persistent 1,153 -> 993; registers 128 -> 89 and 117
# -> 74; matmul_compilecheck). The kernels are issue-bound (session 11a), so ~1.1-1.15x: dense
# M = 1 66.5 -> ~58 us (~53% of copy), M = 8 70 -> ~61 us; grouped 888 x 2048 x 768 56 -> ~49 us
# (~55%). Errors unchanged (the decode is exact).
# Measured: exact, but 1.5x SLOWER (dense M = 1 103.8 us, grouped 888 x 2048 x 768 83.8 us; results
# in experiments/results/gpu/session11/paired_layout/). The paired layout was reverted; to rerun,
# check out commit 3304579 (the code this script measured).
# Usage (repo root, at commit 3304579): bash experiments/gpu_sessions/gpu_session11b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r11b
timeout 90 python3 -m pallas_kernels.bench_matmul --sections exact --out "$R" > "$R/exact.txt" 2>&1
echo "exact rc=$?"; grep -i "decode_exact\|mismatch" "$R/exact.txt" | cut -c1-200
timeout 250 python3 -m pallas_kernels.sweep_dense --out "$R" --max-seconds 200 \
  > "$R/dense_log.txt" 2>&1
echo "dense rc=$?"
timeout 230 python3 -m pallas_kernels.sweep_grouped --out "$R" --max-seconds 190 \
  > "$R/grouped_log.txt" 2>&1
echo "grouped rc=$?"
tar czf "$OUT/session11b.tgz" -C /tmp r11b
grep "default\|phase" "$R/dense_log.txt" | cut -c1-120
grep "default\|phase" "$R/grouped_log.txt" | cut -c1-120
exit 0
