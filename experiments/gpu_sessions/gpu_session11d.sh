#!/usr/bin/env bash
# Session 11, one H200: the dense FP4 decode matmul without the grouped item list's empty
# programs (session 11c's Nsight Compute profile: grid (3, 224, 4) at M = 1, two of every three
# blocks empty), `python -m pallas_kernels.sweep_dense --quick` (defaults at M = 1, 8, 32, 64).
# Prediction (written before the run): 2-4% at M <= 8 (1,792 empty blocks at ~0.5 us of SM time
# each over 528 block slots: ~1.7 us of ~66 us), unchanged at M = 32 / 64 (stream-K has none).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session11d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r11d
timeout 240 python3 -m pallas_kernels.sweep_dense --quick --out "$R" --max-seconds 170 \
  > "$R/log.txt" 2>&1
echo "rc=$?"
tar czf "$OUT/session11d.tgz" -C /tmp r11d
grep "default\|phase" "$R/log.txt" | cut -c1-120
exit 0
