#!/usr/bin/env bash
# Session-6 GPU call F on one H200:
#   1. FP4-KV attention at the rollout shapes, wall time per synced call (the kernel tables'
#      protocol) next to the call's device time from a profile: how much of the per-call number
#      is launch / host overhead (in-step the kernel took 792 us at B=111 x 32K, the per-call
#      bench 1043-1082 us).
#   2. the rollout step with 32 steps per call (--loop 32; call E used 8): closer to the engine,
#      whose while loop runs a whole response per call.
#   3. the grouped expert matmul table after the loop-free item tables (bench_matmul grouped,
#      including the `grouped_tables` rows: old binary-search tables vs new, timed alone).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session6f.sh
source "$(dirname "$0")/../gpu_prelude.sh" r6f
timeout 150 python3 -m pallas_kernels.bench_attention_combine --profile --variants 0,1 \
  --out "$R/combine" > "$R/combine.txt" 2>&1
B="python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 --prefill_len 0 --kernel_layout --loop 32 --steps 96 --breakdown never"
timeout 100 $B --contexts 32768 --engines bf16,fp4 --out "$R/32k_loop32" > "$R/32k_loop32.txt" 2>&1
timeout 100 $B --contexts 131072 --engines bf16,fp4 --out "$R/128k_loop32" > "$R/128k_loop32.txt" 2>&1
BENCH_TIME_LIMIT_S=150 timeout 200 python3 -m pallas_kernels.bench_matmul --sections grouped \
  --out "$R/matmul" > "$R/matmul.txt" 2>&1
rm -rf "$R"/combine/profile/trace_*
tar czf "$OUT/session6f.tgz" -C /tmp r6f
tail -9 "$R/combine.txt"
for c in 32k_loop32 128k_loop32; do grep -A4 "^| engine | experts via" "$R/$c/rollout_throughput.md" | cut -c1-130; done
grep "^| grouped" "$R/matmul/kernels_matmul.md" | cut -c1-150
grep "FAILED\|Error" "$R/matmul.txt" | cut -c1-300 | head -5
exit 0
