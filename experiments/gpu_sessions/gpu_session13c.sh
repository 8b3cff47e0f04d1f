#!/usr/bin/env bash
# Session 13, one H200: the 30B-shape decode step (4 layers, 32K, bench_rollout; needs the
# ml-collections wheel, see the device notes) with natural FP4 KV caches (attention v4) against
# the kv_words layout (v6, init_cache's default; v6 knobs from gpu_session13b's sweep), plus BF16
# for the ratio. Prediction (written before the run): attention ~800 of ~1283 us per layer, v6
# 1.06-1.09x at these shapes: the FP4 step 3-5% faster; FP4/BF16 (4 layers) 2.89x -> ~3.0x.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session13c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r13c
for lay in natural kv_words; do
  eng=fp4; [ "$lay" = kv_words ] && eng=bf16,fp4
  timeout 150 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
    --prefill_len 0 --kernel_layout --loop 8 --contexts 32768 --engines $eng --breakdown never \
    --steps 12 --kv_cache_layout $lay --out "$R/roll_$lay" > "$R/roll_$lay.txt" 2>&1
  echo "rollout $lay rc=$?"
done
tar czf "$OUT/session13c.tgz" -C /tmp r13c
for lay in natural kv_words; do
  grep -E "^attention kernel" "$R/roll_$lay/rollout_throughput.md"
  grep -E "^\| (fp4|bf16) " "$R/roll_$lay/rollout_throughput.md" | head -4
done
tail -3 "$R/roll_kv_words.txt"
exit 0
