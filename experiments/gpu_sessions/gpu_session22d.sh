#!/usr/bin/env bash
# Ran at commit 36ab2fb (session 22, one H200).
# One H200: (1) check_quantize_values.py again after the sign fix (22c: codes, scales and hint
# bits equal to XLA's, but 1.5-8% of the values differed: the decoded -0 of code 8 came out +0,
# a float negation being 0 - v on the GPU; the sign bit is now OR-ed in); (2) the full-depth
# (48-layer) step with the values output in the model (22a: 50.65 / 47.69 ms, 2.97x / 2.70x).
# Prediction (written before the run): 0 mismatches in every row, the fused call as in 22c
# (3.6-5.9 us against 4.6-9.8 us); 48 layers 0.2-0.4 ms faster than 22a at both contexts (22c's
# profile: ~4.5 us of wall per layer), within the machines' spread.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session22d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r22d
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 120 python3 experiments/check_quantize_values.py --out "$R/qv" > "$R/qv.txt" 2>&1
echo "qv rc=$?"
rollout_48l full 330
tar -C "$R" -czf "$OUT/r22d.tar.gz" .
grep "^|" "$R/qv/quantize_values.md"; grep -iE "error|Traceback" "$R/qv.txt" | head -5
rollout_rows full
exit 0
