#!/usr/bin/env bash
# Session 11, one H200: device-time sweep of the dense FP4 decode matmul (8192 x 28672, NVFP4),
# split-K knobs and the new stream-K schedule (`Config.programs` on the dense path: equal work
# per program), `python -m pallas_kernels.sweep_dense`.
# Prediction (written before the run): the kernel issues ~1,060 (split-K) / ~1,180 (stream-K)
# SASS per warp per 256 x 128 K step (matmul_compilecheck); at ~1e12 warp instructions/s the
# M = 1 call needs ~34 us of issue against ~31 us of memory, so it is issue-bound about as much
# as bandwidth-bound and a schedule change cannot remove much: stream-K within +-10% of the
# best split-K at M = 1 and 8, the best knob set <= 1.15x the default (71 / 74 us, 42-43% of
# copy in session 9). A larger gain would mean the wave tail / latency matters more than the
# instruction count.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session11a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r11a
timeout 540 python3 -m pallas_kernels.sweep_dense --out "$R" --max-seconds 470 \
  > "$R/log.txt" 2>&1
echo "rc=$?"
tar czf "$OUT/session11a.tgz" -C /tmp r11a
tail -60 "$R/log.txt" | cut -c1-160
exit 0
