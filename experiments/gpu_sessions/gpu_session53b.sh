#!/usr/bin/env bash
# Ran in session 55 (H100, results/gpu/session55/53b): the rule failed (bf16 partials -0.4 /
# +3.3 / +1.5% at the three 256-row shapes, relerr 13-37x f32's); they stay off.
# Issue 7, the short-split shapes (8 x 8K, 32 x 8K, 8 x 32K: 256 cache rows a split, 55-68% of
# copy on an H100, session 50): the split partials in bf16. At 256 rows a split a program's f32
# partials (8 query heads x 128 + m, l: ~4 KB) are written by the attention kernel and read by
# the combine, ~22% more than the call's KV bytes (8 x 32K: 4096 programs, 16.8 MB each way
# against 151 MB of cache); at 1024 rows (32 x 32K, the control) ~5%. bf16 partials halve them
# (decode_attention_triton(partial_dtype=bf16), session 17: -4.6% at 32 x 32K on an H200 under
# the old split rule, +1.3-2.3% at the large shapes, where the kernel's loop scheduled worse).
# Beside it, split_target=1024 (the old rule at 1024 programs: 1024-row splits at 8 x 32K and
# 32 x 8K, a quarter of the partials, and with them late_vt, which the library turns on from
# 1024 rows; 8 x 8K keeps 256 rows, 32 x 32K goes to 4096): session 19 (H200) had 8 x 32K 4%
# faster at 1024 rows than at the rule's 256, 32 x 8K 12% slower at 512.
# Prediction (before the run), H100, NVFP4 f32 P, device time of the call: bf16 partials 4-8%
# faster at the three 256-row shapes, within +-2% at 32 x 32K; max abs diff ~1 bf16 ulp.
# split_target=1024 within +-5% of the default at 8 x 32K and 32 x 8K.
# Rule: >= 3% faster at all three 256-row shapes and relerr within 2x of f32's -> bf16 partials
# become the default where a split holds <= 256 rows (as late_vt's rule goes by split rows).
# ~2.5 min on an H100. Usage (repo root, with .whl/ carried):
#   bash experiments/gpu_sessions/gpu_session53b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r53b
R="$OUT/r53b"; mkdir -p "$R"
install_wheels
timeout 140 python3 experiments/check_mgpu_attention.py --no-mosaic --fmt nvfp4 \
  --shapes 8:8192,32:8192,8:32768,32:32768 --triton-variants ";bf16_partials=1;split_target=1024" \
  --out "$R/partials" > "$R/partials.txt" 2>&1
echo "partials rc=$?"; grep -iE "error|fail" "$R/partials.txt" | head -3
python3 experiments/check_mgpu_attention.py --summary "$R/partials/kernels_attention_mgpu.json"
exit 0
