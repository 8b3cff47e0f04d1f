#!/usr/bin/env bash
# Ran at commit 0db47aa (session 16).
# Session 16, one H200: 16f could not resolve the K/V append kernel in step time (4.40 / 4.49 ms
# with it, 4.43 without: the same step varies +-2% within a run). Device-time profiles of the
# 4-layer FP4 step at 32K with --kv_append auto and xla, side by side.
# Prediction (written before the run): with the kernel, 5 fewer launches per layer (20 per
# step) and ~8-12 us less device time per layer (-30..-50 us per step).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session16g.sh
source "$(dirname "$0")/../gpu_prelude.sh" r16g
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
for m in auto xla; do
  timeout 100 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
    --prefill_len 0 --kernel_layout --loop 8 --contexts 32768 --engines fp4 --breakdown never \
    --steps 8 --profile_steps 8 --kv_append $m --out "$R/prof_$m" > "$R/prof_$m.txt" 2>&1
  echo "$m rc=$?"
  rm -rf "$R"/prof_$m/profile/trace_*
done
tar -C "$R" -czf "$OUT/r16g.tar.gz" .
for m in auto xla; do
  f=$(ls "$R"/prof_$m/profile/*.md | head -1); echo "== $m"; sed -n 1p "$f"
  grep -E "append_kv_rows|input_scatter|wrapped_slice" "$f" | cut -c1-100
done
exit 0
