#!/usr/bin/env bash
# One H200, issue 6 (session 28): the dense Mosaic FP4 matmul with its 2 split partials summed
# in the kernel (DENSE_FUSED_SPLITS: CTA (n, 0) writes its partial to a workspace and signals a
# semaphore, CTA (n, 1) adds it and stores the bf16 [M, N] rows itself; no XLA epilogue).
# Prediction (written before the run): outputs identical to the XLA-summed call (max diff 0);
# at 8192 x 28672 M = 1 / 8 the call 0.8-1.5 us faster (26a: the epilogue is 1.7-2.1 us, the
# kernel's tail grows by the partial's load and the row stores), i.e. 76-78% of copy; M = 3 / 13
# 2-3 us faster (their epilogue transposes an odd width); M = 32 about 1 us faster.
# Then the final defaults at M = 48 / 64 / 200 (28d's part 1-2) and, time allowing, the issue's
# table with the fused kernel on.
# Ran on commit 013b966's code; the fused kernel and --fused were removed afterwards (no gain;
# 4be5e92 holds their last version).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session28e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r28e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
for i in 1 2; do
  timeout 120 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 1,3,8,13,32 \
    --splits auto --fused 0,1 --baselines "$([ $i = 1 ] && echo bf16)" --max-seconds 100 \
    --out "$R/fused_$i" > "$R/fused_$i.txt" 2>&1
  echo "fused_$i rc=$?"
done
timeout 100 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 48,64,200 \
  --splits auto --tiles 1,2 --baselines '' --max-seconds 80 --out "$R/defaults" \
  > "$R/defaults.txt" 2>&1
echo "defaults rc=$?"
for d in fused_1 fused_2 defaults; do
  echo "== $d"
  python3 - "$R/$d/kernels_matmul_mgpu.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
for r in sorted(rows, key=lambda r: (r["m"], r["mgpu_us"])):
    print(f"M={r['m']:>3} tk={r['tk']} st={r['steps']} sp={r['splits']} t={r['tiles']} "
          f"fu={int(r['fused'])} {r['mgpu_us']:7.2f} us {r['mgpu_pct_copy']:5.1f}% "
          f"err={r['mgpu_relerr']:.1e} d1={r.get('maxdiff_t1')} bf16={r.get('bf16_us')}")
PY
done
grep -hiE "^ *mgpu .*Error|Traceback" "$R"/*.txt | sort | uniq -c | head -6
tar -C "$R" -czf "$OUT/r28e.tar.gz" .
BENCH_TIME_LIMIT_S=120 timeout 170 python3 -c "
import sys; sys.path.insert(0, '$REPO')
from pallas_kernels import fp4_matmul_mgpu as FM, bench
FM.DENSE_FUSED_SPLITS = True
bench.main(['bench', 'matmul', '--device-time', '--sections', 'exact,dense,grouped',
            '--out', '$R/bench'])" > "$R/bench.txt" 2>&1; echo "bench rc=$?"
tar -C "$R" -czf "$OUT/r28e.tar.gz" .
grep -E "^\| (dense|grouped)" "$R/bench/kernels_matmul.md" | grep -E "mosaic|xla_dot|ragged_dot" \
  | cut -c1-150
exit 0
