#!/usr/bin/env bash
# Ran at commit 67a7783 (session 18).
# Session 18, one H200: the first GPU run of the Mosaic FP4-KV attention prototype
# (pallas_kernels/attention_mgpu.py): its split partials on structured caches
# (debug_mgpu_attention.py), then check_mgpu_attention.py (relerr against the reference and the
# Triton v6 kernel, device time), then the grouped FP4 kernel after the splat_value refactor.
# Prediction (written before the run): a first run of a kernel never run before; expect a compile
# or numerics failure in at least one stage (swizzle of the P^T stores, V scale addressing).
# If it is right: ~0.75x the Triton kernel's time at 111 x 32K (design estimate, session 16).
# The grouped check: relerr and times as 17f (within ~2%).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session18a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r18a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 200 python3 experiments/debug_mgpu_attention.py > "$R/debug.txt" 2>&1
echo "debug rc=$?"; cut -c1-400 "$R/debug.txt" | tail -25
timeout 220 python3 experiments/check_mgpu_attention.py --out "$R/check" > "$R/check.txt" 2>&1
echo "check rc=$?"
timeout 120 python3 experiments/check_mgpu_matmul.py --grouped --out "$R/grouped" \
  > "$R/grouped.txt" 2>&1; echo "grouped rc=$?"
tar -C "$R" -czf "$OUT/r18a.tar.gz" .
grep -v "^|" "$R/check.txt" | cut -c1-300 | tail -12
show_table check grouped
exit 0
