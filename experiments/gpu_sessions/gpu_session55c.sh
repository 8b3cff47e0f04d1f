#!/usr/bin/env bash
# Issue 6, the dense decode kernel against the bf16 dot (">= 3x the XLA bf16 dot"), and tiled
# weights beside it. Session 55, H100, after gpu_session54a.sh's dense rows (tiled 2.7 / 2.8%
# faster at M = 1 / 8, the library's picks, no bf16 column):
# - 55c (this script, the default tree): 8192 x 28672, M = 1 / 8, the call 51.14 / 52.72 us
#   (84.6 / 82.1% of copy) against the bf16 dot's 150.3 / 152.6: 2.94x / 2.90x.
# - 55d (TILED=1: the same with --tiled, run from commit 5915013's tree, where tiled weights
#   still existed, unpacked beside the repository: `git archive 5915013 pallas_kernels trace_jax
#   configs experiments/check_mgpu_matmul.py experiments/gpu_prelude.sh | tar -x -C old55`
#   in the repository root):
#   natural 51.21 / 53.10 us (2.94x / 2.88x), tiled 50.04 / 52.00 (3.01x / 2.94x); the kernel
#   alone 1.4% / 0.8% faster tiled. Tiling stays removed (its rule asked for >= 3%).
#   (The unpacked tree lacks the rest of experiments/: PYTHONPATH adds the repository's.)
# ~30 s each. Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session55c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r55c
R="$OUT/r55c"; mkdir -p "$R"
install_wheels
if [ "${TILED:-0}" = 1 ]; then
  cd "$REPO/old55" || { echo "unpack commit 5915013 into old55/ first (see the header)"; exit 1; }
  export PYTHONPATH=/tmp/site:.:$REPO
  extra=(--tiled)
else
  extra=()
fi
timeout 150 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 1,8 --splits auto \
  --baselines bf16 --breakdown --max-seconds 100 "${extra[@]}" --out "$R/dense" \
  > "$R/dense.txt" 2>&1
echo "dense rc=$?"; grep -iE "error" "$R/dense.txt" | head -3
grep -E "^\|" "$R/dense/kernels_matmul_mgpu.md" | cut -c1-420
exit 0
