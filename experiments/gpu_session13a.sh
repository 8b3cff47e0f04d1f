#!/usr/bin/env bash
# Session 13, one H200: FP4-KV decode attention v5 (issue 7) -- the K cache in the
# pallas_kernels.kv_layout word layout (codes bit-permuted at append time so that a word of 8
# codes decodes into its 4 bf16x2 MMA pairs with 8 integer ops instead of v4's 14; V, the MMAs,
# the softmax and every other step unchanged; bit-identical outputs in interpret mode).
# Static SASS (attention_compilecheck, default knobs block_k 32 / 1 warp / 3 stages): NVFP4
# 36.9 -> 34.2 per cache row (-7.3%), registers 165 -> 137; MXFP4 (64 / 2 warps) 39.8 -> 36.9.
# 1) python -m pallas_kernels.bench_attention_v5: v4 (natural K) vs v5 (word K), device time,
#    NVFP4 and MXFP4, B x ctx from 32 x 8K to 32 x 128K, |v5 - v4| and relerr vs the reference.
# 2) the 30B-shape decode step, 4 layers, 32K (bench_rollout): FP4 with the natural K cache
#    (v4) and with the word layout (v5, init_cache's default) plus BF16, one run each.
# Prediction (written before the run): the kernel was issue-bound (session-8 profile: 70% of
# issue slots busy), so v5 is 1.04-1.08x v4 from 32K up for both formats (NVFP4 B=32 x 32K
# ~250 -> ~235 us device time, 57-67% of copy across the shapes: the 70% target still missed);
# |v5 - v4| <= 1e-7 (the same decoded values; only FMA scheduling can differ); FP4 4-layer step at
# 32K 3-5% faster (attention ~800 us per layer, -40 to -60 us).
# Usage (repo root): bash experiments/gpu_session13a.sh
source "$(dirname "$0")/gpu_prelude.sh" r13a
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 240 python3 -m pallas_kernels.bench_attention_v5 --out "$R" > "$R/attn.txt" 2>&1
echo "attention rc=$?"
unset XLA_PYTHON_CLIENT_PREALLOCATE
for lay in natural kv_words; do
  eng=fp4; [ "$lay" = kv_words ] && eng=bf16,fp4
  timeout 170 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
    --prefill_len 0 --kernel_layout --loop 8 --contexts 32768 --engines $eng --breakdown never \
    --steps 12 --k_cache_layout $lay --out "$R/roll_$lay" > "$R/roll_$lay.txt" 2>&1
  echo "rollout $lay rc=$?"
done
tar czf "$OUT/session13a.tgz" -C /tmp r13a
grep -iE "error|Traceback" "$R/attn.txt" | head -3
for lay in natural kv_words; do grep -E "^\| (fp4|bf16) " "$R/roll_$lay/rollout_throughput.md" | head -4; done
tail -16 "$R/kernels_attention_v5.md"
exit 0
