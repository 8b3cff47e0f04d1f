#!/usr/bin/env bash
# Ran at commit 1dc24db; the paired layout was removed afterwards (NOTES_matmul, session 13).
# SUPERSEDED by gpu_session13n.sh (this version ran the miscompiled paired kernel; NOTES_matmul session 13).
# Session 13, one H200: the paired-unit layout again (FP4Weights.layout "paired", an option; the
# default stays "kn"), now with the even / odd unit scales in separate contiguous arrays and the
# words joined on the asm's pair axis (no strided loads, no broadcast: commit 3304579 had both).
# 1) the decode is exact on the GPU for both layouts (identity x, every code, e4m3 subnormal..448,
#    2**+-40); 2) device time, default config, kn vs paired side by side: dense 8192 x 28672 at
#    M = 1, 8, 32 (sweep_dense --grid layout) and the grouped kernel at 32 / 256 tokens x top-8 of
#    128 experts, 2048 x 768 and 768 x 2048 (sweep_grouped --grid layout); both check the paired
#    output against kn bit for bit; 3) Nsight Compute source page of the M = 1 dense kernel for
#    both layouts (profile_dense, FP4_PROFILE_LAYOUTS): the LDGSTS widths that actually ran.
# Prediction (written before the run): CPU compile (pip Triton 3.6, sm_90) of the profiled M = 1
# split-4 config: 905 SASS per warp per K step vs 1,056 for kn (-14%), no PRMT, 76 registers vs
# 96, the same copies as kn (8 x LDGSTS.E.BYPASS.128 words, 2 x .64 scales, 16 x 4-byte x). But
# the TTGIR still holds 4x-duplicated linear layouts (a zero register and a zero lane basis) for
# the joined word / scale tensors, the asm operands and the transposed planes, as in 3304579, and
# the word tiles are the same contiguous [8, BN] loads that the H200's Triton compiled to 4-byte
# copies in session 12c; only the scale loads changed. So the likely outcome is 3304579's:
# on the H200 the weight copies are 4-byte again (ncu: ~48 LDGSTS.E per K step, no .128) and
# dense M = 1 ~95-105 us vs ~63 us for kn (~0.6-0.7x), grouped ~0.7x. If instead the GPU keeps
# 128-bit copies (as the CPU compile does), issue-bound at ~55% busy with 14% fewer instructions
# and more warps per SM (76 registers): dense M = 1 63.5 -> ~56-58 us (~53% of copy), M = 8 ~60,
# M = 32 within +-5% of 99.6; grouped 1.05-1.1x. Bit-identical outputs to kn on every row either
# way (same MMAs on the same operands at BK = 256). Expected wall time ~4-5 min.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session13m.sh
source "$(dirname "$0")/../gpu_prelude.sh" r13m
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 90 python3 -m pallas_kernels.bench_matmul --sections exact --out "$R" > "$R/exact.txt" 2>&1
echo "exact rc=$?"; grep -o '"variant": "identity_[a-z]*".*"mismatches": [0-9]*' "$R/exact.txt"
timeout 110 python3 -m pallas_kernels.sweep_dense --grid layout --out "$R" > "$R/dense_log.txt" 2>&1
echo "dense rc=$?"
timeout 120 python3 -m pallas_kernels.sweep_grouped --grid layout --out "$R" \
  > "$R/grouped_log.txt" 2>&1
echo "grouped rc=$?"
FP4_PROFILE_LAYOUTS=kn,paired timeout 100 bash -c "source '$REPO/experiments/gpu_prelude.sh' r13m \
  >/dev/null; ncu_source_profile '$R/ncu' fp4_matmul pallas_kernels.profile_dense"
grep -E "Duration|Registers Per" "$R/ncu/details.txt" | head -4
grep -iE "LDGSTS" "$R/ncu/summary.txt" | head -12
tar czf "$OUT/session13m.tgz" -C /tmp r13m
grep -iE "error|failed" "$R/dense_log.txt" "$R/grouped_log.txt" | head -5
tail -6 "$R/kernels_matmul_grouped_layout.md"
tail -6 "$R/kernels_matmul_dense_layout.md"
exit 0
