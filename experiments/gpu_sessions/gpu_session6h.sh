#!/usr/bin/env bash
# Session-6 GPU call H on one H200: the kernel tables again with a device-time column beside
# the per-call wall time (--device-time: each call's kernels from a profile, against a copy
# bandwidth measured the same way). Call F found ~250 us of launch / host time in every synced
# Pallas call, more than the kernel for short ones.
#   1. decode attention + quantize-with-hint (bench_attention, no sweep: v4's tuned defaults)
#   2. grouped expert matmuls (bench_matmul --sections grouped)
# Usage (repo root): bash experiments/gpu_sessions/gpu_session6h.sh
source "$(dirname "$0")/../gpu_prelude.sh" r6h
timeout 230 python3 -m pallas_kernels.bench_attention --device-time --out "$R/attn" \
  --skip v3check,sweep,long,variants,append --max-seconds 200 > "$R/attn.txt" 2>&1
BENCH_TIME_LIMIT_S=140 timeout 190 python3 -m pallas_kernels.bench_matmul --device-time \
  --sections grouped --out "$R/matmul" > "$R/matmul.txt" 2>&1
tar czf "$OUT/session6h.tgz" -C /tmp r6h
grep -A12 "^Device time" "$R/attn/kernels_attention.md"
grep -A11 "quantize_with_hint M" "$R/attn/kernels_attention.md" | cut -c1-120
grep '"device_us"' "$R/matmul.txt" | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['tokens'], r['k'], r['n'], r['fmt'], r['variant'], round(r['us'], 1), round(r['pct_copy'], 1), round(r['device_us'], 1), round(r['device_pct_copy'], 1))"
exit 0
