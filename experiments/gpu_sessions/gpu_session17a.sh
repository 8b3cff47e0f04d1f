#!/usr/bin/env bash
# Ran at commit 3aa8490 (session 17).
# (The grouped kernel's gather store and the --stores / --grouped_store flags it used were
# removed after 17c: the direct store measured faster. To rerun, check out the commit above.)
# Session 17, one H200: fewer bytes beside the two big kernels of the FP4 decode step.
# (a) The Mosaic grouped expert kernel stores its tokens' bf16 rows, scaled, straight at their
#     sorted positions (fp4_matmul_mgpu store="direct"): no padded f32 output (~25 MB per down
#     projection at 888 rows), no gather, no [M, E] expert lookup. Side by side with "gather".
# (b) The attention's split partials in the output dtype (bf16): half the partial bytes (~2.7%
#     of the KV bytes at 32 splits, written by the kernel and read by the combine).
# Prediction (written before the run): (a) 888 rows x 2048 x 768 call 44.7-52.7 -> 36-40 us,
# bit-identical to gather; (b) the call -2% at the large shapes (111 x 32K 743 -> ~728 us,
# 70.5% of copy), -4% at 32 x 32K (more partials per KV byte), max diff ~1 bf16 ulp of the
# output; (c) the 4-layer FP4 step at 32K 4.31 -> ~4.16 ms, FP4/BF16 ~3.5x; with both changes
# off the step as in 16c.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session17a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r17a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 150 python3 experiments/check_mgpu_matmul.py --grouped --stores both --out "$R/grouped" \
  > "$R/grouped.txt" 2>&1; echo "grouped rc=$?"
timeout 150 python3 experiments/check_attention_combine.py --out "$R/partials" \
  --combines "kernel:::bf16/f32,kernel:::bf16,kernel:::f32" > "$R/partials.txt" 2>&1
echo "partials rc=$?"
rollout_4l roll 150 bf16,fp4 32768,131072 --steps 12
rollout_4l roll_old 120 fp4 32768,131072 --steps 12 --attn_partial_dtype f32 --grouped_store gather
tar -C "$R" -czf "$OUT/r17a.tar.gz" . && cp "$R"/*.txt "$OUT/" 2>/dev/null
# (as run: inline loops, now gpu_prelude's show_table / rollout_rows)
show_table grouped partials
rollout_rows roll roll_old
exit 0
