#!/usr/bin/env bash
# Ran at commit 13de93c (session 21).
# One H200, issue 6: the serial fused gate / up / SwiGLU kernel (default since 21d) in the
# 4-layer 30B FP4 step at 32K beside the overlapped one, then the full-depth (48-layer) step.
# Prediction (written before the run): 4 layers at 32K 0.5-1.5% faster than fused_overlap
# (~10 us per layer of ~1.1 ms); 48 layers: FP4 at 32K ~52.3 ms (21c: 52.80), at 128K within
# 0.5% of 21c's 49.05 ms (at 27 tokens serial saves ~1 us per layer).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session21e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r21e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
for v in fused fused_overlap; do
  rollout_4l "step_$v" 90 fp4 32768 --steps 16 --grouped_swiglu $v
done
rollout_48l full 330
tar -C "$R" -czf "$OUT/r21e.tar.gz" .
rollout_rows step_fused step_fused_overlap full
exit 0
