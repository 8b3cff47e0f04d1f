#!/usr/bin/env bash
# Session 12, one H200: NVFP4 per-row quantize-with-hint after its row amax became one
# cross-thread reduction (elementwise maxima over the chunks first). Session 12h's profile: the
# per-row kernel executes 11% more instructions than per-tensor, almost all shuffles (+0.77 per
# element) and integer maxima (+0.66) of the per-chunk row reductions; static SASS 25.0 -> 23.7
# per element (per-tensor 22.6). `python -m pallas_kernels.sweep_quantize --grid walks`.
# Prediction (written before the run): one walk 266 -> 250-258 us (65-67% of copy), two walks
# likewise; still short of per-tensor's 227 us (114 registers, 24% occupancy vs 55%).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session12i.sh
source "$(dirname "$0")/../gpu_prelude.sh" r12i
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 300 python3 -m pallas_kernels.sweep_quantize --grid walks --out "$R" --max-seconds 200 \
  > "$R/log.txt" 2>&1
echo "sweep rc=$?"
tar czf "$OUT/session12i.tgz" -C /tmp r12i
grep -E "phase|Error|identical=False" "$R/log.txt" | cut -c1-140 | head -10
grep "^| 2 " "$R/kernels_quantize_walks.md" | head -30
exit 0
