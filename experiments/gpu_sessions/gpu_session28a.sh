#!/usr/bin/env bash
# One H200, issue 6 (session 28): the dense Mosaic FP4 matmul with 1 / 2 / 4 adjacent 64-row
# weight tiles per CTA sharing one x tile (`fp4_matmul_mgpu(tiles=...)`), at 8192 x 28672.
# Why: at M = 64 every one of the 448 CTAs reads all of x (1 MB) from L2: 470 MB of L2 reads
# for 124 MB of weights, ~7.5 TB/s through L2 in the measured 79 us, about the L2's limit; at
# M = 32 half of that. Prediction (written before the run): outputs of tiles 2 / 4 identical to
# tiles 1 at the same splits and tk (max diff 0); M = 64 79 -> 50-58 us with 2 tiles, 45-55 with
# 4 (the bf16 wgmma's ~38-45 us at M = 64 is the floor); M = 32 54 -> 44-48 us; M = 1 / 8 within
# +-3% of tiles 1 (x is 16-128 KB there).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session28a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r28a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 330 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 64,32 \
  --splits 1,2 --tiles 1,2,4 --steps 2,4 --tk 256,128 --baselines bf16 --max-seconds 280 \
  --out "$R/big" > "$R/big.txt" 2>&1
echo "big rc=$?"
timeout 170 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 1,8 \
  --splits auto,1,4 --tiles 1,2,4 --baselines '' --max-seconds 130 \
  --out "$R/small" > "$R/small.txt" 2>&1
echo "small rc=$?"
tar -C "$R" -czf "$OUT/r28a.tar.gz" .
for d in big small; do
  python3 - "$R/$d/kernels_matmul_mgpu.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
for r in sorted(rows, key=lambda r: (r["m"], r["mgpu_us"])):
    print(f"M={r['m']:>3} tk={r['tk']} st={r['steps']} sp={r['splits']} t={r['tiles']} "
          f"{r['mgpu_us']:7.2f} us {r['mgpu_pct_copy']:5.1f}% err={r['mgpu_relerr']:.1e} "
          f"d1={r.get('maxdiff_t1')} bf16={r.get('bf16_us')}")
PY
done
grep -hiE "error|Traceback" "$R/big.txt" "$R/small.txt" | sort | uniq -c | head -8
exit 0
