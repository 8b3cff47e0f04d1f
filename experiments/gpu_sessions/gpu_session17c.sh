#!/usr/bin/env bash
# Ran at commit d9e8a81 (session 17).
# (The grouped kernel's gather store and the --stores / --grouped_store flags it used were
# removed after 17c: the direct store measured faster. To rerun, check out the commit above.)
# Session 17, one H200: 17b found the grouped kernel's direct store as fast as the gather in
# device time (the padded f32 writes were not the kernel's limit: kernel alone 40.0 vs 39.6 us at
# 888 rows) but the FP4 step slower (4.53 vs 4.45 ms at 32K): +16 launches per 4 layers (a
# global-scale multiply per call, a memcpy and the window fusions per layer). Now the kernel
# takes the group sizes and their cumsum and derives its windows, global scale and row-scale
# index in its scalar code: one XLA fusion (the cumsum, shared by a layer's calls) besides it.
# Prediction (written before the run): launches per 4-layer step 228 -> <= 212 (gather's);
# busy ~4175 us; the FP4 step at 32K direct <= gather by 0.01-0.03 ms; the calls as in 17b.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session17c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r17c
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 150 python3 experiments/check_mgpu_matmul.py --grouped --stores both --out "$R/grouped" \
  > "$R/grouped.txt" 2>&1; echo "grouped rc=$?"
rollout_4l roll 150 bf16,fp4 32768,131072 --steps 12
rollout_4l roll_gather 100 fp4 32768,131072 --steps 12 --grouped_store gather
rollout_4l prof 90 fp4 32768 --steps 8 --profile_steps 8
tar -C "$R" -czf "$OUT/r17c.tar.gz" . && cp "$R"/*.txt "$OUT/" 2>/dev/null
# (as run: inline loops, now gpu_prelude's show_table / rollout_rows)
show_table grouped
rollout_rows roll roll_gather
f=$(ls "$R"/prof/profile/*.md 2>/dev/null | head -1); [ -n "$f" ] && sed -n 1,22p "$f" | cut -c1-120
exit 0
