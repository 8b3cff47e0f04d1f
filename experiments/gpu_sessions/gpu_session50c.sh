#!/usr/bin/env bash
# Ran at commit 2571d4b (H100); GROUPED_AUTO_BARRIERS and the scripts' flags were removed
# afterwards (NOTES_matmul, session 50).
# Issue 6, grouped kernel: without Pallas' automatic warpgroup barriers
# (`fp4_matmul_mgpu.GROUPED_AUTO_BARRIERS = False`, i.e. `unsafe_no_auto_barriers`; new in
# session 50, CPU-tested: it lowers without any `bar.sync`). Pallas puts a `bar.sync` before each
# of the 3 TMA copies a K step issues; in this kernel the step's `wgmma_wait(0)` already orders
# every warp's reads of a stage before its refill (NOTES_matmul "Session 50"). Why now: the
# 512-token profile (session 49, H100) has barrier stalls at 10% of the stall samples (0.47 of
# 4.55 cycles per issued instruction), and tile runs (gpu_session50a.sh) showed that pipeline
# restarts are not what the kernel waits for.
# 1. the grouped call at 512 and 128 tokens, both expert shapes, the library's pick with and
#    without the barriers (column mgpu_nobar, maxdiff against the default), run twice in two
#    processes;
# 2. the fused gate / up / SwiGLU pair at 512 and 128 tokens, barriers=0 against the default.
# Prediction (before the run): maxdiff 0; 1-5% faster at 512 tokens (both shapes, the pair),
# 0-3% at 128 tokens.
# Rule: maxdiff 0 everywhere; >= 2% faster at 512 tokens on both shapes (mean of the two
# processes) and on the pair, and not more than 1% slower at 128 tokens anywhere: the default
# becomes GROUPED_AUTO_BARRIERS = False. Else it stays True.
# ~4 min on an H100 or an H200. Usage (repo root, with .whl/ carried):
#   bash experiments/gpu_sessions/gpu_session50c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r50c
R="$OUT/r50c"; mkdir -p "$R"
install_wheels
for rep in 1 2; do
  for tk in 512:56 128:16; do
    timeout 100 python3 experiments/check_mgpu_matmul.py --grouped --tokens "${tk%%:*}" \
      --knobs "${tk##*:}:256:2" --no-barriers --max-seconds 80 \
      --out "$R/nobar${tk%%:*}_$rep" > "$R/nobar${tk%%:*}_$rep.txt" 2>&1
    echo "run $rep, ${tk%%:*} tokens rc=$?"
    grep -iE "error|fail" "$R/nobar${tk%%:*}_$rep.txt" | grep -v nvdisasm | head -3
    grouped_summary "$R/nobar${tk%%:*}_$rep/kernels_matmul_mgpu_grouped.json" | grep -v triton
  done
done
timeout 110 python3 experiments/check_mgpu_swiglu.py --tokens 512,128 --knobs "barriers=0" \
  --out "$R/swiglu" > "$R/swiglu.txt" 2>&1
echo "fused pair rc=$?"
grep -E "^  tokens|rror" "$R/swiglu.txt" | cut -c1-1200
exit 0
