#!/usr/bin/env bash
# Ran at commit d65c17a (session 16).
# Session 16, one H200: the FP4-KV attention's split combine fused into the attention kernel
# (split_combine="fused": each split writes its partials, an acq_rel atomic counts them in, the
# last split of each (sequence, kv head) merges all P and writes the bf16 output).
# (1) check_attention_combine.py: the v6 call three ways (xla / kernel / fused), 4 NVFP4 shapes
#     and one MXFP4 shape; (2) the 4-layer 30B step, bf16 + fp4 (fused) at 32K and 128K, and fp4
#     with the separate combine kernel at both, side by side.
# Prediction (written before the run): fused call = the attention kernel + 3-5 us (the last
# split's merge of 16-32 partials, two per load, at the tail): 111 x 32K ~732 us (70.2% of copy;
# kernel combine 748.9 us), 128 x 32K ~851 (69.6%), 27 x 128K ~712 (70.5%), 32 x 32K ~238
# (62%); outputs within 1e-7 of XLA's (f32). The 4-layer FP4 step at 32K 4.46 -> ~4.39 ms
# (-4 x 17 us), FP4/BF16 ~3.38x.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session16a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r16a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 170 python3 experiments/check_attention_combine.py --out "$R/combine" \
  > "$R/combine.txt" 2>&1
echo "combine rc=$?"
timeout 200 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
  --prefill_len 0 --kernel_layout --loop 8 --contexts 32768,131072 --engines bf16,fp4 \
  --attn_combine fused --breakdown never --steps 12 --out "$R/roll" > "$R/roll.txt" 2>&1
echo "rollout rc=$?"
timeout 130 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
  --prefill_len 0 --kernel_layout --loop 8 --contexts 32768,131072 --engines fp4 \
  --attn_combine kernel --breakdown never --steps 12 --out "$R/roll_kernel" \
  > "$R/roll_kernel.txt" 2>&1
echo "rollout kernel rc=$?"
cp -r "$R"/* "$OUT/" 2>/dev/null
grep -E "^  fmt|Error|error" "$R/combine.txt" | cut -c1-400
grep -E "^\| (fp4|bf16) " "$R/roll/rollout_throughput.md" "$R/roll_kernel/rollout_throughput.md" \
  | cut -c1-160
exit 0
