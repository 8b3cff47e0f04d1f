#!/usr/bin/env bash
# Session-5 GPU call D on one H200 (results under $OUT as one tarball): the rollout throughput
# benchmark (issue 8), --kernel_layout, 30B shape with 4 layers, at 32K (with hints on and off)
# and 128K, each process alone on the GPU, after session 5's kernel defaults: persistent grouped
# expert matmuls (bf16 and FP4) and the v4 FP4-KV attention knobs from its own sweep.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session5d.sh
# --loop 1 --stacked: how this ran (session 6 later made 8-step loops and per-layer params the defaults)
source "$(dirname "$0")/../gpu_prelude.sh" r5d
timeout 190 python3 experiments/bench_rollout.py --loop 1 --stacked --config configs/qwen3_30b_a3b.py --layers 4 \
  --contexts 32768 --prefill_len 0 --time_budget_s 130 --kernel_layout \
  --engines bf16,fp4,fp4_nohints --breakdown always --out "$R/32k" > "$R/32k.txt" 2>&1
timeout 150 python3 experiments/bench_rollout.py --loop 1 --stacked --config configs/qwen3_30b_a3b.py --layers 4 \
  --contexts 131072 --prefill_len 0 --time_budget_s 80 --kernel_layout --engines bf16,fp4 \
  --breakdown always --steps 10 --out "$R/128k" > "$R/128k.txt" 2>&1
tar czf "$OUT/session5d.tgz" -C /tmp r5d
for c in 32k 128k; do grep -A6 "^| engine | experts via" "$R/$c/rollout_throughput.md"; \
  grep -A5 "^| engine | context | batch | step ms | attention" "$R/$c/rollout_throughput.md"; \
  tail -3 "$R/$c.txt"; done
exit 0
