#!/usr/bin/env bash
# One H200 (session 27): 27a's RL part again with tensorboardX carried (the host lacks it): a
# 10-step RL run of configs/small.py (20 SFT steps) on the session's code. Prediction: finite
# metrics, hinted code agreement >= 0.99 at every step, no error.
# Usage (repo root, with .whl/ holding ml-collections, jax-triton and tensorboardX wheels):
#   bash experiments/gpu_sessions/gpu_session27b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r27b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 300 python3 -m trace_jax.main --config=configs/small.py --config.workdir=/tmp/small \
  --config.sft.steps=20 --config.train.steps=10 > "$R/rl_small_raw.txt" 2>&1
echo "rl rc=$?"
tr '\r' '\n' < "$R/rl_small_raw.txt" | grep -E "^step|Error|error" > "$R/rl_small.txt"
cp /tmp/small/metrics.jsonl "$R/rl_small_metrics.jsonl" 2>/dev/null
tar -C "$R" -czf "$OUT/r27b.tar.gz" .
cat "$R/rl_small.txt" | cut -c1-200 | tail -n 12
exit 0
