#!/usr/bin/env bash
# Session 34, one H200, the last ~5 device minutes: trace_jax.diagnose on configs/small.py
# (random init; as experiments/gpu_smoke.sh) with session 34's code: exact bf16 casts, the
# trainer replaying the rollout's P, FP4 experts multiplied as the kernels do, and the new
# fp4_qat_rtn+r3 row. The README's small.py table (session 5-era code) read TRACE+R3 gap max
# 0.089 with 94.8% of hinted codes equal, RTN 0.145 / 47.4%.
# Prediction: the tiny checkpoint's GPU study was exact (gpu_session34a.sh), so every replaying
# variant's gap <= 1e-3 and hinted agreement >= 0.999 at small.py too, unless small.py's shapes
# take kernels the tiny config does not.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session34b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r34b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
diagnose_small "${DIAG_LIMIT:-220}"  # (experiments/gpu_prelude.sh)
exit 0
