#!/usr/bin/env bash
# Session-6 GPU call G on one H200: the v4 FP4-KV attention's knobs swept in device time at the
# rollout's shapes (B=111 x 32K, B=27 x 128K). Session 5 swept at B=32 x 32K in per-call wall
# time, which call F showed carries ~250 us of launch / host time per call.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session6g.sh
source "$(dirname "$0")/../gpu_prelude.sh" r6g
timeout 420 python3 -m pallas_kernels.bench_attention_combine --sweep --out "$R/sweep" \
  > "$R/sweep.txt" 2>&1
rm -rf "$R"/sweep/sweep_traces
tar czf "$OUT/session6g.tgz" -C /tmp r6g
cat "$R/sweep/attention_sweep.md" 2>/dev/null || tail -40 "$R/sweep.txt"
exit 0
