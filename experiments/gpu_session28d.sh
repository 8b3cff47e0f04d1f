#!/usr/bin/env bash
# One H200, issue 6 (session 28): the dense Mosaic FP4 matmul's new defaults (output tile
# scoped after the pipeline; 33-64 rows: 2 weight tiles, tk 128, 3 stages, the next tile
# decoded under the previous wgmma; > 64 rows tk 128) at 8192 x 28672.
# 1. The defaults at M = 1, 8, 13, 32, 64, 200 with the bf16 dot. Prediction: M = 1 / 8
#    40.8-41.7 us (73-75%), 13 ~48 us, 32 49-52 us (60-62%), 64 73-75 us (41-42%), 200 ~156 us;
#    relerr as before (5e-5 - 1e-4).
# 2. M = 48 (not measured in 28a-c): tiles 1 / 2 x 2 / 3 stages at tk 128. Prediction:
#    tiles 2 / tk 128 / 3 stages within 3% of the best.
# 3. The issue's table (`pallas_kernels.bench matmul`) with these defaults. Prediction: as 28c
#    with M = 64 at ~41% instead of 39.5%.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_session28d.sh
source "$(dirname "$0")/gpu_prelude.sh" r28d
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 150 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 \
  --ms 1,8,13,32,64,200 --splits auto --baselines bf16 --out "$R/defaults" \
  > "$R/defaults.txt" 2>&1
echo "defaults rc=$?"
timeout 120 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 48 --splits 1 \
  --tiles 1,2 --steps 2,3 --tk 128 --baselines '' --max-seconds 60 --out "$R/m48" \
  > "$R/m48.txt" 2>&1
echo "m48 rc=$?"
BENCH_TIME_LIMIT_S=200 timeout 300 python3 -m pallas_kernels.bench matmul --device-time \
  --sections exact,dense,grouped --out "$R/bench" > "$R/bench.txt" 2>&1; echo "bench rc=$?"
tar -C "$R" -czf "$OUT/r28d.tar.gz" .
for d in defaults m48; do
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
