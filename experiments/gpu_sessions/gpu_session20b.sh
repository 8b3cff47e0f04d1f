#!/usr/bin/env bash
# Ran at commit 3737c30 (session 20).
# One H200, issue 6. (1) The dense Mosaic FP4 kernel's new split rule (`default_splits`, a model
# of 20a's per-SM rates) at 8192 x 28672, M = 1 / 8 / 32 / 64, against splits 1 / 2 / 4 and the
# Triton kernel and XLA bf16 dot; (2) M = 32 / 64 with 2 pipeline stages (4 stages hold 1-2 CTAs
# per SM there: the x tile is 16-32 KB per stage); (3) the grouped call at the 30B decode shapes
# (W4A4 calls now without the x read pad).
# Prediction (written before the run): auto = 2 splits at every M; M = 1 / 8 ~73-75% of copy
# (20a); M = 32 53 -> 60-66%, M = 64 30 -> 35-45% with 2 splits (more CTAs per SM for a kernel
# that holds 1-2); 2 stages at M = 32 / 64 within 10% of 4 stages; W4A4 calls 2-4 us faster
# than 17f's padded 39.4 / 51.6 / 44.2 / 54.1 us.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session20b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r20b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 170 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 1,8,32,64 \
  --splits auto,1,2,4 --out "$R/dense_rule" > "$R/dense_rule.txt" 2>&1; echo "dense_rule rc=$?"
timeout 90 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 32,64 --steps 2 \
  --splits 1,2,4 --baselines "" --out "$R/dense_s2" > "$R/dense_s2.txt" 2>&1
echo "dense_s2 rc=$?"
timeout 130 python3 experiments/check_mgpu_matmul.py --grouped --out "$R/grouped" \
  > "$R/grouped.txt" 2>&1; echo "grouped rc=$?"
tar -C "$R" -czf "$OUT/r20b.tar.gz" .
for n in dense_rule dense_s2 grouped; do
  grep -iE "error|Traceback" "$R/$n.txt" | head -3; grep "^|" "$R/$n"/*.md | cut -c1-400
done
exit 0
