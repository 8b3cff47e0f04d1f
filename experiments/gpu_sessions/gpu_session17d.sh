#!/usr/bin/env bash
# Ran at commit 94a5576 (session 17).
# Session 17, one H200: the full-depth (48-layer) 30B decode step with the grouped expert
# kernel's direct store (17c: the 4-layer FP4 step at 32K 4.36 ms vs 4.53 with the gather in the
# same run; 128K 4.14 vs 4.13).
# Prediction (written before the run): FP4 at 32K 53.3 ms (16e) -> ~51.5 ms, FP4/BF16 2.88x ->
# ~2.97x; at 128K unchanged (~2.56-2.70x, 16e / 16f).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session17d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r17d
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
rollout_48l full 450
tar -C "$R" -czf "$OUT/r17d.tar.gz" . && cp "$R"/*.txt "$OUT/" 2>/dev/null
grep -E "^\| (fp4|bf16) " "$R/full/rollout_throughput.md" | sed "s/^/48L /" | cut -c1-160
grep -v "bfc_allocator\|If this is caused\|Current allocation" "$R/full.txt" | cut -c1-220 | tail -4
exit 0
