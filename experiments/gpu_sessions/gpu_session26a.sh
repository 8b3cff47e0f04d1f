#!/usr/bin/env bash
# One H200, issue 6 (session 26): the dense Mosaic FP4 matmul without the XLA pad of x to 8 rows
# (TMA's out-of-bounds fill supplies rows M..7; `fp4_matmul_mgpu`), against the padded wrapper
# of sessions 20-25 side by side (check_mgpu_matmul.py --breakdown), and the kernel alone.
# Prediction (written before the run): outputs identical (max diff 0) at M = 1 / 3 / 8; at 8192 x
# 28672 the call at M = 1 ~41.2 us (20b: 42.0 us, 73.0% of copy -> ~74.4%: the pad's ~0.8 us gone),
# M = 8 unchanged within 1% (no pad there); the kernel alone ~39.5-40.5 us (76-78%), the rest the
# split-sum / transpose epilogue (~1-1.5 us); at the expert shapes (2048 x 768, 768 x 2048) M = 1
# 5-15% faster (the pad is a larger share of a ~5 us call).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session26a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r26a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 300 python3 experiments/check_mgpu_matmul.py --breakdown --ms 1,3,8 --splits auto \
  --baselines bf16 --out "$R/dense" > "$R/dense.txt" 2>&1
echo "dense rc=$?"
tar -C "$R" -czf "$OUT/r26a.tar.gz" .
grep -hE "^\|" "$R/dense/kernels_matmul_mgpu.md" | cut -c1-400
grep -hiE "error|Traceback" "$R/dense.txt" | head -6
exit 0
