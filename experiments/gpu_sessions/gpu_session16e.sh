#!/usr/bin/env bash
# Ran at commit 7e40967 (session 16).
# Session 16, one H200: the session's FP4 decode-step changes at full depth. Since 15e (48
# layers, 2.77x at 32K / 2.55x at 128K): the split combine as a Pallas kernel (15g), the
# attention launch order grid (P, H, B) (16b), the activation sites through the fused quantize
# kernel, the routing order by a rank count, the grouped wrapper's triangle cumsums (16c), and
# now K and V put in the cache layout in one pass and the combine writing bf16 (no convert pass).
# (1) the 4-layer step (bf16 + fp4, 32K and 128K) as 16c; (2) 48 layers as 15e.
# Prediction (written before the run): ~-70 us per layer against 15e (16c measured -45 us per
# layer for the quantize kernel alone, side by side): 48 layers FP4 at 32K 54.6 -> ~51 ms
# (FP4/BF16 ~2.95x), at 128K 50.8 -> ~48 ms (~2.7x); machines differ by up to ~8% (16c vs 16d:
# 4.31 vs 4.66 ms for the same 4-layer FP4 step), BF16 ~27 / ~24 ms.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session16e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r16e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
# (as run: the same two commands written out, now gpu_prelude's helpers)
rollout_4l roll 120 bf16,fp4 32768,131072 --steps 12
rollout_48l full 450
tar -C "$R" -czf "$OUT/r16e.tar.gz" . && cp "$R"/*.txt "$OUT/" 2>/dev/null
grep -E "^\| (fp4|bf16) " "$R/roll/rollout_throughput.md" | sed "s/^/4L /" | cut -c1-120
grep -E "^\| (fp4|bf16) " "$R/full/rollout_throughput.md" | sed "s/^/48L /" | cut -c1-160
grep -v "bfc_allocator\|If this is caused\|Current allocation" "$R/full.txt" | cut -c1-220 | tail -4
exit 0
