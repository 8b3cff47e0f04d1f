#!/usr/bin/env bash
# Session 39, one H100 (80 GB), after gpu_session39b.sh: the FP4-weights-only engine (W4A4
# experts, bf16 KV cache, hints on) at the same 72 GB budget, the user's other option on an
# 80 GB card. bench_rollout's sizing gives it 15 / 3 sequences at 32K / 128K (BF16: 2 / 0;
# full FP4: 50 / 12).
# Prediction (before the run): ~30-36 ms / step at 32K (~48 GB of bf16 KV + ~18 GB of experts
# at ~2 TB/s), ~420-500 tokens/s = 2.3-2.7x BF16's 184.3 from 39b; ~20-26 ms at 128K, ~115-150
# tokens/s (full FP4: 416).
# (After the run its bench_rollout call moved into gpu_prelude.sh's rollout_budget, same arguments.)
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session39c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r39c
install_wheels
rollout_budget h100w "${LIMIT:-250}" 200 72 fp4w_bf16kv 32768,131072
tar -C "$R" -czf "$OUT/r39c.tar.gz" .
exit 0
