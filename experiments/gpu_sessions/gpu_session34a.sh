#!/usr/bin/env bash
# Session 34, one H200, one call (~590 s). Session 34's first call (gpu_session32a.sh) showed, with
# exact bf16 casts, TRACE's GPU rollout and trainer bit-identical under f32 P (kl_k3 0 in 5 of 5
# batches) and ~1e-8 under bf16 P, against 1.2-2.8e-3 with XLA's excess precision; its 150 s
# limits cut every study short of its table. This call, in priority order (each step only while
# time is left):
#   exact        the full P-precision study (8 batches, every variant: naive, RTN QAT, TRACE,
#                TRACE+R3, the bf16 engine), exact casts;
#   step_*       the 4-layer 30B NVFP4 decode step (bench_rollout --loop 8, 32K), exact / excess;
#   train_*      the 30B-shaped 2-layer RL step, trace row, exact / excess.
# Prediction: exact table: trace 0 / ~1e-8 (f32 / bf16 P), RTN QAT > 0 under bf16 P, bf16 engine
# ~0; exact casts cost the decode and train steps < 2%.
# Usage (repo root, with .whl/ and runs/tiny_f32 carried): bash experiments/gpu_sessions/gpu_session34a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r34a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
save() { tar -C "$R" -czf "$OUT/r34a.tar.gz" .; }
left() { [ $((570 - SECONDS)) -ge "$1" ]; }  # at least $1 seconds left of the call's ~570
source "$(dirname "$0")/../gpu_pm.sh"
pm exact 230 8; save
left 100 && { rollout_4l step_exact 95 fp4 32768 --steps 12; save; }
left 100 && { TRACE_JAX_EXCESS_PRECISION=1 rollout_4l step_excess 95 fp4 32768 --steps 12; save; }
ts() {
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 experiments/bench_train_step.py --config configs/qwen3_30b_a3b.py \
    --layers 2 --batch 8 --seq_len 1024 --rows trace --steps 6 --out "$R/$name" \
    > "$R/$name.txt" 2>&1
  echo "$name rc=$?"
}
left 60 && { ts train_exact $(( (570 - SECONDS) / 2 )); save; }
left 40 && { TRACE_JAX_EXCESS_PRECISION=1 ts train_excess $((570 - SECONDS)); save; }
pm_summary exact
grep "^|" "$R/exact/p_precision_mismatch.md" 2>/dev/null | cut -c1-160 | head -40
rollout_rows step_exact step_excess
show_table train_exact train_excess
exit 0
