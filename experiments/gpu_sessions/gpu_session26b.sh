#!/usr/bin/env bash
# One H200, issue 6 (session 26): the issue's benchmark table (`python -m pallas_kernels.bench
# matmul`, device time) again, with the dense Mosaic kernel reading x unpadded (26a: the call at
# M = 1 40.3 us = 76.4% of copy, M = 8 40.6 us = 75.8%, outputs equal to the padded wrapper's).
# Prediction (written before the run): dense Mosaic 8192 x 28672 at M = 1 / 8 75-77% of the
# device-time copy (20c: 73-75%), M = 32 / 64 unchanged (~58% / ~39%: no pad there); the grouped
# rows as 20c within the run-to-run spread (+-3%).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session26b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r26b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
BENCH_TIME_LIMIT_S=300 timeout 420 python3 -m pallas_kernels.bench matmul --device-time \
  --sections exact,dense,grouped --out "$R/bench" > "$R/bench.txt" 2>&1; echo "bench rc=$?"
tar -C "$R" -czf "$OUT/r26b.tar.gz" .
grep -E "FAILED|Error|guard" "$R/bench.txt" | head -5
grep -E "^\| (dense|grouped)" "$R/bench/kernels_matmul.md" | grep -E "mosaic|xla_dot|ragged_dot|default|auto|s2 |p[0-9]" | cut -c1-160
exit 0
