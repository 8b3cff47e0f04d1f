#!/usr/bin/env bash
# Issue 6, grouped kernel at 512 tokens: where its time goes, with the timing probes of
# session 43 (`fp4_matmul_mgpu._DIAG`: `no_decode` puts the code word in the A registers, no
# decode; `stream_only` runs the TMA pipeline and no decode or wgmma) on the library's kernel
# (mp 56, widths 32 / 40 / 48, tk 256 x 2 stages) at 512 tokens, and at 128 (mp 16: 78-79% of
# copy on the H100) for contrast, both expert shapes.
# Session 43 ran them at 216 / 888 rows only (mp 16, before the widths): the kernel sat 1.9-4.1
# us above its stream. Session 50e (H100): GROUPED_MMA_OVERLAP made the manual-pipeline kernel
# 9-38% slower, so "decode and MMA take turns" is not the 512-token limit either.
# Prediction (before the run), 512 tokens, H100: 2048 x 768 full 62.8 us, no_decode 57-60,
# stream_only 45-52 (x is re-read from L2 by 12 programs an expert); 768 x 2048 alike; at 128
# tokens (session 43 at 888 rows, before the widths: 1.9-4.1 us above the stream) stream_only
# within 5 us of the full time. What it decides: stream_only >= 90% of the full
# time says the TMA stream (weights + x re-reads, 2 programs an SM) is the limit; full -
# no_decode > 10 us says the decode is; no_decode - stream_only > 10 us says the wgmma is.
# On an H200 it then runs the H200 measurements not taken since session 48: NVFP4 f32 P with
# late_vt on / off at the short-split shapes (gpu_session49a.sh's first part) and the issue's
# grouped table at 32 / 128 / 512 tokens (gpu_session48a.sh's first part).
# ~3 min on an H100, ~7 on an H200. Usage (repo root, with .whl/ carried):
#   [TOKENS=512] bash experiments/gpu_sessions/gpu_session51a.sh  (TOKENS: the probes' token counts;
#   TOKENS=none skips the probes, e.g. after gpu_session51b.sh, which runs them, on the same card)
source "$(dirname "$0")/../gpu_prelude.sh" r51a
R="$OUT/r51a"; mkdir -p "$R"
install_wheels
if [ "${TOKENS:-}" != none ]; then
  timeout 200 python3 experiments/check_mgpu_matmul.py --grouped --tokens "${TOKENS:-128,512}" \
    --diag no_decode,stream_only --max-seconds 185 --out "$R/probes" \
    > "$R/probes.txt" 2>&1
  echo "probes rc=$?"; grep -iE "error|fail" "$R/probes.txt" | head -3
  grouped_summary "$R/probes/kernels_matmul_mgpu_grouped.json"
fi
grep -q H200 <<<"$(nvidia-smi -L)" || exit 0
timeout 120 python3 experiments/check_mgpu_attention.py --no-mosaic --fmt nvfp4 \
  --shapes 8:8192,8:32768,32:8192,8:131072,32:32768,128:8192 \
  --triton-variants "late_vt=1;late_vt=0" --out "$R/late_vt" > "$R/late_vt.txt" 2>&1
echo "late_vt rc=$?"
python3 experiments/check_mgpu_attention.py --summary "$R/late_vt/kernels_attention_mgpu.json"
timeout 200 python3 experiments/check_mgpu_matmul.py --grouped --tokens 32,128,512 \
  --max-seconds 170 --out "$R/grouped" > "$R/grouped.txt" 2>&1
echo "grouped rc=$?"
grouped_summary "$R/grouped/kernels_matmul_mgpu_grouped.json"
exit 0
