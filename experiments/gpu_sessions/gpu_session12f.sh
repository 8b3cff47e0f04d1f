#!/usr/bin/env bash
# Session 12, one H200: quantize-with-hint v4 after three more ALU-pipe cuts (session 12e's
# profile: ALU still 80-83% busy): codes stored as uint32 words of 8 (no byte assembly), the
# hint byte from a word by one multiply (0x1248) and two shifts, the block amax without the
# abs mask (max(bits * 2) >> 1). quantize_compilecheck: ALU-pipe instructions per element
# ~14.2 (12e's v4) -> 12.25 (NVFP4 row), 11.9 (MXFP4), 11.25 (NVFP4 tensor); v3 17.0.
# `python -m pallas_kernels.sweep_quantize` (grid now also 1 row per program, 2 warps, 1K
# chunks). Prediction (written before the run): another 1.08-1.15x over 12e's v4 at 65536 x
# 4096 (NVFP4 row 272 -> ~245 us, ~68%; MXFP4 / tensor ~220 us, ~75%), bit-identical.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session12f.sh
source "$(dirname "$0")/../gpu_prelude.sh" r12f
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 560 python3 -m pallas_kernels.sweep_quantize --out "$R" --max-seconds 450 \
  > "$R/log.txt" 2>&1
echo "sweep rc=$?"
tar czf "$OUT/session12f.tgz" -C /tmp r12f
grep -E "phase|Error|identical=False" "$R/log.txt" | cut -c1-140 | head -20
grep "^| 1 " "$R/kernels_quantize_sweep.md" | head -12
grep "^| 2 " "$R/kernels_quantize_sweep.md" | head -60
exit 0
