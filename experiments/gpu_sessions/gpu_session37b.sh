#!/usr/bin/env bash
# Session 37, the second call on the same GPU. Issue 7: the MXFP4 NaN-path A/B at the issue's
# shapes (session 36 measured it on H100s only, at smaller shapes), with 32-row tiles at 2 and 3
# stages; then issue 6's dense / grouped table (kernels_matmul.md is session 29's, an H200).
# Prediction (before the run), on an H200 where the SMs are the limit: bf16 P (32, 1, 2) fadd
# 4-8% faster than select; f32 P (64, 1, 2) fadd 3-9% slower (as on the H100); f32 P (32, 1, 2)
# fadd within 3% of (64, 1, 2) select; 3 stages within 2% of 2. Matmul: dense 73-76 / 73-76 /
# 60-64 / 41-44% of copy at M = 1 / 8 / 32 / 64, grouped 63-67% (session 29b).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session37b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r37b
install_wheels
SH=${SH:-111:32768,27:131072}; echo "shapes $SH"
timeout 270 python3 experiments/ab_mxfp4_scale_path.py --out "$R/ab" --shapes $SH \
  --triton-variants ";block_k=32,num_stages=2;block_k=32,num_stages=3;bf16_p=1" > "$R/ab.txt" 2>&1
echo "ab rc=$?"; grep -iE "error|Traceback" "$R/ab.txt" | head -5
BENCH_TIME_LIMIT_S=${LIMIT:-250} timeout 300 python3 -m pallas_kernels.bench matmul --device-time \
  --sections dense,grouped --out "$R/bench" > "$R/bench.txt" 2>&1; echo "bench rc=$?"
tar -C "$R" -czf "$OUT/r37b.tar.gz" .
for n in select fadd select2 fadd2; do echo "== $n"; mgpu_attention_summary "ab/$n"; done
grep -E "FAILED|Error|guard" "$R/bench.txt" | head -5
grep -E "^\| (dense|grouped)" "$R/bench/kernels_matmul.md" | grep -E "mosaic|xla_dot|ragged_dot" \
  | cut -c1-150
exit 0
