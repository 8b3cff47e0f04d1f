#!/usr/bin/env bash
# Session-6 GPU call D on one H200: the decode step with per-layer rollout params (session 6's
# fix: the call-C profile showed every layer's expert weights copied out of the stacked arrays
# before each Pallas call, memcpy128 x 3 per layer for bf16 (2.24 ms of a 4-layer step) and x 6
# for FP4 (0.65 ms)). bench_rollout, 30B shape, 4 layers, --kernel_layout, breakdown and a
# 5-step profile per engine: 32K (bf16, fp4, fp4_nohints) and 128K (bf16, fp4); then 32K
# bf16/fp4 with XLA command buffers off (is the ~1.7 ms of device idle per step graph updates?),
# and 32K bf16/fp4 timed as the engine runs them: 8 steps per call in one jitted fori_loop.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session6d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r6d
B="python3 experiments/bench_rollout.py --loop 1 --config configs/qwen3_30b_a3b.py --layers 4 --prefill_len 0 --kernel_layout --profile_steps 5"
timeout 200 $B --contexts 32768 --time_budget_s 140 --engines bf16,fp4,fp4_nohints \
  --breakdown always --out "$R/32k" > "$R/32k.txt" 2>&1
timeout 150 $B --contexts 131072 --time_budget_s 80 --engines bf16,fp4 --breakdown always \
  --steps 10 --out "$R/128k" > "$R/128k.txt" 2>&1
XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 120 $B --contexts 32768 --engines bf16,fp4 \
  --breakdown never --steps 10 --out "$R/32k_nocb" > "$R/32k_nocb.txt" 2>&1
timeout 150 $B --contexts 32768 --engines bf16,fp4 --breakdown never --steps 24 --loop 8 \
  --out "$R/32k_loop" > "$R/32k_loop.txt" 2>&1
rm -rf "$R"/*/profile/trace_*
tar czf "$OUT/session6d.tgz" -C /tmp r6d
for c in 32k 128k 32k_nocb 32k_loop; do echo "== $c"; grep -A4 "^| engine | experts via" "$R/$c/rollout_throughput.md" | cut -c1-150; \
  grep -A4 "^| engine | context | batch | step ms | attention" "$R/$c/rollout_throughput.md"; \
  for f in "$R/$c"/profile/*.md; do head -1 "$f"; sed -n 5,9p "$f" | cut -c1-110; tail -1 "$f" | cut -c1-400; done; done
exit 0
