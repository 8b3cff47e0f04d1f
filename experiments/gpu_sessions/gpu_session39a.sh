#!/usr/bin/env bash
# Session 39, one H100 (80 GB; no H200 came): the full-depth (48-layer) 30B decode step at an
# H100-sized HBM budget, the question an RL user with 80 GB cards asks. 74 GB for every engine
# (of ~79.5 GB JAX may take at XLA_PYTHON_CLIENT_MEM_FRACTION=0.95; the H200 runs used 130 of
# ~134). bench_rollout's sizing gives BF16 12 / 3 / 0 sequences at 8K / 32K / 128K (its 61 GB of
# weights leave ~10 GB), FP4 209 / 52 / 13.
# Prediction (before the run): BF16 ~12 ms / step at 32K (B 3: ~21 GB at ~2.5 TB/s + fixed
# cost), ~20 ms at 8K (B 12 touches ~70% of the experts); FP4 ~25-35 ms at 32K and 8K (~63 GB
# at ~2.2 TB/s), so FP4 / BF16 tokens/s ~5-10x at 32K and ~8-14x at 8K; at 128K BF16 does not
# fit one sequence and FP4 runs 13.
# (After the run its bench_rollout call moved into gpu_prelude.sh's rollout_budget, same arguments.)
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session39a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r39a
install_wheels
rollout_budget h100 575 520 74 bf16,fp4 32768,131072,8192
tar -C "$R" -czf "$OUT/r39a.tar.gz" .
grep "^|" "$R/h100/rollout_throughput.md" | cut -c1-200 | head -24
exit 0
