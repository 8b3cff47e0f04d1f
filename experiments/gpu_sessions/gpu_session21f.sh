#!/usr/bin/env bash
# Ran at commit bac0138 (session 21; the tiles check hit its 75 s limit after the 768 x 2048 rows).
# One H200, issue 6: several 64-row weight tiles per grouped program (nt, GROUPED_TILES), the
# x tile shared by them (as the fused gate / up pair shares it). The single-weight kernel at
# both 30B expert shapes (check_mgpu_matmul --grouped --tiles 2,4) and the fused gate / up with
# nt 2, at 27 and 111 tokens.
# Prediction (written before the run): outputs unchanged (relerr as nt 1); the down projection
# (768 x 2048) kernel alone 5-10% faster with nt 2 (half the x reads, twice the weight bytes in
# flight per program), nt 4 within 3% of nt 2; 2048 x 768 (12 tiles per expert) and the fused
# pair within +-5% (fewer programs than resident slots: 768 at nt 2 for 528).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session21f.sh
source "$(dirname "$0")/../gpu_prelude.sh" r21f
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 75 python3 experiments/check_mgpu_matmul.py --grouped --tiles 2,4 --shapes 768x2048,2048x768 \
  --out "$R/tiles" \
  > "$R/tiles.txt" 2>&1
echo "tiles rc=$?"
timeout 60 python3 experiments/check_mgpu_swiglu.py --out "$R/swiglu" --tokens 27,111 \
  --knobs "nt=2" > "$R/swiglu.txt" 2>&1
echo "swiglu rc=$?"
tar -C "$R" -czf "$OUT/r21f.tar.gz" .
grep -hE "^ *(k|tokens)=" "$R/tiles.txt" "$R/swiglu.txt" | cut -c1-900
grep -hiE "error|Traceback" "$R/tiles.txt" "$R/swiglu.txt" | head -6
exit 0
