#!/usr/bin/env bash
# Ran at commit 8b41041 (session 15).
# Session 15, one H200: the grouped Mosaic wrapper with its per-row index / scale materialized
# (optimization_barrier). 15c's profile of the 30B 4-layer FP4 step at 32K: the Mosaic grouped
# kernels took 514 us per step (Triton's 689 us) but new fusions appeared, loop_add_fusion_5
# (209 us, 3 launches) and loop_reduce_fusion (70 us): we think XLA fused the [M, E] expert
# lookup into the consumers of the gathered rows and recomputed it per output element.
# Prediction (written before the run): those fusions gone; the FP4 step at 32K 4.84 -> 4.5-4.6 ms
# (~0.2-0.3 ms less), at 128K 4.48 -> 4.3-4.4 ms; FP4 / BF16 at 32K 2.92x -> 3.1-3.2x.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session15d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r15d
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 150 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
  --prefill_len 0 --kernel_layout --loop 8 --contexts 32768 --engines fp4 --breakdown never \
  --steps 8 --profile_steps 8 --out "$R/prof" > "$R/prof.txt" 2>&1
echo "profile rc=$?"
timeout 220 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
  --prefill_len 0 --kernel_layout --loop 8 --contexts 32768,131072 --engines bf16,fp4 \
  --breakdown never --steps 12 --out "$R/roll" > "$R/roll.txt" 2>&1
echo "rollout rc=$?"
f=$(ls "$R"/prof/profile/*.md | head -1); top=$(sed -n 5,12p "$f" | cut -d'`' -f2 | grep -v decode_attention | tr '\n' ',')
timeout 100 python3 experiments/dump_step_hlo.py --context 32768 --batch 111 --kernel_layout \
  --fusions "$top" --out "$R/step_hlo.txt" > "$R/fusions.txt" 2>&1
echo "hlo rc=$?"
cp -r "$R"/* "$OUT/" 2>/dev/null
head -1 "$f"; sed -n 3,14p "$f" | cut -c1-120
grep -E "^\| (fp4|bf16) " "$R/roll/rollout_throughput.md" | head -4
exit 0
