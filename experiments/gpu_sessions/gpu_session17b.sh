#!/usr/bin/env bash
# Ran at commit dc1c1e9 (session 17).
# (The grouped kernel's gather store and the --stores / --grouped_store flags it used were
# removed after 17c: the direct store measured faster. To rerun, check out the commit above.)
# Session 17, one H200: why 17a's 4-layer FP4 step got slower (4.58 ms vs 4.40 ms with the
# session-16 paths in the same run). The attention's bf16 partials explain ~+50 us per 4 layers
# (17a: the kernel 2.5% slower at 111 x 32K; now back to f32 by default). Left: the grouped
# kernel's direct store in the model's W4A4 call (row scales), which 17a did not time: its
# row-scale loads ran inside the store branches (now hoisted before them).
# (1) check_mgpu_matmul --grouped --stores both, now with the W4A4 call timed;
# (2) the 4-layer step, bf16 + fp4 (direct store) and fp4 with --grouped_store gather, 32K / 128K;
# (3) device-time profiles of the fp4 step at 32K, direct and gather.
# Prediction (written before the run): W4A4 direct within +-2 us of gather per call (bf16 x:
# 17a had direct 0-4.5 us faster); the FP4 step at 32K ~4.40 ms with either store (17a's old
# paths), direct <= gather by ~0.02 ms.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session17b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r17b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 150 python3 experiments/check_mgpu_matmul.py --grouped --stores both --out "$R/grouped" \
  > "$R/grouped.txt" 2>&1; echo "grouped rc=$?"
rollout_4l roll 150 bf16,fp4 32768,131072 --steps 12
rollout_4l roll_gather 100 fp4 32768,131072 --steps 12 --grouped_store gather
rollout_4l prof 90 fp4 32768 --steps 8 --profile_steps 8
rollout_4l prof_gather 90 fp4 32768 --steps 8 --profile_steps 8 --grouped_store gather
tar -C "$R" -czf "$OUT/r17b.tar.gz" . && cp "$R"/*.txt "$OUT/" 2>/dev/null
# (as run: inline loops, now gpu_prelude's show_table / rollout_rows)
show_table grouped
rollout_rows roll roll_gather
for n in prof prof_gather; do
  f=$(ls "$R"/$n/profile/*.md 2>/dev/null | head -1); [ -n "$f" ] && sed -n 1,22p "$f" | cut -c1-120
done
exit 0
