#!/usr/bin/env bash
# Ran at commit 9824129 (session 19).
# One H200: the full-depth (48-layer) 30B decode step at the end of session 19 (the Triton
# attention's chunked split combine and split rule; the rollout's shapes 111 x 32K / 27 x 128K
# keep their split counts 32 / 128; 19c: the 27 x 128K call 707 -> 702 us).
# Prediction (written before the run): FP4 at 32K ~51.8 ms (17d: 51.77), FP4/BF16 ~2.96x; at
# 128K ~49.0 ms (17d: 49.35; the combine -5 us x 48 layers), ~2.67x.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session19e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r19e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
rollout_48l full 450
tar -C "$R" -czf "$OUT/r19e.tar.gz" .
grep -E "^\| (fp4|bf16) " "$R/full/rollout_throughput.md" | sed "s/^/48L /" | cut -c1-160
grep -v "bfc_allocator\|If this is caused\|Current allocation" "$R/full.txt" | cut -c1-220 | tail -4
exit 0
