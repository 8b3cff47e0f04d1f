#!/usr/bin/env bash
# Session 37 (prepared; no device came): trace_jax.diagnose on configs/small.py (random init) with
# RoPE's products rounded before the add (attention.rope, session 37). On the CPU that fix took
# the BF16 engine's gap from 3.1e-4 to 2.8e-4 (the rest was YNNPACK's dot order: 0 with
# TRACE_JAX_YNN=0, which does nothing on a GPU). Session 36's H100 read: bf16 gap mean 2.4e-3,
# TRACE+R3 hinted codes 0.9999.
# Prediction: on a GPU the rollout's decode attention is the Pallas kernel, whose summation order
# XLA's trainer cannot replay, so the gap stays within 20% of session 36's unless RoPE's FMA was
# a large part of it there; every variant's hinted agreement >= session 36's.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session37c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r37c
install_wheels
diagnose_small "${DIAG_LIMIT:-300}"
exit 0
