#!/usr/bin/env bash
# gpu_session46b.sh cut to fit the last ~4 device minutes of session 46: on an H200 issue 7's
# late_vt A/B first (~2 min), then the 512-token grouped sweep with fewer points (the library's
# mp 56, mp 48 / 40, tk 128 x 4 stages, chunk widths 32,40,48 and 48; predictions in 46b's
# header), then 46b's first profile if time is left.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session46c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r46c
late_vt_ab_if_h200
install_wheels
timeout 170 python3 experiments/check_mgpu_matmul.py --grouped --tokens 512 \
  --knobs 56:256:2,48:256:2,40:256:2,56:128:4 --widths "32,40,48;48" \
  --out "$R/mp" > "$R/mp.txt" 2>&1
echo "mp sweep rc=$?"
tar -C "$R" -czf "$OUT/r46c.tar.gz" .
grep -E "^device" "$R/mp.txt"; grep -iE "error|fail" "$R/mp.txt" | head -5
grouped_summary "$R/mp/kernels_matmul_mgpu_grouped.json"
GROUPED_TOKENS=128,512 GROUPED_KN=2048x768 ncu_source_profile "$R/ncu_rows" body \
  experiments.run_mgpu_grouped_once
tar -C "$R" -czf "$OUT/r46c.tar.gz" .
grep -E "^  body|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Achieved Occupancy" \
  "$R/ncu_rows/details.txt" | sed -E 's/ +/ /g' | head -30
exit 0
