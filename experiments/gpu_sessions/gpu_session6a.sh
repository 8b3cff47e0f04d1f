#!/usr/bin/env bash
# Session-6 GPU call A on one H200 (results under $OUT as one tarball): the rollout throughput
# benchmark (issue 8) after session 5's last, then unmeasured, fix: the grouped expert matmul
# wrappers built their per-tile item tables with jnp.searchsorted, a binary-search lax loop that
# becomes a GPU while loop (2 per FP4 call, 288 per 48-layer decode step); now a loop-free
# compare-all search. Same runs as session 5's call D (30B shape, 4 layers, --kernel_layout,
# 32K with hints on and off, then 128K), each process alone on the GPU.
# Prediction (NOTES_matmul): FP4 128K experts 3.3 -> ~1-1.5 ms, FP4 step ~5 ms, ratio ~4.5x.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session6a.sh
# --loop 1 --stacked: how this ran (session 6 later made 8-step loops and per-layer params the defaults)
source "$(dirname "$0")/../gpu_prelude.sh" r6a
timeout 190 python3 experiments/bench_rollout.py --loop 1 --stacked --config configs/qwen3_30b_a3b.py --layers 4 \
  --contexts 32768 --prefill_len 0 --time_budget_s 130 --kernel_layout \
  --engines bf16,fp4,fp4_nohints --breakdown always --out "$R/32k" > "$R/32k.txt" 2>&1
timeout 150 python3 experiments/bench_rollout.py --loop 1 --stacked --config configs/qwen3_30b_a3b.py --layers 4 \
  --contexts 131072 --prefill_len 0 --time_budget_s 80 --kernel_layout --engines bf16,fp4 \
  --breakdown always --steps 10 --out "$R/128k" > "$R/128k.txt" 2>&1
tar czf "$OUT/session6a.tgz" -C /tmp r6a
for c in 32k 128k; do grep -A6 "^| engine | experts via" "$R/$c/rollout_throughput.md"; \
  grep -A5 "^| engine | context | batch | step ms | attention" "$R/$c/rollout_throughput.md"; \
  tail -3 "$R/$c.txt"; done
exit 0
