#!/usr/bin/env bash
# Session-6 GPU call E on one H200:
#   1. the FP4-KV attention's split combine (pallas_kernels.bench_attention_combine): the
#      reduction fused into the interleave transpose (before) vs kept apart (optimization
#      barrier), and fewer splits, at the rollout's FP4 shapes (B=111 x 32K, B=27 x 128K).
#   2. the rollout step as the engine runs it (--loop 8: 8 steps per jitted fori_loop) at 32K
#      and 128K, bf16 and fp4, per-layer params, with a profile: the numbers for the README.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session6e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r6e
timeout 200 python3 -m pallas_kernels.bench_attention_combine --out "$R/combine" > "$R/combine.txt" 2>&1
B="python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 --prefill_len 0 --kernel_layout --profile_steps 8 --loop 8"
timeout 150 $B --contexts 32768 --engines bf16,fp4,fp4_nohints --breakdown always --steps 24 \
  --out "$R/32k_loop" > "$R/32k_loop.txt" 2>&1
timeout 150 $B --contexts 131072 --engines bf16,fp4 --breakdown always --steps 24 \
  --out "$R/128k_loop" > "$R/128k_loop.txt" 2>&1
rm -rf "$R"/*/profile/trace_*
tar czf "$OUT/session6e.tgz" -C /tmp r6e
tail -22 "$R/combine.txt"
for c in 32k_loop 128k_loop; do echo "== $c"; grep -A5 "^| engine | experts via" "$R/$c/rollout_throughput.md" | cut -c1-150; \
  grep -A5 "^| engine | context | batch | step ms | attention" "$R/$c/rollout_throughput.md"; \
  grep -A6 "^## Targets" "$R/$c/rollout_throughput.md" | tail -4; \
  for f in "$R/$c"/profile/*.md; do head -1 "$f"; sed -n 5,10p "$f" | cut -c1-110; done; done
exit 0
