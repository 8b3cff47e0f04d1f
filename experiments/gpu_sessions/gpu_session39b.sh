#!/usr/bin/env bash
# Session 39, one H100 (80 GB), second try of gpu_session39a.sh: there every engine ran out of
# memory (BF16 at 32K B=3 in its decode loop; FP4 B=52 after it, as the failed engine's arrays
# were still alive) and the call timed out. Fixed since: bench_rollout unstacks the layers leaf
# by leaf through host memory (XLA had warned that the jitted unstack takes 122 GB of buffers;
# after the run a review found that it had run, so that was not shown to be the cause) and
# collects a failed engine's garbage. A lower budget (72 GB: BF16 9 / 2 / 0 sequences at 8K /
# 32K / 128K, FP4 200 / 50 / 12), FP4 first so that a BF16 failure cannot cost its rows.
# Prediction (before the run): FP4 ~25-35 ms / step at 32K; BF16 ~10-12 ms at 32K (B 2);
# FP4 / BF16 tokens/s ~6-10x at 32K; at 128K BF16 does not fit one sequence.
# (After the run its bench_rollout call moved into gpu_prelude.sh's rollout_budget, same arguments.)
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session39b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r39b
install_wheels
rollout_budget h100 "${LIMIT:-470}" 380 72 fp4,bf16 32768,131072,8192
tar -C "$R" -czf "$OUT/r39b.tar.gz" .
grep "^|" "$R/h100/rollout_throughput.md" | cut -c1-200 | head -24
exit 0
