#!/usr/bin/env bash
# Issue 7: a reading of gpu_session56b.sh (H100), tested at shapes it did not use. There the NVFP4
# split count that ran fastest was not a rows-a-split rule: calls of ~1024 programs (B x 4 KV
# heads x P; under one wave of the ~12 resident 1-warp programs x 132 SMs) were 9-11% faster
# than the rule's 2048-4096 at 16 x 8K, 32 x 8K, 4 x 32K, 8 x 32K, while 2048-program calls
# (just over one wave) were the slowest at every shape, 10-15% slower than 4096 at 64 x 8K and
# 16 x 32K. Candidate (session 56): the rule at 1024 programs (fp4_split_target=1024) where that
# gives <= 1024 programs, else today's 4096.
# Shapes here, none in 56b: 16 x 16K (rule 256 rows / 4096 programs; candidate 1024 / 1024),
# 8 x 16K (256 / 2048; candidate 512 / 1024), 24 x 8K (256 / 3072; fp4_split_target=1024 gives
# 512 / 1536, which the candidate does not take).
# Prediction (H100): fp4_split_target=1024 5-12% faster at 16 x 16K and 8 x 16K, slower than
# the rule at 24 x 8K (1536 programs, over one wave). Rule for the next step: if all three hold,
# the candidate goes to an H100 + H200 A/B at the issue's shapes before any default changes.
# ~1 min on an H100. Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session56c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r56c
R="$OUT/r56c"; mkdir -p "$R"
install_wheels
timeout 100 python3 experiments/check_mgpu_attention.py --no-mosaic --fmt nvfp4 \
  --shapes 16:16384,8:16384,24:8192 --triton-variants ";fp4_split_target=1024" --out "$R/nvfp4" \
  > "$R/nvfp4.txt" 2>&1
echo "nvfp4 rc=$?"; grep -iE "error" "$R/nvfp4.txt" | head -3
python3 experiments/check_mgpu_attention.py --summary "$R/nvfp4/kernels_attention_mgpu.json"
exit 0
