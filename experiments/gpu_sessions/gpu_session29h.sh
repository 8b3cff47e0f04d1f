#!/usr/bin/env bash
# Prepared in session 29, not yet run (its device time was spent).
# One H200, issue 7: 29e's f32 / bf16 P comparison for MXFP4 caches (the Triton v6 kernel,
# MXFP4 knobs) at the rollout shapes, and NVFP4 at two small-batch shapes.
# Prediction (written before the run): MXFP4 bf16 P 10-15% faster (60% of copy -> 67-70%);
# NVFP4 8 x 128K and 32 x 8K 8-14% faster.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session29h.sh
source "$(dirname "$0")/../gpu_prelude.sh" r29h
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
attention_check mx 80 --shapes 111:32768,27:131072 --no-mosaic --fmt mxfp4 \
  --triton-variants ";bf16_p=1"
attention_check small 60 --shapes 8:131072,32:8192 --no-mosaic --triton-variants ";bf16_p=1"
tar -C "$R" -czf "$OUT/r29h.tar.gz" .
mgpu_attention_summary mx
mgpu_attention_summary small
exit 0
