#!/usr/bin/env bash
# One H200, issue 7: the Triton v6 kernel's (block_k, warps, stages) with P rounded to bf16
# (precision="bf16"), NVFP4 and MXFP4, at the rollout shapes. The v6 knobs were picked with
# f32 P (the default); 30a (gpu_session29h.sh) found MXFP4 *slower* with bf16 P at its
# knobs (64, 1, 2): 786.7 vs 757.4 us at 111 x 32K.
# Prediction (written before the run): NVFP4 bf16 P best stays (32, 1, 3) within 2%; MXFP4
# bf16 P at (32, 1, 3) or (32, 1, 2) 5-10% faster than at (64, 1, 2), i.e. about its f32 time
# or a little under; nothing reaches NVFP4 bf16 P's 80% for MXFP4 (fewer bytes, same work).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session30b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r30b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
P="bf16_p=1"
attention_check mx 200 --shapes 111:32768,27:131072 --no-mosaic --fmt mxfp4 \
  --triton-variants ";$P;block_k=32,num_stages=3;block_k=32,num_stages=3,$P;block_k=32,num_stages=2,$P;block_k=64,num_stages=3,$P;block_k=16,num_stages=3,$P;block_k=64,num_warps=2,$P;block_k=128,num_warps=2,$P"
attention_check nv 200 --shapes 111:32768,27:131072 --no-mosaic \
  --triton-variants ";$P;block_k=32,num_stages=2,$P;block_k=32,num_stages=4,$P;block_k=64,num_stages=2,$P;block_k=64,num_stages=3,$P;block_k=16,num_stages=3,$P;block_k=64,num_warps=2,$P"
tar -C "$R" -czf "$OUT/r30b.tar.gz" .
mgpu_attention_summary mx
mgpu_attention_summary nv
exit 0
