#!/usr/bin/env bash
# Session 38, the last minutes of one H200: MXFP4 f32 P at small batch with the new default
# tiles (32, 1, 2, fadd NaN path) against the old (64, 1, 2, select), which the issue's shapes
# (111 x 32K, 27 x 128K) showed 2.8-2.9% slower (gpu_session37b.sh). Small batches were not
# measured with the new tiles. Prediction (before the run): the new default within -3..+5% of
# the old at 8 x 32K, 32 x 32K and 8 x 128K (at small batch the split rule gives more splits
# per sequence, so the tiles' per-row cost matters as at large batch).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session38d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r38d
install_wheels
timeout "${LIMIT:-100}" python3 experiments/check_mgpu_attention.py --fmt mxfp4 --no-mosaic \
  --shapes "${SH:-8:32768,32:32768,8:131072}" --triton-variants ";block_k=64" --out "$OUT/mx" \
  > "$OUT/mx.txt" 2>&1
echo "check rc=$?"
python3 experiments/check_mgpu_attention.py --summary "$OUT/mx/kernels_attention_mgpu.json"
grep -iE "error|Traceback" "$OUT/mx.txt" | head -5
exit 0
