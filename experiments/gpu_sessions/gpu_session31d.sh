#!/usr/bin/env bash
# Session 31, one H200, issue 7, after 31c: with every XLA product at HIGHEST the bf16 engine's
# floor matched the CPU's (f32 P 1.35e-5, bf16 P 1.12e-5) but TRACE still showed a GPU-only
# bf16-P advantage (8.0e-4 vs 2.0e-4; the CPU, with the decode kernel interpreted: 3.6e-4 vs
# 4.9e-4). So one of the FP4 kernels of the rollout does it. At HIGHEST, 4 batches each:
#   xla     the activation quantizer as XLA ops instead of the fused kernel;
#   mm      the FP4 expert matmuls as their pure-JAX references;
#   none    both, and the decode attention as the XLA reference (no rollout kernel left).
# Prediction (written before the run): none behaves like the CPU (f32 P below bf16 P, TRACE
# f32 P ~3-5e-4); one of xla / mm alone removes the bf16-P advantage.
# Usage (repo root, with .whl/ and runs/tiny_f32 carried): bash experiments/gpu_sessions/gpu_session31d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r31d
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
save() { tar -C "$R" -czf "$OUT/r31d.tar.gz" .; }
source "$(dirname "$0")/../gpu_pm.sh"
export JAX_DEFAULT_MATMUL_PRECISION=highest
pm xla 130 4 --activation_quantizer xla; save
pm mm 150 4 --expert_matmul reference; save
pm none 150 4 --activation_quantizer xla --expert_matmul reference --attention reference; save
pm_summary xla mm none
exit 0
