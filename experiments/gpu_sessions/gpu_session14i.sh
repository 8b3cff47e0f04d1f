#!/usr/bin/env bash
# (Ran at commit 0d26077; later commits changed the grouped wrapper: check out 0d26077 to repeat it.)
# Session 14, one H200: first run of the grouped (MoE) Mosaic GPU FP4 matmul
# (fp4_grouped_matmul_mgpu: tokens scattered into mp = 16-row expert-aligned chunks, a CTA per
# (expert, 64 weight rows) looping over its chunks, out^T gathered back) at the 30B decode shapes
# (128 experts, top-8, 27 / 111 tokens = 216 / 888 rows) against the Triton grouped kernel
# (session 8: 43-49% of copy); then the dense table again (ref.T / ref.at[j] API, 14h's kernel).
# Prediction (written before the run): exact (relerr = Triton's); 1.2-1.6x the Triton grouped
# kernel at 888 rows (the wrapper's scatter / gather and padding to 16 rows cost some), 1.0-1.4x
# at 216 rows (mostly empty chunks, launch-bound); a compile failure in the dynamic chunk loop
# is possible.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session14i.sh
source "$(dirname "$0")/../gpu_prelude.sh" r14i
timeout 250 python3 experiments/check_mgpu_matmul.py --grouped --out "$R/res" 2>&1 \
  | grep -v Warning | tee "$R/log_grouped.txt" | grep -E "^\||Error|error" | head -30
timeout 200 python3 experiments/check_mgpu_matmul.py --out "$R/res" 2>&1 | grep -v Warning \
  | tee "$R/log.txt" | grep -E "^\||Error" | head -8
cp -r "$R/res" "$R/log.txt" "$R/log_grouped.txt" "$OUT/" 2>/dev/null
exit 0
