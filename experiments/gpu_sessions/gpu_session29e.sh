#!/usr/bin/env bash
# One H200, issue 7: what the FP4-KV attention kernel's f32 P costs. The Triton v6 kernel (the
# model's default) splits P into bf16 hi + lo terms for P.V (two MMAs and the split per
# element; `precision="f32"`, 8e-7 relative error at 128K against float64, session 2) where
# `precision="bf16"` rounds P once (5e-4). Its cost was never timed on v6.
# Prediction (written before the run): bf16 P 3-8% faster at the rollout shapes (111 x 32K,
# 27 x 128K, 128 x 32K: 69% of copy -> 71-75%), 2-6% at 32 x 32K; the relative error against
# the reference 10-50x larger. Not a default candidate by itself (the accuracy is why f32 P
# is the default); it says what share of the kernel the P split is.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session29e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r29e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
attention_check pbf16 300 --shapes 111:32768,27:131072,128:32768,32:32768 --no-mosaic \
  --triton-variants ";bf16_p=1"
tar -C "$R" -czf "$OUT/r29e.tar.gz" .
mgpu_attention_summary pbf16
exit 0
