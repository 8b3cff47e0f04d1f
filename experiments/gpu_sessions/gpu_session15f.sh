#!/usr/bin/env bash
# Ran at commit 6613c99 (session 15).
# Session 15, one H200: the FP4-KV attention's split combine as a Pallas kernel
# (attention_triton.combine_transposed_halves_pallas, now the default) against XLA's reduction
# (15d profile: 32 us per layer at B=111 x 32K, 58 MB of partials read at 1.8 TB/s).
# (1) check_attention_combine.py: the v6 call and the combine alone, both ways, 4 shapes;
# (2) the 4-layer 30B step (bf16 + fp4 at 32K and 128K) with the kernel, fp4 at 32K with XLA's.
# Prediction (written before the run): the combine 14-18 us at 111 x 32K (XLA ~32 us), max
# |difference| <= 1e-6 of outputs ~1; the call's % of copy +1.5-2 points; the FP4 step at 32K
# 4.60 -> 4.52-4.55 ms (FP4/BF16 3.25-3.27x).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session15f.sh
# 15g = `ROLLOUT_ONLY=1 bash experiments/gpu_sessions/gpu_session15f.sh` at commit 5257bda (the BF16 rows of
# 15f failed on a name the new `combine` argument shadowed; fixed there).
source "$(dirname "$0")/../gpu_prelude.sh" r15f
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
if [ -z "${ROLLOUT_ONLY:-}" ]; then  # ROLLOUT_ONLY=1: only (2) (how 15g re-ran it)
  timeout 110 python3 experiments/check_attention_combine.py --out "$R/combine" \
    > "$R/combine.txt" 2>&1
  echo "combine rc=$?"
fi
timeout 160 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
  --prefill_len 0 --kernel_layout --loop 8 --contexts 32768,131072 --engines bf16,fp4 \
  --breakdown never --steps 12 --out "$R/roll" > "$R/roll.txt" 2>&1
echo "rollout rc=$?"
timeout 90 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
  --prefill_len 0 --kernel_layout --loop 8 --contexts 32768 --engines fp4 --attn_combine xla \
  --breakdown never --steps 12 --out "$R/roll_xla" > "$R/roll_xla.txt" 2>&1
echo "rollout xla rc=$?"
cp -r "$R"/* "$OUT/" 2>/dev/null
[ -f "$R/combine.txt" ] && grep -E "^  batch|Error" "$R/combine.txt" | cut -c1-300
grep -E "^\| (fp4|bf16) " "$R/roll/rollout_throughput.md" "$R/roll_xla/rollout_throughput.md" | cut -c1-160
exit 0
