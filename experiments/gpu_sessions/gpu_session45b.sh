#!/usr/bin/env bash
# Session 45 (issue 6, grouped): where the grouped call's time outside its kernel goes, by x
# layout, at the issue's token counts (32 / 128 / 512 tokens, top-8 of 128 experts: 256 / 1024 /
# 4096 rows), then weight tiles per program at 512 tokens (the bench table's worst grouped row:
# 47.3% of copy on the H200, session 29b).
# Prediction (before the run; H100 or H200, device time):
# - rows layout (no bookkeeping kernel, no x gather; the groups' cumsum only): the call within
#   ~2-3 us of its kernel; aligned: 4.6-8.5 us above (session 43a, H100). The rows kernel itself
#   4-7% slower than the aligned one at mp 16 (session 20). So the rows call 1-4 us faster at
#   256 / 1024 rows.
# - 4096 rows (mean group 32, mp 56 on both layouts): the kernel is what is slow (the wgmma at
#   n = 56 and chunks of 56 re-streaming weights for groups > 56 rows). Each program of 64 weight rows reads its expert's x rows
#   (64 x 2048 bf16 = 256 KB at mp 56 + 8) against 74 KB of weight: x through TMA is 3.5x the
#   weight bytes, and 12 N tiles read it 12 times (200 MB from L2). So more tiles per program
#   (nt 2: x read 6 times) 1.2-1.4x faster; nt 3 / 4 hold 1 CTA per SM and gain less.
# - dense M = 32 sweep (H100 only; 73.9% of copy there against the issue's 75%): the default
#   (tk 256, 2 stages, 2 splits, 1 tile: 59 us) within 3% of the best config; tk 128 with 4
#   stages (the same shared memory, twice the stages of weights in flight) might reach ~57 us.
# On an H200 it first runs issue 7's late_vt A/B (~2 min) and the dense picks of
# gpu_session43e.sh (~2 min), and skips the 512-token tiles sweep and the M = 32 sweep.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session45b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r45b
late_vt_ab_if_h200
install_wheels
H200=$(grep -c H200 <<<"$(nvidia-smi -L)")
if [ "$H200" -gt 0 ]; then
  timeout 150 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 1,8,32,48,64 \
    --splits auto --baselines "" --max-seconds 120 --out "$R/dense" > "$R/dense.txt" 2>&1
  echo "dense rc=$?"
fi
# On an H100 the M = 32 sweep (the part no later script has) runs first (session 47); SHORT=1
# (~2 min on an H100) runs only it. The full H100 run is ~5 min.
if [ "$H200" = 0 ]; then
  timeout 120 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 32 \
    --tk 128,256 --steps 2,3,4 --splits 2 --tiles 1,2 --baselines "" --max-seconds 100 \
    --out "$R/m32" > "$R/m32.txt" 2>&1
  echo "m32 rc=$?"
  tar -C "$R" -czf "$OUT/r45b.tar.gz" .  # (again after each step: a call cut short keeps these)
fi
if [ "${SHORT:-0}" != 1 ] || [ "$H200" -gt 0 ]; then
  timeout 230 python3 experiments/check_mgpu_matmul.py --grouped --aligned --tokens 32,128,512 \
    --max-seconds 200 --out "$R/layouts" > "$R/layouts.txt" 2>&1
  echo "layouts rc=$?"
  tar -C "$R" -czf "$OUT/r45b.tar.gz" .
fi
if [ "$H200" = 0 ] && [ "${SHORT:-0}" != 1 ]; then
  timeout 150 python3 experiments/check_mgpu_matmul.py --grouped --tokens 512 --tiles 2,3,4 \
    --shapes 2048x768 --max-seconds 120 --out "$R/nt512" > "$R/nt512.txt" 2>&1
  echo "nt512 rc=$?"
  tar -C "$R" -czf "$OUT/r45b.tar.gz" .
fi
tar -C "$R" -czf "$OUT/r45b.tar.gz" .
python3 - "$R" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*/kernels_matmul_mgpu_grouped*.json")):
    for r in json.load(open(f)).get("rows", []):
        cols = sorted(c[:-3] for c in r if c.endswith("_us") and not c.endswith("kernel_us"))
        print(f.split("/")[-2], f"{r['k']}x{r['n']} rows={r['rows']:>4} maxg={r['max_group']:>3}",
              "  ".join(f"{c}={r[c + '_us']:.1f}/{r.get(c + '_kernel_us', float('nan')):.1f}"
                        f"({r.get(c + '_pct_copy', float('nan')):.0f}%)" for c in cols))
PY
[ -d "$R/dense" ] && dense_summary dense
[ -d "$R/m32" ] && dense_summary m32
grep -hiE "Error|Traceback" "$R"/*.txt | sort | uniq -c | head -6
exit 0
