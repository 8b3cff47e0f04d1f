#!/usr/bin/env bash
# Ran at commit a2ecfad (session 15).
# Session 15, one H200: why the 30B-shape 4-layer FP4 decode step at 32K is not faster with the
# Mosaic GPU grouped kernel (15b: 5.09 ms vs 4.95 ms with the Triton one, although the grouped
# call alone is 52.7 vs 81.4 us): per-kernel device time and idle gaps of one 8-step call with
# either kernel (bench_rollout --profile_steps).
# Prediction (written before the run): the Mosaic grouped kernels ~0.45-0.6 ms per step of 12
# calls (Triton's ~0.95 ms), and the loss is idle time: the Mosaic custom call is not captured
# in XLA's command buffer (CUDA graph), so the step splits into more graph launches with host
# gaps between them (wall - busy larger by >= 0.6 ms per step than Triton's).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session15c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r15c
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
for kern in mosaic triton; do
  timeout 200 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
    --prefill_len 0 --kernel_layout --expert_kernel $kern --loop 8 --contexts 32768 \
    --engines fp4 --breakdown never --steps 8 --profile_steps 8 --out "$R/$kern" \
    > "$R/$kern.txt" 2>&1
  echo "rollout $kern rc=$?"
done
cp -r "$R"/* "$OUT/" 2>/dev/null
for kern in mosaic triton; do
  grep -E "^\| fp4 " "$R/$kern/rollout_throughput.md" | head -1
  f=$(ls "$R/$kern"/profile/*.md | head -1); head -1 "$f"; sed -n 3,16p "$f" | cut -c1-120
  grep "Longest idle" "$f" | cut -c1-400
done
exit 0
