#!/usr/bin/env bash
# One H200, issue 7: 30c's mismatch study again (30c's 8 batches ran past its 300 s: on the GPU
# every diagnose call compiles), now 6 batches, both precisions per batch in turn, progress per
# batch in pm.txt. Prediction as 30c: TRACE kl_k3 with f32 P within 20% of the CPU's 1.19e-3
# (over 8 batches); bf16 P +20-50%.
# Usage (repo root, with .whl/ and runs/tiny_f32 carried): bash experiments/gpu_sessions/gpu_session30d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r30d
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 470 python3 experiments/p_precision_mismatch.py --config configs/tiny.py \
  --checkpoint runs/tiny_f32 --batches 6 --out "$R/pm" > "$R/pm.txt" 2>&1
echo "pm rc=$?"
tar -C "$R" -czf "$OUT/r30d.tar.gz" .
grep "^batch" "$R/pm.txt"; cat "$R/pm/p_precision_mismatch.md" 2>/dev/null
grep -iE "error|Traceback" "$R/pm.txt" | head -5
exit 0
