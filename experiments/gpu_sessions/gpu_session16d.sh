#!/usr/bin/env bash
# Ran at commit d148689 (session 16).
# Session 16, one H200: (1) the compiled 4-layer FP4 decode step (the program 16c profiled) with
# every profiled kernel attributed to its Python source lines (dump_step_hlo.py --by_source
# on 16c's profile): what the remaining ~570 us of small kernels per step compute; (2) how much
# of bench_rollout's step time at --loop 8 is per-call overhead: bf16 + fp4 at 32K with --loop 8
# and --loop 32 side by side (16c's profile: one ~1.7 ms idle gap per call before the first step).
# Prediction (written before the run): --loop 32 0.15-0.25 ms faster per step for both engines
# (FP4/BF16 ~5% lower at 4 layers; 48-layer runs are unaffected within 0.5%).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session16d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r16d
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
P=experiments/results/gpu/session16/step_small_ops/prof/profile/fp4_32768.json
timeout 150 python3 experiments/dump_step_hlo.py --context 32768 --batch 111 --kernel_layout \
  --out "$R/step_hlo.txt" --by_source "$P" > "$R/by_source.txt" 2>&1
echo "hlo rc=$?"
for loop in 8 32; do
  timeout 150 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
    --prefill_len 0 --kernel_layout --loop $loop --contexts 32768 --engines bf16,fp4 \
    --breakdown never --steps 64 --out "$R/roll_loop$loop" > "$R/roll_loop$loop.txt" 2>&1
  echo "loop $loop rc=$?"
done
gzip -k "$R/step_hlo.txt"; rm "$R/step_hlo.txt"
tar -C "$R" -czf "$OUT/r16d.tar.gz" . && cp "$R"/*.txt "$OUT/" 2>/dev/null
for loop in 8 32; do
  grep -E "^\| (fp4|bf16) " "$R/roll_loop$loop/rollout_throughput.md" | sed "s/^/loop$loop /" \
    | cut -c1-120
done
head -60 "$R/by_source.txt" | cut -c1-200; tail -40 "$R/by_source.txt"
exit 0
