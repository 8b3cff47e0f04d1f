#!/usr/bin/env bash
# Session 40 (issue 6), one GPU: where the dense Mosaic FP4 kernel's time goes at 8192 x 28672,
# M = 1 / 8 / 32 / 64, with its default knobs. Each M is timed as is and with two timing probes
# (`check_mgpu_matmul.py --diag`, fp4_matmul_mgpu._DIAG; wrong values): `no_decode` (wgmma's A
# operand is the code words themselves: the streams and the wgmma without the decode) and
# `stream_only` (no decode, no wgmma: the pipeline's TMA streams alone); `raw_scales` as in
# session 14. Two runs, the second without the bf16 baseline, for the spread.
# Prediction (before the run), device time on an H200 (full: 41 / 42 / 51 / 74 us, session 38):
# - stream_only 34-38 us at M = 1 / 8 (83-90% of copy), 35-42 at M = 32 / 64;
# - no_decode within 2 us of stream_only at M <= 8, 42-48 us at M = 32, 60-72 at M = 64 (session
#   28's budget: at M = 64 the wgmma and its shared-memory reads, not the decode, set the time);
# - raw_scales within 1 us of the full kernel (session 14: 2-4 us faster at M <= 8, before the
#   paired scale conversion).
# If no_decode stays near the full time at M = 64, the decode is hidden and the bf16 wgmma with
# x from shared memory is the limit; if it falls to stream_only, the decode's issue slots are.
# Then the grouped kernel (`--grouped`: 2048 x 768 and 768 x 2048, 27 / 111 tokens = 216 / 888
# rows; kernel alone 29.7 / 37.9 and 30.4 / 38.2 us in session 29) with the same probes:
# stream_only 22-27 / 28-33 us (kernel alone), no_decode within 2 us of it (2-7 rows per
# expert: the wgmma is small), so the decode is most of the gap to stream_only.
# On an H100 (copy 3.03 TB/s) the streams take ~1.4x longer and cover more of the rest.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session40a.sh (REPEATS=1: the
# dense probes once, with the bf16 baseline; default 2; GROUPED=0: no grouped probes)
source "$(dirname "$0")/../gpu_prelude.sh" r40a
install_wheels
for i in $(seq 1 "${REPEATS:-2}"); do
  timeout 140 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 1,8,32,64 \
    --splits auto --diag no_decode,stream_only,raw_scales \
    --baselines "$([ $i = 1 ] && echo bf16)" --max-seconds 110 --out "$R/probes_$i" \
    > "$R/probes_$i.txt" 2>&1
  echo "probes_$i rc=$?"
done
if [ "${GROUPED:-1}" = 1 ]; then
  timeout 170 python3 experiments/check_mgpu_matmul.py --grouped --diag no_decode,stream_only \
    --out "$R/grouped" > "$R/grouped.txt" 2>&1
  echo "grouped rc=$?"
fi
tar -C "$R" -czf "$OUT/r40a.tar.gz" .
dense_summary $(seq -f "probes_%g" 1 "${REPEATS:-2}")
[ -f "$R/grouped/kernels_matmul_mgpu_grouped.json" ] && python3 - "$R/grouped/kernels_matmul_mgpu_grouped.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(f"{r['k']}x{r['n']} rows={r['rows']:>4} kernel us: " + "  ".join(
        f"{label}={r.get(f'mgpu{c}_kernel_us', float('nan')):.2f}" for label, c in
        (("full", ""), ("no_decode", "_no_decode"), ("stream_only", "_stream_only")))
        + f"  call {r.get('mgpu_us', float('nan')):.2f} us")
PY
grep -hiE "Error|Traceback" "$R"/*.txt | sort | uniq -c | head -6
exit 0
