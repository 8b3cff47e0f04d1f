#!/usr/bin/env bash
# Session-7 GPU call E on one H200: full-model prefill of an 8K prompt (30B shape, 4 layers,
# batch 1) now that bf16 expert matmuls at prefill sizes run on the Pallas grouped kernel with
# training tiles (session 3 measured prefill through ragged_dot).
#   1. --kernel_layout: BF16 = Pallas bf16 grouped; FP4 = the Pallas FP4 grouped kernel
#   2. default layout: BF16 = plain ragged_dot (bench rows name it); FP4 = dequantize + Pallas bf16
# Usage (repo root): bash experiments/gpu_sessions/gpu_session7e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r7e
for mode in kernel default; do
  flag=$([ $mode = kernel ] && echo --kernel_layout)
  timeout 150 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
    --contexts "" --engines bf16,fp4 --prefill_len 8192 --steps 10 --copy_gb 0.5 $flag \
    --out "$R/$mode" > "$R/$mode.txt" 2>&1
done
tar czf "$OUT/session7e.tgz" -C /tmp r7e
grep -h "^prefill" "$R/kernel.txt" "$R/default.txt" | cut -c1-250
grep -h "Error\|Traceback" "$R/kernel.txt" "$R/default.txt" | head -5 | cut -c1-250
exit 0
