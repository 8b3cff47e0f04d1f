#!/usr/bin/env bash
# Ran at commit 4fe440b (session 19).
# One H200: 19a's Triton split sweep again, with the split combine reading its partials 32
# splits at a time (attention_triton.COMBINE_P_CHUNK; it read the whole [P, 16, 8] block) and
# the combine kernel's own device time in its own column. 19a: the default rule's P = 256
# (8 x 32K: 183 us, 8 x 128K: 330 us) was 2.8x / 1.5x slower than P = 128; compiled for sm_90
# the whole-block combine uses 212 registers at P = 256 and does not spill, so the cause is
# not known.
# Prediction (written before the run): if the combine is the cause, 8 x 32K default ~65 us and
# 8 x 128K ~220 us; the other columns within 2% of 19a (their combines are < 5% of the call).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_session19b.sh
source "$(dirname "$0")/gpu_prelude.sh" r19b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 420 python3 experiments/check_mgpu_attention.py --out "$R/splits" \
  --shapes 8:8192,32:8192,128:8192,8:32768,32:32768,111:32768,8:131072,27:131072 \
  --triton-variants ";split_target=2048;split_target=4096;split_target=16384;num_splits=16;num_splits=32;num_splits=64" \
  > "$R/splits.txt" 2>&1
echo "splits rc=$?"
tar -C "$R" -czf "$OUT/r19b.tar.gz" .
grep -iE "error|Traceback" "$R/splits.txt" | head -5
mgpu_attention_summary splits
exit 0
