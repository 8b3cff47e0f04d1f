#!/usr/bin/env bash
# One H200, issue 7: 30d's mismatch study after the trainer's attention P.V went to
# Precision.HIGHEST (check_gpu_attention_precision.py: at the default precision the H200 ran it in
# TF32, 1.6-2.1e-4 from float64; the decode kernel's f32 P is 1e-6). 30d (TF32 trainer): TRACE
# kl_k3 2.9-7.1e-4 with f32 P, 3.6-8.2e-5 with bf16 P. Prediction: with an f32 trainer the f32-P
# rollout is now the closer one (kl_k3 at or under 30d's bf16-P values; bf16 P above it), as on
# the CPU. 3 batches (device time).
# Usage (repo root, with .whl/ and runs/tiny_f32 carried): bash experiments/gpu_sessions/gpu_session30e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r30e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 250 python3 experiments/p_precision_mismatch.py --config configs/tiny.py \
  --checkpoint runs/tiny_f32 --batches 3 --out "$R/pm" > "$R/pm.txt" 2>&1
echo "pm rc=$?"
tar -C "$R" -czf "$OUT/r30e.tar.gz" .
grep "^batch" "$R/pm.txt"; cat "$R/pm/p_precision_mismatch.md" 2>/dev/null
grep -iE "error|Traceback" "$R/pm.txt" | head -5
exit 0
