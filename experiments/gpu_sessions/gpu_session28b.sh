#!/usr/bin/env bash
# One H200, issue 6 (session 28), after 28a (tiles 2 / 4 with one decoded tile live: no gain at
# M = 32 / 64, 16% slower at M <= 8, bit-identical; so x's L2 traffic is not the limit).
# 1. Side by side at the defaults, M = 1 / 8 / 32 / 64: the f32 output tile in a scope after the
#    K pipeline (DENSE_OUT_SCOPED, new) against the kernel-wide scratch of sessions 14-27.
#    Prediction: M = 32 ~10% faster scoped (its 2 stages + output fit 4 CTAs per SM instead of
#    3: 28a's 48.8 us against 26b's 54.2), M = 1 / 8 / 64 within 2% (same CTAs per SM).
# 2. tiles 2 with the next tile decoded under the previous tile's wgmma (DENSE_SERIAL_TILES
#    False) at M = 32 / 64 (tk 128 / 256, 2 / 3 stages, splits 1 / 2) and M = 1 / 8. Prediction:
#    if the serial decode -> wgmma -> wait chain is the M = 64 limit, 75 -> 60-65 us; if the
#    tensor pipe or shared-memory bandwidth is, no change (tensor floor ~30 us, smem ~37 us).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session28b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r28b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 200 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 1,8,32,64 \
  --splits auto --out-scoped 1,0 --baselines bf16 --out "$R/scoped" > "$R/scoped.txt" 2>&1
echo "scoped rc=$?"
timeout 260 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 64,32 \
  --splits 1,2 --tiles 1,2 --serial 1,0 --steps 2,3 --tk 128,256 --baselines '' \
  --max-seconds 220 --out "$R/overlap" > "$R/overlap.txt" 2>&1
echo "overlap rc=$?"
timeout 120 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 1,8 \
  --splits auto --tiles 1,2 --serial 1,0 --baselines '' --max-seconds 90 \
  --out "$R/small" > "$R/small.txt" 2>&1
echo "small rc=$?"
tar -C "$R" -czf "$OUT/r28b.tar.gz" .
for d in scoped overlap small; do
  echo "== $d"
  python3 - "$R/$d/kernels_matmul_mgpu.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
for r in sorted(rows, key=lambda r: (r["m"], r["mgpu_us"]))[:60]:
    print(f"M={r['m']:>3} tk={r['tk']} st={r['steps']} sp={r['splits']} t={r['tiles']} "
          f"ser={int(r['serial'])} sc={int(r['out_scoped'])} {r['mgpu_us']:7.2f} us "
          f"{r['mgpu_pct_copy']:5.1f}% err={r['mgpu_relerr']:.1e} d1={r.get('maxdiff_t1')} "
          f"bf16={r.get('bf16_us')}")
PY
done
grep -hiE "^ *mgpu .*Error|Traceback" "$R"/*.txt | sort | uniq -c | head -8
exit 0
