#!/usr/bin/env bash
# Session 48, after gpu_session46b.sh ran on an H200 (its late_vt A/B and mp / widths sweep):
# 1. issue 6's grouped table at 32 / 128 / 512 tokens (both expert shapes) as the library now
#    picks it: the rows x layout (never measured on an H200) and the chunk widths (32, 40, 48)
#    at mp 56 (new default: 5.5-7.4% faster at 512 tokens in 46b);
# 2. the fused gate / up / SwiGLU pair at 512 tokens (the rollout's call above 16 rows per
#    expert) with the default chunk widths against one width (`widths=0`), bf16 x and W4A4:
#    that it compiles, maxdiff 0 against the unfused stage, and the widths' gain (46b timed
#    single weights only);
# 3. issue 7: NVFP4 f32 P with late_vt (new default for that case, +1.1-2.0% at 111 x 32K /
#    27 x 128K in 46b) against late_vt=0 at small batches, 8 x 32K and 32 x 8K, where the A/B
#    never ran;
# 4. the 4-layer 30B FP4 decode step, rows vs aligned x layout, two alternating pairs
#    (gpu_session46a.sh's rule: revert GROUPED_X_LAYOUT to "aligned" if rows is >1% slower at
#    either context in the mean of the two pairs with both pairs slower).
# Prediction (before the run): (1) 32 / 128 tokens 28-31 / 36-40 us, 70-78% of copy (46a's
# prediction, unchanged: widths do not apply at mp 16); 512 tokens 60.5 / 63.3 us (43.5 /
# 41.5%) as in 46b. (2) widths 5-8% faster than one width (as the single 2048 x 768 weight),
# maxdiff 0 for bf16 x and W4A4 alike; if the pair does not compile or differs, GROUPED_WIDTHS
# goes back to () until it is mended. (3) late_vt within -1..+2% at the small shapes (12 vs 10
# warps per SM matters less where splits fill the GPU with short programs); keep the default
# unless it is > 1.5% slower at either. (4) rows 0.3-1.5% faster.
# ~7 min on an H200 (~6 on an H100); SHORT=1: the grouped table and the fused pair only
# (~5 min with the start).
# Usage (repo root, with .whl/ carried): [SHORT=1] bash experiments/gpu_sessions/gpu_session48a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r48a
install_wheels
timeout 200 python3 experiments/check_mgpu_matmul.py --grouped --tokens 32,128,512 \
  --max-seconds "${MAX_S:-170}" --out "$OUT/grouped" > "$OUT/grouped.txt" 2>&1
echo "grouped rc=$?"
grep -E "^device|^  k=" "$OUT/grouped.txt" | sed -E 's/triton_(relerr|us|pct_copy)=[^ ]* *//g' | cut -c1-400
timeout 100 python3 experiments/check_mgpu_swiglu.py --tokens 512 --knobs "widths=0" \
  --out "$OUT/swiglu" > "$OUT/swiglu.txt" 2>&1
echo "fused pair rc=$?"; grep -E "^device|^  tokens|rror" "$OUT/swiglu.txt" | cut -c1-900
[ "${SHORT:-0}" = 1 ] && exit 0
timeout 90 python3 experiments/check_mgpu_attention.py --no-mosaic --fmt nvfp4 \
  --shapes 8:32768,32:8192 --triton-variants ";late_vt=0" --out "$OUT/late_vt_small" \
  > "$OUT/late_vt_small.txt" 2>&1
echo "late_vt small rc=$?"
python3 experiments/check_mgpu_attention.py --summary "$OUT/late_vt_small/kernels_attention_mgpu.json"
step_layout_ab r48a.tar.gz
grep -hiE "Error|Traceback" "$R"/*.txt "$OUT"/*.txt | sort | uniq -c | head -6
exit 0
