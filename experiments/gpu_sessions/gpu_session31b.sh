#!/usr/bin/env bash
# Prepared in session 30, not yet run; after gpu_session31a.sh. One H200, issue 7: the GPU
# mismatch study (NOTES_attention session 30) with one more GPU-only piece taken out each:
#   xla     the rollout's activation quantizer as XLA ops instead of the fused kernel;
#   highest every XLA product at Precision.HIGHEST (the trainer's P.V ran in TF32).
# Prediction (written before the run): the sign of 31a's "auto" unchanged in both.
# Usage (repo root, with .whl/ and runs/tiny_f32 carried): bash experiments/gpu_sessions/gpu_session31b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r31b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
save() { tar -C "$R" -czf "$OUT/r31b.tar.gz" .; }
source "$(dirname "$0")/../gpu_pm.sh"
pm xla 150 4 --activation_quantizer xla; save
JAX_DEFAULT_MATMUL_PRECISION=highest pm highest 150 4; save
pm_summary xla highest
exit 0
