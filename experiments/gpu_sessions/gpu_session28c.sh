#!/usr/bin/env bash
# One H200, issue 6 (session 28), after 28b (the output tile in a scope after the K pipeline:
# M = 32 49.6 vs 52.5 us side by side, the others within 1%; tiles 2 with the next tile decoded
# under the previous wgmma: M = 64 73.7 vs 80.0 us at tk 128 / 3 stages, one sample).
# 1. M = 64 twice (two processes): the default (tiles 1, tk 256, 2 stages) against tiles 2 /
#    tk 128 / 3 stages with and without the overlap. Prediction: tiles 2 + overlap 5-8% faster
#    in both, else noise (28a / 28b's defaults differed by 6%).
# 2. M = 13 (x now padded to 16 rows by XLA: TMA cannot take 13 rows; the CPU lowering found
#    it) and M = 200 (tk 256 fits shared memory now that the output reuses the stages): exact
#    (relerr like M = 8 / 32's ~5e-5 - 1e-4); tk 256 vs 128 at M = 200 unknown.
# 3. The issue's table (`pallas_kernels.bench matmul`, as 26b) with the new defaults.
#    Prediction: the Mosaic dense rows M = 1 / 8 at 73-76%, M = 32 60-63% (26b: 57.7%), M = 64
#    39-41%; the grouped rows unchanged (not touched).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session28c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r28c
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
for i in 1 2; do
  timeout 150 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 64 \
    --splits 1 --tiles 1,2 --serial 1,0 --steps 2,3 --tk 256,128 --baselines '' \
    --max-seconds 120 --out "$R/m64_$i" > "$R/m64_$i.txt" 2>&1
  echo "m64_$i rc=$?"
done
timeout 150 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 13,200 \
  --splits auto --tk 256,128 --baselines bf16 --max-seconds 120 --out "$R/odd" \
  > "$R/odd.txt" 2>&1
echo "odd rc=$?"
BENCH_TIME_LIMIT_S=280 timeout 400 python3 -m pallas_kernels.bench matmul --device-time \
  --sections exact,dense,grouped --out "$R/bench" > "$R/bench.txt" 2>&1; echo "bench rc=$?"
tar -C "$R" -czf "$OUT/r28c.tar.gz" .
for d in m64_1 m64_2 odd; do
  echo "== $d"
  python3 - "$R/$d/kernels_matmul_mgpu.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
for r in sorted(rows, key=lambda r: (r["m"], r["mgpu_us"])):
    print(f"M={r['m']:>3} tk={r['tk']} st={r['steps']} sp={r['splits']} t={r['tiles']} "
          f"ser={int(r['serial'])} {r['mgpu_us']:7.2f} us {r['mgpu_pct_copy']:5.1f}% "
          f"err={r['mgpu_relerr']:.1e} d1={r.get('maxdiff_t1')} bf16={r.get('bf16_us')}")
PY
done
grep -hiE "^ *mgpu .*Error|Traceback" "$R"/*.txt | sort | uniq -c | head -6
grep -E "FAILED|Error|guard" "$R/bench.txt" | head -5
grep -E "^\| (dense|grouped)" "$R/bench/kernels_matmul.md" | grep -E "mosaic|xla_dot|ragged_dot" \
  | cut -c1-150
exit 0
