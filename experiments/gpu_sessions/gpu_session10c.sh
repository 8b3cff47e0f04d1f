#!/usr/bin/env bash
# Session 10, one H200: the quantize-with-hint kernel v3 (NVFP4 row scope reads x once: every
# chunk's block maxima first, the chunks kept in registers; 26.1 SASS per element at block_m 4
# vs v2's 28.2 with two walks, quantize_compilecheck) against v2, and a device-time knob sweep.
# Prediction: NVFP4 row at 65536 x 4096 from 450 us (37% of copy, session 6) to ~340 us
# (~49%, the MXFP4 kernel's one-walk rate); MXFP4 and the tensor scope unchanged (+-5%).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session10c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r10c
timeout 420 python3 -m pallas_kernels.sweep_quantize --out "$R" --max-seconds 360 \
  > "$R/log.txt" 2>&1
echo "rc=$?"
tar czf "$OUT/session10c.tgz" -C /tmp r10c
tail -45 "$R/log.txt" | cut -c1-160
exit 0
