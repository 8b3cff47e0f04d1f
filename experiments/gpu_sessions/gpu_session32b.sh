#!/usr/bin/env bash
# Session 32 (prepared, not run: no device was lent), one H200: what session 32's numerics cost.
# The trainer's attention now runs at Precision.HIGHEST (it was TF32 on the GPU), its FP4 experts
# put the global scale on the accumulator (ops.ScaledExperts, in the bf16 grouped kernel's
# epilogue), and every jit compiles with exact bf16 casts. The 30B-shaped 2-layer RL step, bf16
# and trace rows, exact casts / XLA's default (TRACE_JAX_EXCESS_PRECISION=1). Session 23e, same command,
# before both changes: bf16 92.5 ms, trace 83.2 ms.
# Then the 4-layer 30B NVFP4 decode step (bench_rollout --loop 8), exact / excess casts.
# Prediction: attention is a small share at 1024 tokens; HIGHEST adds < 10% to either train
# row; exact casts cost the train step and the decode step < 2%.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session32b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r32b
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
rollout_4l step_exact 100 fp4 32768 --steps 12; save
TRACE_JAX_EXCESS_PRECISION=1 rollout_4l step_excess 100 fp4 32768 --steps 12; save
show_table train_exact train_excess step_exact step_excess
exit 0
