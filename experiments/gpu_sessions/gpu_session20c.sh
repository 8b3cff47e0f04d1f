#!/usr/bin/env bash
# Ran at commit ce448ec (session 20).
# One H200, issue 6: the issue's benchmark table (`python -m pallas_kernels.bench matmul`) with
# the Mosaic GPU kernels in it for the first time (the dense kernel through `fp4_matmul` with
# Mosaic weights and its new split rule; the grouped kernel the rollout uses), device time on.
# The committed kernels_matmul.{md,json} were from session 2 (Triton v2 only).
# Prediction (written before the run): dense Mosaic 8192 x 28672 at M = 1 / 8 ~72-75% of the
# device-time copy, M = 32 ~58%, M = 64 ~39%; grouped Mosaic 55-65% on touched experts (19g /
# 20b), >= 2x ragged_dot; wall-time columns lower than device time (launch and host).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session20c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r20c
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
BENCH_TIME_LIMIT_S=300 timeout 420 python3 -m pallas_kernels.bench matmul --device-time \
  --sections exact,dense,grouped --out "$R/bench" > "$R/bench.txt" 2>&1; echo "bench rc=$?"
tar -C "$R" -czf "$OUT/r20c.tar.gz" .
grep -E "FAILED|Error|guard" "$R/bench.txt" | head -5
grep -E "^\| (dense|grouped)" "$R/bench/kernels_matmul.md" | grep -E "mosaic|xla_dot|ragged_dot|default|auto|s2 |p[0-9]" | cut -c1-160
exit 0
