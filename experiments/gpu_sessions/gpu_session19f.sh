#!/usr/bin/env bash
# Ran at commit 89ff0fc (session 19).
# One H200: the v6 FP4 attention's per-program knobs at small batch, under the session-19 split
# rule (which counts cache rows, so a 64-row block keeps the rows per split). 19c: 43-64% of copy
# at 8K or 8-32 sequences x 32K, where B x 4 heads x P programs of one warp are few (1024-4096)
# and each is a serial decode -> MMA -> softmax chain; more, shorter programs cost more in fixed
# work and combine. More warps per program (64 / 128 rows per step over 2 / 4 warps) raise the
# parallelism without more programs.
# Prediction (written before the run): at 8 x 32K / 32 x 8K / 8 x 8K, 2 warps x 64 rows 5-10%
# faster than the default (1 warp x 32 rows, 3 stages); 4 warps x 128 rows about the same as
# 2 x 64; at 111 x 32K all within 3% or slower (the one-warp config was tuned there).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session19f.sh
source "$(dirname "$0")/../gpu_prelude.sh" r19f
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
attention_check knobs 230 \
  --shapes 8:8192,32:8192,8:32768,32:32768,8:131072,111:32768 --no-mosaic \
  --triton-variants ";block_k=64,num_warps=2;block_k=64,num_warps=2,num_stages=2;block_k=128,num_warps=4,num_stages=2;num_stages=4;num_stages=2"
tar -C "$R" -czf "$OUT/r19f.tar.gz" .
mgpu_attention_summary knobs
exit 0
