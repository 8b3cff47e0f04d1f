#!/usr/bin/env bash
# Session-7 GPU call F on one H200: issue 8's full table in one run with the current code --
# every engine (bf16, FP4 with and without hint capture, FP4 weights with a bf16 KV cache, plain
# XLA bf16) at 8K, 32K and 128K (session 6 measured bf16/fp4 at 32K/128K only). No per-kernel
# breakdown here (session 6's profiles: throughput_s6/e_*_loop/profile/), to fit the time.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session7f.sh
source "$(dirname "$0")/../gpu_prelude.sh" r7f
timeout 300 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
  --kernel_layout --prefill_len 0 --loop 8 --steps 16 --breakdown never --copy_gb 1 \
  --contexts 8192,32768,131072 --engines bf16,fp4,fp4_nohints,fp4w_bf16kv,bf16_xla \
  --time_budget_s 250 --out "$R/all" > "$R/all.txt" 2>&1
tar czf "$OUT/session7f.tgz" -C /tmp r7f
grep -E "ctx|copy bandwidth" "$R/all.txt" | cut -c1-160
grep -A8 "^## Targets" "$R/all/rollout_throughput.md"
exit 0
