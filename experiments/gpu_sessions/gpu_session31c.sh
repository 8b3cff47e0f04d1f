#!/usr/bin/env bash
# Session 31, one H200, issue 7: the GPU mismatch study after the trainer's attention reads the
# FP4 K/V values the decode kernel reads (exact f32; before, the trainer rounded them to bf16:
# on the CPU that made TRACE's kl_k3 3.2x larger). 31a measured the old code on the same
# checkpoint and batches (auto: f32 P 5.37e-4, bf16 P 6.02e-5; ref: 5.43e-4 / 5.32e-4).
#   test    the model test that the trainer's attention equals a decode step over the FP4 cache
#           (here through the GPU kernels);
#   auto    the study, 8 batches, kernel attention;
#   ref     4 batches, the rollout's decode attention as the XLA reference;
#   highest 4 batches with every XLA product at Precision.HIGHEST (the trainer's attention runs
#           in TF32 by default on the GPU).
# Prediction (written before the run): auto f32 P falls to <= 1e-4 (from 5.4e-4), bf16 P stays
# ~6e-5 or rises; ref f32 P equals auto f32 P within noise; highest lowers f32 P further.
# Usage (repo root, with .whl/ and runs/tiny_f32 carried): bash experiments/gpu_sessions/gpu_session31c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r31c
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
save() { tar -C "$R" -czf "$OUT/r31c.tar.gz" .; }
timeout 120 python3 -m pytest -q -o addopts= -p no:cacheprovider tests/test_model.py \
  -k "decode_caches_values or prefill_then_decode" > "$R/test.txt" 2>&1
echo "test rc=$?"; save
source "$(dirname "$0")/../gpu_pm.sh"
pm auto 170 8; save
pm ref 110 4 --attention reference; save
JAX_DEFAULT_MATMUL_PRECISION=highest pm highest 130 4; save
tail -3 "$R/test.txt"
pm_summary auto ref highest
exit 0
