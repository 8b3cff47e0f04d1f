#!/usr/bin/env bash
# Session 32 (prepared, not run: no device was lent), one H200: what session 32's numerics cost
# the trainer. Its attention now runs at Precision.HIGHEST (it was TF32 on the GPU) and every
# train-step jit compiles with exact bf16 casts. The 30B-shaped 2-layer RL step, bf16 and trace
# rows, exact casts / XLA's default (TRACE_JAX_EXCESS_PRECISION=1). Session 23e, same command,
# before both changes: bf16 92.5 ms, trace 83.2 ms.
# Prediction: attention is a small share at 1024 tokens; HIGHEST adds < 10% to either row;
# exact casts < 2%.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_session32b.sh
source "$(dirname "$0")/gpu_prelude.sh" r32b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
save() { tar -C "$R" -czf "$OUT/r32b.tar.gz" .; }
ts() {
  local name=$1; shift
  timeout 200 python3 experiments/bench_train_step.py --config configs/qwen3_30b_a3b.py \
    --layers 2 --batch 8 --seq_len 1024 --rows bf16,trace --steps 10 --out "$R/$name" \
    > "$R/$name.txt" 2>&1
  echo "$name rc=$?"
}
ts train_exact; save
TRACE_JAX_EXCESS_PRECISION=1 ts train_excess; save
show_table train_exact train_excess
exit 0
