#!/usr/bin/env bash
# One H200, issue 7: the 4-layer 30B FP4 decode step with the attention's P rounded to bf16
# (rollout.attention_p_precision / bench_rollout.py --attn_p_precision bf16) against the f32
# split (the default). 29e: the attention call alone 13-15% faster with bf16 P.
# Prediction (written before the run): attention is ~73% of the FP4 step (23d), so the step
# 9-11% faster at 32K (4.25-4.49 -> ~3.9-4.0 ms) and 10-12% at 128K.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session29f.sh
source "$(dirname "$0")/../gpu_prelude.sh" r29f
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
rollout_4l step_f32 150 fp4 32768,131072 --steps 12 --attn_p_precision f32
rollout_4l step_bf16 150 fp4 32768,131072 --steps 12 --attn_p_precision bf16
tar -C "$R" -czf "$OUT/r29f.tar.gz" .
rollout_rows step_f32 step_bf16
exit 0
