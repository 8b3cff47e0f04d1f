#!/usr/bin/env bash
# Session 36, an H100 (no H200 could be started). Issue 6: is dense M = 64 limited by the SMs'
# work (tensor pipe + shared memory, session 28's budget) or by DRAM? The H100 SXM has the same
# 132 SMs and clocks as the H200 but ~30% less copy bandwidth (3.03 against 4.31 TB/s).
# Prediction (before the run): if the SMs set M = 64's time, it stays at the H200's 73-76 us on
# the H100 (so 55-60% of the H100's copy); the bandwidth-bound M <= 8 rows scale with copy
# (41 us x 4.31 / 3.03 ~ 58 us, ~75%); M = 32 in between (~62-68 us). Grouped rows ~like M <= 8.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session36c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r36c
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
BENCH_TIME_LIMIT_S=${LIMIT:-330} timeout 420 python3 -m pallas_kernels.bench matmul --device-time \
  --sections dense,grouped --out "$R/bench" > "$R/bench.txt" 2>&1; echo "bench rc=$?"
tar -C "$R" -czf "$OUT/r36c.tar.gz" .
grep -E "FAILED|Error|guard" "$R/bench.txt" | head -5
grep -E "^\| (dense|grouped)" "$R/bench/kernels_matmul.md" | grep -E "mosaic|xla_dot|ragged_dot" \
  | cut -c1-150
exit 0
