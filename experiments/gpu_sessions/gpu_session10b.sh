#!/usr/bin/env bash
# Prepared in session 9, run in session 10 (one H200; the result is in NOTES_matmul.md): the
# dense prefill path with matmul_triton.dequantize_planes (one Pallas pass from the packed units
# to bf16, rows plane-major, x permuted) against the path before it (dequantize through the
# unpacked QTensor, 842 us at M = 512 vs the bf16 GEMM's 335 us, session 9), 8192 x 28672,
# device time.
# Prediction: the dequantize pass at ~3.5-4 TB/s (132 MB read + 470 MB written: 150-170 us), so
# M = 512 at ~510 us (~1.5x the bf16 GEMM; target <= 1.5x) and M = 4096 at ~2.7 ms (~1.05x).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session10b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r10b
timeout 240 python3 -m pallas_kernels.bench_matmul --sections dense --dense_m 512,4096 \
  --device-time --out "$R" > "$R/log.txt" 2>&1
echo "rc=$?"
tar czf "$OUT/session10b.tgz" -C /tmp r10b
grep '"kind"' "$R/log.txt" | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l)
    print(r['m'], r['fmt'], r['variant'], round(r['us'], 1), round(r.get('device_us', 0), 1),
          round(r.get('device_pct_copy', 0), 1), '%.1e' % r['rel_err'])"
exit 0
