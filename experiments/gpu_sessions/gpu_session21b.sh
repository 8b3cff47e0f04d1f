#!/usr/bin/env bash
# Ran at commit f7d1759 (session 21).
# One H200, issue 6: the fused MoE gate / up / SwiGLU Mosaic kernel (one pipeline streams both
# weights against one x tile, SwiGLU in the epilogue) against the unfused stage (two grouped
# calls + XLA's SwiGLU): correctness and device time at 27..512 tokens (check_mgpu_swiglu.py),
# then the 4-layer 30B FP4 decode step fused / unfused / fused at 32K and 128K.
# Prediction (written before the run): exact to bf16 rounding (relerr as unfused, maxdiff a few
# bf16 ulps); the fused stage 1.1-1.2x the unfused at 111 tokens (unfused ~2 x 41 us + SwiGLU;
# fused kernel ~66-74 us: one launch, twice the bytes in flight per CTA), 1.1-1.25x at 27;
# tk 128 within 5% of tk 256; the 4-layer step ~0.5-1% faster (within the run-to-run spread).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session21b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r21b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 200 python3 experiments/check_mgpu_swiglu.py --out "$R/swiglu" --knobs "tk=128;steps=3" \
  > "$R/swiglu.txt" 2>&1
echo "swiglu rc=$?"
if grep -q '"fused_relerr"' "$R/swiglu/kernels_matmul_mgpu_swiglu.json" 2>/dev/null; then
  for v in fused unfused fused; do
    n=step_$v; [ -d "$R/$n" ] && n=${n}2
    rollout_4l "$n" 130 fp4 32768,131072 --steps 16 --grouped_swiglu $v
  done
fi
tar -C "$R" -czf "$OUT/r21b.tar.gz" .
show_table swiglu
rollout_rows step_fused step_unfused step_fused2
exit 0
