#!/usr/bin/env bash
# Ran at commit f4c49f5 (session 19).
# One H200: the new default FP4 split rule of the Triton kernels (attention_triton
# FP4_SPLIT_TARGET / FP4_SPLIT_ROWS: >= 4096 programs, 256..1024 cache rows per split), chosen
# from 19b's sweep, against 19b's best fixed choices (P = 32, split_target 4096 = the old rule at
# 4096 programs) at the 8 NVFP4 shapes; then the same for MXFP4 caches (v6, block 64), where the
# rule was not measured.
# Prediction (written before the run): NVFP4 default = 19b's value of the P it picks (8 x 8K
# ~21 us, 32 x 8K ~69, 128 x 8K ~238, 8 x 32K ~69, 32 x 32K ~232, 111 x 32K ~736, 8 x 128K ~220,
# 27 x 128K ~700) within 2%; MXFP4 (11% fewer bytes) at about the same % of copy, the rule
# within 5% of the best column.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session19c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r19c
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
SHAPES=8:8192,32:8192,128:8192,8:32768,32:32768,111:32768,8:131072,27:131072
timeout 200 python3 experiments/check_mgpu_attention.py --out "$R/nvfp4" --shapes $SHAPES \
  --triton-variants ";num_splits=32;split_target=4096" > "$R/nvfp4.txt" 2>&1
echo "nvfp4 rc=$?"
timeout 240 python3 experiments/check_mgpu_attention.py --out "$R/mxfp4" --shapes $SHAPES \
  --fmt mxfp4 --triton-variants ";num_splits=16;num_splits=32;num_splits=64;split_target=4096;split_target=8192" \
  > "$R/mxfp4.txt" 2>&1
echo "mxfp4 rc=$?"
tar -C "$R" -czf "$OUT/r19c.tar.gz" .
grep -iE "error|Traceback" "$R/nvfp4.txt" "$R/mxfp4.txt" | head -5
mgpu_attention_summary nvfp4
mgpu_attention_summary mxfp4
exit 0
