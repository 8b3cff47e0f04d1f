#!/usr/bin/env bash
# Ran at commit 5501a86 (session 19; prepared at 9030006 in session 18, when no device time was left).
# One H200: the Mosaic FP4-KV attention with its split rule (default_splits) against the Triton
# v6 kernel, including the 48-layer rollout's 128K shape (27 sequences) where 18f's 8 x 128K had
# Mosaic 239 us vs Triton 325; then the 4-layer 30B FP4 decode step at 128K with the caches in
# the default kv_words layout and in the "mgpu" layout (attention through the Mosaic kernel).
# Prediction (written before the run): 27 x 128K (32 splits) ~0.9x Triton (Triton was at 68.8%
# of copy there in session 16; the Mosaic kernel plateaued at ~62% at 111 x 32K and 8 x 128K,
# its 8 x 128K win is Triton's small-batch weakness); 8 x 128K ~240 us; 32 x 8K ~74 us;
# 111 x 32K ~830 us (Triton ~740); 16 / 64 splits within 3%; so the 4-layer step at 128K ~5%
# slower with the mgpu layout (attention ~70% of the step).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session18g.sh
source "$(dirname "$0")/../gpu_prelude.sh" r18g
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 150 python3 experiments/check_mgpu_attention.py --out "$R/check" \
  --shapes 27:131072,8:131072,32:8192,111:32768 --variants ";num_splits=16;num_splits=64" \
  > "$R/check.txt" 2>&1
echo "check rc=$?"
rollout_4l kvw128 180 fp4 131072 --steps 12
rollout_4l mgpu128 180 fp4 131072 --steps 12 --kv_cache_layout mgpu
tar -C "$R" -czf "$OUT/r18g.tar.gz" .
grep -iE "error|Traceback" "$R/check.txt" | head -5
mgpu_attention_summary check
rollout_rows kvw128 mgpu128
exit 0
