#!/usr/bin/env bash
# Session-5 GPU call C on one H200 (results under $OUT as one tarball), each process alone:
#   1. grouped expert matmuls (issue 6): the persistent kernels (Config.programs: one flat,
#      software-pipelined loop over (tile, K step) per program) beside the one-program-per-tile
#      kernels, bf16 and NVFP4, 30B expert shapes, 32-512 tokens x top-8 of 128 experts.
#   2. decode attention (issue 7): the v4 FP4-KV kernel's own knob sweep (B=32 x 32K).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session5c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r5c
BENCH_TIME_LIMIT_S=200 timeout 260 python3 -m pallas_kernels.bench_matmul --sections grouped \
  --out "$R/matmul" > "$R/matmul.txt" 2>&1
timeout 150 python3 -m pallas_kernels.bench_attention --out "$R/attn" --sweep-decode v4 \
  --skip v3check,attention,long,qh,variants,append --sweep-seconds 120 > "$R/attn.txt" 2>&1
tar czf "$OUT/session5c.tgz" -C /tmp r5c
grep "^| grouped" "$R/matmul/kernels_matmul.md" | cut -c1-120
grep "FAILED" "$R/matmul.txt" | cut -c1-300
grep "^sweep" "$R/attn.txt" | cut -c1-200
exit 0
