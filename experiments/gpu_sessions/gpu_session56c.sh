#!/usr/bin/env bash
# Issue 7: a reading of gpu_session56b.sh (H100), tested at shapes it did not use. There the NVFP4
# call with ~1024 programs (B x 4 KV heads x P, under one wave: an SM holds 10 one-warp programs
# below 1024 rows a split, ~1320 on 132 SMs, and 12 at 1024 rows with late_vt, ~1580) was 9-11%
# faster than the rule's 2048-4096 at 16 x 8K, 32 x 8K, 4 x 32K, 8 x 32K; part of that (all of
# it at 8 x 32K) is the split combine reading fewer partials. Calls of 2048 programs (1.3-1.55
# waves) were the slowest at every shape but 4 x 128K (whose length-1 sequence leaves 1536
# working programs), their attention kernel 11-19% slower than at 4096 (3.1 waves). Candidate
# (session 56): the rule at 1024 programs (fp4_split_target=1024) where that gives <= 1024
# programs, else today's 4096.
# Shapes here, none in 56b: 16 x 16K (rule 256 rows / 4096 programs; candidate 1024 / 1024),
# 8 x 16K (256 / 2048; candidate 512 / 1024), 24 x 8K (256 / 3072; fp4_split_target=1024 gives
# 512 / 1536, 1.16 waves at 10 an SM, which the candidate does not take).
# Prediction (H100): fp4_split_target=1024 5-12% faster at 16 x 16K and 8 x 16K (the call; about
# half of it the combine), slower than the rule at 24 x 8K. Rule for the next step: if all three
# hold, the candidate goes to an H100 + H200 A/B at the issue's shapes before any default
# changes.
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
