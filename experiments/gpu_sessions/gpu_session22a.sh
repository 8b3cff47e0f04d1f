#!/usr/bin/env bash
# Ran at commit 69b8a7b (session 22, one H200).
# One H200, issue 6: the full-depth (48-layer) 30B decode step with session 21's last default,
# 2 weight tiles per program for the down projection (default_tiles), after 21e's fused serial
# gate / up / SwiGLU; then the 4-layer step at 32K with nt 2 and nt 1 side by side.
# Prediction (written before the run): 48 layers FP4 at 32K 51.4 ms (21e: 51.56; the down call
# 3.7 us faster per layer at 111 tokens), at 128K 47.7 ms (21e: 47.78; 1.6 us per layer); the
# 4-layer step nt 2 0.2-0.5% faster than nt 1 (within the run-to-run spread).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session22a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r22a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
rollout_48l full 330
for nt in default 1; do
  rollout_4l "step_nt$nt" 90 fp4 32768 --steps 16 --grouped_tiles $nt
done
tar -C "$R" -czf "$OUT/r22a.tar.gz" .
rollout_rows full step_ntdefault step_nt1
exit 0
