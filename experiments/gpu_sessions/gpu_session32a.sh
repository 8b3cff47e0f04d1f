#!/usr/bin/env bash
# Session 32, one H200, issue 7. Since this session every jit that runs the model compiles with
# exact bf16 casts (numerics.COMPILER_OPTIONS: xla_allow_excess_precision off), and the trainer's
# attention replays the rollout's P (HIGHEST products, P rounded as the decode attention rounds
# it). On the CPU both made rollout and trainer bit-identical (kl_k3 0 for the BF16 engine, RTN
# QAT and TRACE under either P). On the GPU the rollout's Pallas kernels are not the trainer's
# XLA ops, so TRACE's hints still matter there. This call measures:
#   inroll          the fused activation quantizer against XLA's ops inside greedy tiny rollouts
#                   (31f, excess precision: 1-17% different codes, every expert_in global scale);
#   exact / excess  the P-precision study, 8 batches, this code / with TRACE_JAX_EXCESS_PRECISION=1
#                   (XLA's default casts; the trainer's attention still replays P);
#   kl              the study with rollout.kernel_layout: the FP4 grouped kernels in the rollout
#                   (the trainer now multiplies FP4 experts as they do: ops.ScaledExperts).
# Prediction (written before the run): inroll gap 0 and no site differences; exact: BF16 engine
# floor down to ~1e-6 (from 5e-5), TRACE below 31c's 1.14e-3 / 3.5e-4, hinted agreement >= 0.999;
# excess: near 31c's numbers; kl: within 2x of exact (the kernels sum in their own order).
# The decode step's cost of exact casts is in gpu_session32b.sh.
# Usage (repo root, with .whl/ and runs/tiny_f32 carried): bash experiments/gpu_sessions/gpu_session32a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r32a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
save() { tar -C "$R" -czf "$OUT/r32a.tar.gz" .; }
timeout 150 python3 experiments/check_rollout_attention.py \
  --config configs/tiny.py --checkpoint runs/tiny_f32 --batches 1 --piece quantizer \
  > "$R/inroll.txt" 2>&1
echo "inroll rc=$?"; save
source "$(dirname "$0")/../gpu_pm.sh"
pm exact 150 8; save
pm kl 150 8 --kernel_layout; save
TRACE_JAX_EXCESS_PRECISION=1 pm excess 150 8; save
grep -v Warning "$R/inroll.txt" | tail -8
pm_summary exact kl excess
exit 0
