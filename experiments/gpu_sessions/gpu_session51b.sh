#!/usr/bin/env bash
# Ran in session 52 on an H100 (experiments/results/gpu/session52/51b/): GROUPED_CHUNKED stored
# the default's output bit for bit and was 3-9% slower; it is removed (commit 6255351 has it),
# so this script no longer runs as written.
# Issue 6, grouped kernel at 512 tokens: one wgmma per 64-column span of each K step
# (`fp4_matmul_mgpu.GROUPED_CHUNKED`, new in session 51, CPU-tested: the jaxpr has tk / 64
# wgmmas a step, one weight and the pair, and it lowers for CUDA with the chunk widths), so
# that a warpgroup decodes span j + 1 while span j's wgmma runs. Session 51 reads the
# 512-token time as decode and MMA taking turns within each warpgroup (NOTES_matmul "Session
# 51": the two expert shapes take the same time though their x re-reads differ 2x; 512 tokens
# add 17.6 us over 128 for ~7 us of extra tensor work at peak). Also runs gpu_session51a.sh's
# timing probes (no_decode, stream_only) beside it, which test that reading directly.
# 1. edge calls (`check_mgpu_grouped_edge.py`): GROUPED_CHUNKED=1 against the default at both
#    expert shapes (tk 256: 4 spans a step, 8 / 3 K steps) and K = 128 / 256 (one K step of 2 /
#    4 spans), and at tk 128 and 64 (2 spans / 1 a step, several steps), 512 tokens and skewed
#    groups, and the fused pair; 3 repeats each, bit for bit (maxdiff 0, no NaN);
# 2. the grouped call at 128 and 512 tokens, both shapes: the default, `mgpu_chunked`, and the
#    probes `mgpu_no_decode` / `mgpu_stream_only` (of the default), kernel device time;
# 3. the fused pair at 512 tokens with chunked=1, timed against the default (its maxdiff there
#    is against the unfused stage; 1. checks it against the fused default bit for bit).
# Prediction (before the run): maxdiff 0 everywhere (the same k16 MMAs in the same order);
# 512 tokens: chunked 5-15% faster on both shapes and the pair (H100: 62.8 / 65.5 / 111 us ->
# 54-60 / 56-62 / 95-105), no_decode - stream_only 15-20 us; 128 tokens: chunked within -5..+10%
# (session 14g: the dense kernel at decode M lost 5-20%), no_decode - stream_only ~5 us.
# Rule: chunked >= 5% faster than the default on both shapes and on the pair at 512 tokens,
# maxdiff 0 -> GROUPED_CHUNKED becomes the default for chunks of mp 56 (mean groups > 16 rows),
# after 1024 tokens and the 4-layer step are timed with it; else it stays off, and if
# no_decode - stream_only is under 10 us at 512 tokens the reading is wrong (then the stream is
# what is left: stream_only against the full time says how much).
# ~7 min on an H100 or an H200 (at most ~9.5). Usage (repo root, with .whl/ carried):
#   [QUICK=1] bash experiments/gpu_sessions/gpu_session51b.sh
# QUICK=1 (~4 min, for a call with little device time left): the edge check at tk 256 only (both
# expert shapes and the pair, 1 repeat), the timing at 512 tokens only.
source "$(dirname "$0")/../gpu_prelude.sh" r51b
R="$OUT/r51b"; mkdir -p "$R"
install_wheels
if [ "${QUICK:-0}" = 1 ]; then  # a short call: tk 256 only, the expert shapes, 1 repeat, 512 tokens
  edge=(--variants "GROUPED_CHUNKED=1" --shapes 2048x768,768x2048 --pair --repeats 1)
  tokens=512
else
  edge=(--variants "GROUPED_CHUNKED=1;GROUPED_CHUNKED=1,tk=128;GROUPED_CHUNKED=1,tk=64"
        --shapes 2048x768,768x2048,128x768,256x768 --pair --repeats 3)
  tokens=512,128
fi
timeout 260 python3 experiments/check_mgpu_grouped_edge.py "${edge[@]}" > "$R/edge.txt" 2>&1
rc=$?; echo "edge rc=$rc"; grep -E "^(FAIL|edge|device)" "$R/edge.txt" | tail -20
[ $rc = 0 ] || exit 0
mkdir -p /tmp/r51b_ptx
MOSAIC_GPU_DUMP_PTX=1 MOSAIC_GPU_DUMP_PTXAS=1 MOSAIC_GPU_DUMP_TO=/tmp/r51b_ptx timeout 215 \
  python3 experiments/check_mgpu_matmul.py --grouped --tokens "$tokens" --chunked \
  --diag no_decode,stream_only --max-seconds 200 --out "$R/grouped" > "$R/grouped.txt" 2>&1
echo "grouped rc=$?"; grep -iE "error|fail" "$R/grouped.txt" | grep -v nvdisasm | head -5
grouped_summary "$R/grouped/kernels_matmul_mgpu_grouped.json" | grep -v triton
grep -h "C7512" /tmp/r51b_ptx/*.ptxas 2>/dev/null | sort | uniq -c | head -3
ptxas_registers /tmp/r51b_ptx | tee "$R/registers.txt"
timeout 90 python3 experiments/check_mgpu_swiglu.py --tokens 512 --knobs "chunked=1" \
  --out "$R/swiglu" > "$R/swiglu.txt" 2>&1
echo "fused pair rc=$?"; grep -E "^  tokens|rror" "$R/swiglu.txt" | cut -c1-900
exit 0
