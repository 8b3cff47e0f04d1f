#!/usr/bin/env bash
# Issue 7: gpu_session56a.sh's H100 part again, fixed. Its fp4_split_target variant set the module
# knob while the variant traced, but decode_attention_triton is a jit whose cache does not see
# the knob, so every variant ran the first one's splits (56a's three columns agree within noise
# at every shape). The variant now passes the rule's split count at that target as num_splits.
# Prediction and rule: gpu_session56a.sh's header (NVFP4 at 1024 programs 8-11% faster at
# 32 x 8K and 8 x 32K, 3-8% at 16 x 8K / 64 x 8K / 16 x 32K / 4 x 32K, 0-5% at 4 x 128K;
# MXFP4 0-6% slower), here at the shapes where the splits differ plus 8 x 8K (unchanged).
# ~2 min on an H100. Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session56b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r56b
R="$OUT/r56b"; mkdir -p "$R"
install_wheels
timeout 150 python3 experiments/check_mgpu_attention.py --no-mosaic --fmt nvfp4 \
  --shapes 8:8192,16:8192,32:8192,64:8192,4:32768,8:32768,16:32768,4:131072 \
  --triton-variants ";fp4_split_target=2048;fp4_split_target=1024" --out "$R/nvfp4" \
  > "$R/nvfp4.txt" 2>&1
echo "nvfp4 rc=$?"; grep -iE "error" "$R/nvfp4.txt" | head -3
timeout 60 python3 experiments/check_mgpu_attention.py --no-mosaic --fmt mxfp4 \
  --shapes 32:8192,8:32768 --triton-variants ";fp4_split_target=1024" --out "$R/mxfp4" \
  > "$R/mxfp4.txt" 2>&1
echo "mxfp4 rc=$?"
for f in nvfp4 mxfp4; do
  echo "== $f"; python3 experiments/check_mgpu_attention.py --summary "$R/$f/kernels_attention_mgpu.json"
done
exit 0
