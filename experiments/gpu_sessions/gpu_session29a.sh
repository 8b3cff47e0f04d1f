#!/usr/bin/env bash
# One H200, issue 6 (prepared in session 28, not yet run): the dense Mosaic FP4 matmul storing
# its f32 partials from registers as [splits, M, N], the M token rows only
# (DENSE_TOKEN_MAJOR), against the [64, Mp] tiles through shared memory and TMA into
# [splits, N, Mp] (the default), whose XLA epilogue slices M columns and transposes.
# Prediction (written in session 28): outputs identical (max diff 0: same partials, same sum);
# at 8192 x 28672 M = 1 0.5-1.2 us faster (the epilogue reads 0.23 instead of 1.8 MB and does not
# transpose; the kernel writes 8x fewer bytes), i.e. 76-77% of copy; M = 3 / 13 1-3 us faster
# (odd-width transposes); M = 8 0.3-0.8 us faster; M = 32 / 64 within 1-2% (the predicated
# 4-byte stores of 32-64 tokens may cost what the transpose saved).
# Then the issue's full table (`pallas_kernels.bench matmul`) goes in gpu_session29b.sh: it needs
# BENCH_TIME_LIMIT_S ~420 and a call of its own.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session29a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r29a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
for i in 1 2; do
  timeout 150 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 \
    --ms 1,3,8,13,32,64 --splits auto --token-major 0,1 \
    --baselines "$([ $i = 1 ] && echo bf16)" --max-seconds 130 --out "$R/tmajor_$i" \
    > "$R/tmajor_$i.txt" 2>&1
  echo "tmajor_$i rc=$?"
done
timeout 100 python3 experiments/check_mgpu_matmul.py --shapes 2048x768,768x2048 --ms 1,8 \
  --splits auto --token-major 0,1 --baselines '' --max-seconds 80 --out "$R/experts" \
  > "$R/experts.txt" 2>&1
echo "experts rc=$?"
tar -C "$R" -czf "$OUT/r29a.tar.gz" .
dense_summary tmajor_1 tmajor_2 experts
exit 0
