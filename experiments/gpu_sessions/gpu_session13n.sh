#!/usr/bin/env bash
# Ran at commit 1dc24db; the paired layout was removed afterwards (NOTES_matmul, session 13).
# Session 13n, one H200, one call (<= 4 min; typical ~3): re-run of gpu_session13m.sh after the
# paired-layout fix. 13m found the paired decode wrong on the GPU (identity x: 14709 / 14658 of
# 16384 mismatches; dense M = 1 and grouped rel err 1.58) although every CPU interpret-mode test
# was bit-exact. Cause (found on the CPU, NOTES_matmul session 13): a Triton miscompile, not the
# asm or its operand packing. The words / scales were joined on the pair axis with jnp.stack
# (tt.join); Triton's computeOrigBitWidth sees the join and halves the i8 scale loads' width, so
# the K = 16 plane dots got MMAv2 kWidth 8, which K = 16 cannot hold (4 lanes x 8 > 16): each
# thread decoded 4 rows x 2 columns and the lowering fed its second K half (units 4-7) to another
# N tile's HMMA (13m's H200 SASS, traced: per plane 4 HMMAs on the same A registers with B of only
# 2 columns, k 0-3 and k 4-7; columns c + 64 / c + 96 never decoded). Upstream fix: triton#11691.
# Now one [2, 8, BN] load per tile moved to the pair axis by a transpose (no join): kWidth 4 on
# every dot, the same HMMA structure as "kn" (4 columns, one K set per plane), checked by
# matmul_compilecheck.bad_mma_kwidth and tests/test_kernels_matmul.py::test_paired_compiles_*.
# Steps: 1) identity-x exactness of both layouts; 2) kn vs paired device time at the default
# config, dense 8192 x 28672 M = 1, 8, 32 and grouped 32 / 256 tokens x top-8 of 128 experts,
# 2048 x 768 and 768 x 2048, paired checked bit for bit against kn; 3) ncu source page of both
# M = 1 dense kernels (registers, LDGSTS widths, SASS for a kWidth / HMMA-structure check).
# Prediction (written before the run): exact: 0 mismatches for identity_kn and identity_paired,
# both formats; every paired row "same as kn: True". CPU compile (pip Triton 3.6, sm_90) of the
# profiled M = 1 split-4 config: 892 SASS per warp per K step vs 1,056 for kn (-15.5%), 78 vs 96
# registers, no PRMT, copies 9 x LDGSTS.E.BYPASS.128 (8 words + 1 scales) + 16 x 4-byte x vs kn's
# 8 x .128 + 2 x .64 + 16 x 4 B. If the H200's Triton compiles it the same way (13m's did for the
# joined version: 76 regs, same copies) and the time follows the instruction count like 13m's
# broken kernel did (55.5 vs 61.2 us under ncu): dense M = 1 ~56-59 us vs ~63.4 (1.07-1.12x),
# M = 8 similar, M = 32 within +-5%; grouped 1.03-1.10x (persistent: 958 vs 1,153 SASS, 77 vs 117
# registers). ncu: paired ~78 registers, LDGSTS.E.BYPASS.128 present, no PRMT in the top opcodes.
# Risk: XLA's Triton lays the [2, 8, BN] loads out differently (session 12: 4-byte copies for
# 3304579): then ~0.6-0.7x but still exact.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session13n.sh
source "$(dirname "$0")/../gpu_prelude.sh" r13n
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 55 python3 -m pallas_kernels.bench_matmul --sections exact --out "$R" > "$R/exact.txt" 2>&1
echo "exact rc=$?"; grep -o '"variant": "identity_[a-z]*".*"mismatches": [0-9]*' "$R/exact.txt"
timeout 70 python3 -m pallas_kernels.sweep_dense --grid layout --out "$R" > "$R/dense_log.txt" 2>&1
echo "dense rc=$?"
timeout 70 python3 -m pallas_kernels.sweep_grouped --grid layout --out "$R" \
  > "$R/grouped_log.txt" 2>&1
echo "grouped rc=$?"
FP4_PROFILE_LAYOUTS=kn,paired timeout 45 bash -c "source '$REPO/experiments/gpu_prelude.sh' r13n \
  >/dev/null; ncu_source_profile '$R/ncu' fp4_matmul pallas_kernels.profile_dense"
grep -E "Duration|Registers Per" "$R/ncu/details.txt" | head -4
grep -iE "LDGSTS|PRMT|HMMA" "$R/ncu/summary.txt" | head -12
tar czf "$OUT/session13n.tgz" -C /tmp r13n
grep -iE "error|failed|wrong" "$R/dense_log.txt" "$R/grouped_log.txt" | head -5
tail -6 "$R/kernels_matmul_grouped_layout.md" 2>/dev/null
tail -6 "$R/kernels_matmul_dense_layout.md" 2>/dev/null
exit 0
