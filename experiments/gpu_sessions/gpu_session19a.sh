#!/usr/bin/env bash
# Ran at commit 9185dcb (session 19).
# One H200: the Triton v6 FP4-KV attention's split count. Session 18g: with the default rule
# (smallest divisor P of the 32-row blocks with B * 4 heads * P >= 8192 programs) Triton reaches
# 69-71% of copy at 111 x 32K and 27 x 128K, where a program reads 1024 rows, but 45% at
# 8 x 128K and 62% at 32 x 32K, where it reads 512 rows (P = 256 / 64).
# Prediction (written before the run): the per-program cost (Q load, partial write, combine
# input) is what the short programs pay; at 8 x 128K P = 64..128 (1024-2048 rows) reaches
# ~60-68% (one wave of 1024-4096 one-warp programs), at 32 x 32K P = 32 ~68%; at 8K nothing
# reaches 60% (160 MB in ~40 us: launch and combine dominate); the big shapes stay best at the
# default (within 2%).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session19a.sh
# (NAME=r19b: the same sweep under another name, gpu_session19b.sh.)
NAME=${NAME:-r19a}
source "$(dirname "$0")/../gpu_prelude.sh" "$NAME"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
attention_check splits 420 \
  --shapes 8:8192,32:8192,128:8192,8:32768,32:32768,111:32768,8:131072,27:131072 \
  --triton-variants ";split_target=2048;split_target=4096;split_target=16384;num_splits=16;num_splits=32;num_splits=64"
tar -C "$R" -czf "$OUT/$NAME.tar.gz" .
mgpu_attention_summary splits
exit 0
