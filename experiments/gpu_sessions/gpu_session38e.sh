#!/usr/bin/env bash
# Ran in session 39 on an H100 (commit 5272232; experiments/results/gpu/session39/e/): every
# sub-tile variant was slower (NOTES_attention session 39), and `sub_tiles` was removed after it.
# Session 38 (prepared, CPU only): issue 7, sub-tiles. `sub_tiles` splits a block_k-row block
# into sub-tiles that share one online-softmax step. sm_90 SASS per cache row
# (`attention_compilecheck`): NVFP4 f32 P (64, 1, 2) x 2 sub-tiles 31.5 against 32.4 for the
# default (32, 1, 3) (182 registers, not 255 as one 64-row tile); bf16 P 27.5 against 28.8;
# MXFP4 f32 P (64, 1, 2) x 2 31.3 against 31.4 (NOTES_attention session 38).
# Prediction (before the run), device time at 111 x 32K and 27 x 128K on an H200: NVFP4 f32 P
# 0-4% faster with (64, 1, 2) x 2 (69% -> 69-72% of copy), bf16 P 0-5% faster; (128, 1, 2) x 4
# no better than (64, 1, 2) x 2 (255 registers); MXFP4 within 2% of its default. Outputs within
# f32 summation order of the default (relative error columns equal to 2 digits).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session38e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r38e
install_wheels
SH=${SH:-111:32768,27:131072}
NV=";block_k=64,num_stages=2,sub_tiles=2;block_k=64,num_stages=3,sub_tiles=2;block_k=128,num_stages=2,sub_tiles=4"
for run in nv nvP mx nv2; do
  case $run in
    nv|nv2) args=(--fmt nvfp4 --triton-variants "$NV") ;;
    nvP) args=(--fmt nvfp4 --triton-variants "bf16_p=1;bf16_p=1,block_k=64,num_stages=2,sub_tiles=2;bf16_p=1,block_k=64,num_stages=3,sub_tiles=2") ;;
    mx) args=(--fmt mxfp4 --triton-variants ";block_k=64,num_stages=2,sub_tiles=2;bf16_p=1;bf16_p=1,block_k=64,num_stages=2,sub_tiles=2") ;;
  esac
  timeout 140 python3 experiments/check_mgpu_attention.py --no-mosaic --shapes "$SH" "${args[@]}" \
    --out "$R/$run" > "$R/$run.txt" 2>&1
  echo "$run rc=$?"
done
tar -C "$R" -czf "$OUT/r38e.tar.gz" .
for run in nv nvP mx nv2; do echo "== $run"; mgpu_attention_summary "$run"; done
grep -hiE "error|Traceback" "$R"/*.txt | head -5
exit 0
