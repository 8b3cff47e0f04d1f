#!/usr/bin/env bash
# Session-6 GPU call B on one H200 (results under $OUT as one tarball), each process alone:
#   1. grouped expert matmuls (issue 6) with the loop-free item tables: the bench's
#      `grouped_tables` rows time the old binary-search tables against the new ones directly.
#   2. Nsight Compute profile of the grouped launches (session 5's call F script, not yet run
#      in its fixed form).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session6b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r6b
BENCH_TIME_LIMIT_S=200 timeout 260 python3 -m pallas_kernels.bench_matmul --sections grouped \
  --out "$R/matmul" > "$R/matmul.txt" 2>&1
OUT=$R bash "$(dirname "$0")/gpu_session5f.sh" > "$R/ncu_call.txt" 2>&1
tar czf "$OUT/session6b.tgz" -C /tmp r6b r5f
grep "^| grouped" "$R/matmul/kernels_matmul.md" | cut -c1-140
grep "FAILED" "$R/matmul.txt" | cut -c1-300
tail -60 "$R/ncu_call.txt"
exit 0
