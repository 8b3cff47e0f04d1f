#!/usr/bin/env bash
# Ran at commit 66e2028 (session 15).
# Session 15, one H200: the Mosaic GPU grouped FP4 matmul behind fp4_grouped_matmul
# (rollout.kernel_layout + expert_kernel "auto" = mosaic for the 30B experts), then the 30B-shape
# 4-layer decode step with either grouped kernel.
# (1) check_mgpu_matmul --grouped: decode shapes with the new defaults (mp 16, 2 stages) and a
#     W4A4 row through fp4_grouped_matmul (activation QTensor); (2) --prefill: 16K / 64K rows,
#     knob sweep for large groups; (3) bench_rollout, 4 layers, 32K and 128K: bf16 + fp4 with
#     mosaic experts, fp4 with triton experts.
# Prediction (written before the run): (1) the call 50-53 us at 888 rows (15a's s2 column),
#     W4A4 relerr ~1e-4 ... 2e-3 for both layouts (same as each other within 10%); (2) mp 56-120
#     beats mp 16 by 1.5-3x at 64K rows and reaches the Triton kernel's time or better;
#     (3) FP4 step at 32K 4.83 -> 4.6-4.7 ms (experts ~0.72 ms of it, 1.3x faster), ratio to
#     BF16 3.1-3.2x; at 128K a smaller gain (attention dominates).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session15b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r15b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 80 python3 experiments/check_mgpu_matmul.py --grouped --out "$R/grouped" 2>&1 \
  | grep -v Warning > "$R/grouped.txt"; echo "grouped rc=$?"
timeout 130 python3 experiments/check_mgpu_matmul.py --grouped --prefill --out "$R/prefill" 2>&1 \
  | grep -v Warning > "$R/prefill.txt"; echo "prefill rc=$?"
for kern in mosaic triton; do
  eng=$([ $kern = mosaic ] && echo bf16,fp4 || echo fp4)
  tl=$([ $kern = mosaic ] && echo 220 || echo 150)
  timeout $tl python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
    --prefill_len 0 --kernel_layout --expert_kernel $kern --loop 8 --contexts 32768,131072 \
    --engines $eng --breakdown never --steps 12 --out "$R/roll_$kern" > "$R/roll_$kern.txt" 2>&1
  echo "rollout $kern rc=$?"
done
cp -r "$R"/* "$OUT/" 2>/dev/null
grep -E "^\||Error" "$R/grouped.txt" | cut -c1-400 | head -8
grep -E "^\||Error" "$R/prefill.txt" | cut -c1-600 | head -8
for kern in mosaic triton; do grep -E "^\| (fp4|bf16) " "$R/roll_$kern/rollout_throughput.md" | head -4; done
exit 0
