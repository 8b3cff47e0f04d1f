#!/usr/bin/env bash
# Ran at commit f21fcc5 (session 21).
# One H200: the full-depth (48-layer) 30B decode step with session 20's grouped expert defaults
# (the aligned x layout, mp 8 at 27 x 128K's 216 routed rows). The rollout does not call the
# dense Mosaic kernel: its dense projections are bf16.
# Prediction (written before the run): FP4 at 32K within +-1.5% of 19e's 53.05 ms (20d / 20e
# disagreed there: -2.0% / +0.9% at 4 layers); at 128K ~1.5-2% faster than 19e's 49.01 ms (20e:
# -2.1% at 4 layers; the expert share is smaller at 48 layers), FP4/BF16 ~2.70x; BF16 unchanged.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session21a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r21a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
rollout_48l full 450
tar -C "$R" -czf "$OUT/r21a.tar.gz" .
rollout_rows full
exit 0
