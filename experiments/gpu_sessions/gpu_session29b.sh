#!/usr/bin/env bash
# One H200, issue 6 (prepared in session 28, not yet run): the issue's full table
# (`pallas_kernels.bench matmul --device-time`) with the session-28 defaults, with time for the
# grouped rows that 26b / 28c / 28e's time guards skipped; it replaces session 20c's
# `experiments/results/kernels_matmul.{md,json}` if every row ran. 29a made token-major
# partials the default up to 32 rows (default_token_major); this measures that too.
# Prediction (session 28; after 29a): Mosaic dense 73-77% (now 74-77%) at M = 1 / 8, 60-64%
# (now 62-64%) at 32, ~42% (now ~41%) at 64; grouped Mosaic 60-70%.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session29b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r29b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
BENCH_TIME_LIMIT_S=440 timeout 540 python3 -m pallas_kernels.bench matmul --device-time \
  --sections exact,dense,grouped --out "$R/bench" > "$R/bench.txt" 2>&1; echo "bench rc=$?"
tar -C "$R" -czf "$OUT/r29b.tar.gz" .
grep -E "FAILED|Error|guard" "$R/bench.txt" | head -5
grep -E "^\| (dense|grouped)" "$R/bench/kernels_matmul.md" | grep -E "mosaic|xla_dot|ragged_dot" \
  | cut -c1-150
exit 0
