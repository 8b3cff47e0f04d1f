#!/usr/bin/env bash
# Issue 7: the issue's attention table (`bench_attention`) with today's defaults, on whichever
# card comes. Since its last run (session 38, H200) NVFP4 with f32 P transposes each V plane at
# its own MMA where a split holds >= 1024 cache rows (`late_vt`, sessions 48 and 49;
# `attention_triton.LATE_VT_MIN_ROWS`); the short-split shapes (8 x 8K / 32K, 32 x 8K) keep the
# session-38 kernel. Prediction (before the run), device time: on an H100 NVFP4 f32 P 90-93% of
# copy at 111 x 32K and 27 x 128K and 128 x 32K (session 49's check script: 92-93%), MXFP4 f32 P
# ~80%, the short-split shapes within +-3% of their session-38 ratios scaled by the card;
# on an H200 NVFP4 70-71% at 111 x 32K, 69.5-70.5% at 27 x 128K, MXFP4 ~61%.
# The first run (H100) stopped at 128 x 128K: the bf16 caches and their transposed copies need
# more than its 80 GB. bench_attention now skips a row the device has no memory for, naming it,
# and this script writes straight into $OUT (a call cut short keeps every row saved so far).
# ~7 min. Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session50b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r50b
R="$OUT/r50b"; mkdir -p "$R"
install_wheels
attention_table 430 360
attention_table_rows
exit 0
