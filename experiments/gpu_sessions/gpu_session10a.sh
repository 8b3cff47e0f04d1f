#!/usr/bin/env bash
# Session 9 (one H200; run as CONTEXTS=32768 LIMIT_S=120 and CONTEXTS=131072 LIMIT_S=100, results in
# experiments/results/gpu/session9/split_target/, NOTES_attention): the FP4-KV attention's split
# count inside the 30B decode step. At B = 111 x 32K the 1-warp NVFP4 kernel aims for 8192
# programs -> 32 splits, and the split combine reads 58 MB of f32 partials in ~32 us per layer
# (session 8 profile). Split target 4096 -> 16 splits. Prediction (session 6's kernel sweep: 819
# vs 838 us at 32K, ~2% slower at 128K): at 32K the FP4 step ~2.5% faster (kernel -19 us and
# combine -16 us per layer of ~1,280); at 128K (27 x 4 pairs: 128 -> 64 splits) within +-1%.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session10a.sh   (env CONTEXTS, LIMIT_S per run)
source "$(dirname "$0")/../gpu_prelude.sh" r10a
for t in 0 4096; do
  timeout "${LIMIT_S:-140}" python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
    --kernel_layout --prefill_len 0 --loop 8 --steps 16 --breakdown never --engines fp4 \
    --contexts "${CONTEXTS:-32768,131072}" --profile_steps 4 --attn_split_target $t --out "$R/t$t" \
    > "$R/t$t.txt" 2>&1
done
tar czf "$OUT/session10a.tgz" -C /tmp r10a
for t in 0 4096; do echo "== split target $t"; grep -E "^\| fp4" "$R/t$t/rollout_throughput.md"; done
exit 0
