#!/usr/bin/env bash
# (Ran at commit 286fe87; later commits changed what it calls: check out 286fe87 to repeat it.)
# Session 14, one H200: the FP4 split count that fills the last wave (attention_triton.fp4_splits,
# now the default: splits need not divide the cache blocks) against the old power-of-two
# default and neighbours, NVFP4 v6, device time; then the 30B-shape 4-layer decode step at 32K
# with the new default (session 13c: FP4 4.91 ms, 3.03x BF16).
# Why: session 14a (gpu_session14a.sh) measured the kernel time against programs per wave
# (11 programs of 1 warp per SM, 1452 slots): 1024 / 2048 / 4096 / 8192 / 16384 programs at
# 128 x 32K = 0.71 / 1.41 / 2.82 / 5.64 / 11.3 waves took 904 / 957 / 887 / 845 / 835 us.
# Prediction (written before the run): 17 splits at 128 x 32K (8704 programs = 5.99 waves)
# kernel 845 -> 805-830 us, call 866 -> 830-850 us (69.5-71% of copy); 68 splits at 32 x 128K
# (5.99 waves) 882 -> 850-870 us; 32 x 32K (68) 253 -> 243-252 us; B = 111 (26 vs the old 32)
# within +-3%; every output within 2e-7 of the first row's (summation order only).
# Usage (repo root, with .whl/ml_collections-1.1.0-py3-none-any.whl carried):
#   bash experiments/gpu_sessions/gpu_session14b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r14b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
python3 -m pallas_kernels.bench_attention_v5 --splits --out "$R/splits" 2>&1 | grep -v Warning
timeout 200 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
  --prefill_len 0 --kernel_layout --loop 8 --contexts 32768 --engines bf16,fp4 --breakdown never \
  --steps 12 --out "$R/roll" > "$R/roll.txt" 2>&1
echo "rollout rc=$?"
grep -E "^attention kernel" "$R/roll/rollout_throughput.md"
grep -E "^\| (fp4|bf16) " "$R/roll/rollout_throughput.md" | head -4
cp -r "$R/splits" "$R/roll" "$OUT/"
exit 0
