#!/usr/bin/env bash
# Issue 7, the FP4 split rule, on whichever card comes (session 56).
# Session 56's run (H100, results/gpu/session56/56a) was void for the split question: the
# fp4_split_target variant did not reach the jitted kernel (fixed since; gpu_session56b.sh
# reran it). The H200 branch is the next H200 call.
# - An H200: gpu_session55b.sh (its header has the rule: NVFP4 FP4_SPLIT_TARGET 1024 if >= 3%
#   faster at 32 x 8K and 8 x 32K), then gpu_session50b.sh (issue 7's table) as far as the
#   call's time goes.
# - An H100: the FP4 rule itself (attention_triton.FP4_SPLIT_TARGET with its 256..1024-row
#   bounds, variant fp4_split_target=N) at 4096 (today), 2048 and 1024 programs, at 11 shapes,
#   NVFP4 and MXFP4 (f32 P, the library's late_vt rule), then NVFP4 again at the shapes where
#   the splits differ. Sessions 53 / 55 timed the old program-count rule at 1024 on the H100
#   (split_target=1024, which also gives 4096-row splits at the large shapes); this times the
#   rule a per-device default would be.
#   Rows a split (4 KV heads; 4096 / 2048 / 1024 programs): 4 x 32K 256 / 256 / 512;
#   16 x 8K 256 / 256 / 512; 32 x 8K 256 / 512 / 1024; 64 x 8K 512 / 1024 / 1024; 8 x 32K 256 /
#   512 / 1024; 16 x 32K 512 / 1024 / 1024; 4 x 128K 512 / 1024 / 1024; the same at 8 x 8K
#   (256) and the controls 128 x 8K, 32 x 32K, 8 x 128K (1024).
#   Prediction (H100): NVFP4 at 1024 programs 8-11% faster at 32 x 8K and 8 x 32K (as 55b),
#   3-8% at 16 x 8K, 64 x 8K, 16 x 32K, 4 x 32K, 0-5% at 4 x 128K, within +-1.5% at the
#   unchanged shapes; 2048 in between. MXFP4 0-6% slower where the splits grow (55b: its
#   1024-row splits lost).
#   Rule (per format, H100): the candidate (2048 or 1024) that is >= 3% faster at both 32 x 8K
#   and 8 x 32K and nowhere > 1.5% slower (the two NVFP4 runs' mean where both ran) becomes
#   that format's FP4_SPLIT_TARGET on H100-class devices (the lower summed time of the two if
#   both pass); otherwise the rule stays.
# ~5 min. Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session56a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r56a
R="$OUT/r56a"; mkdir -p "$R"
install_wheels
if nvidia-smi -L | grep -q H200; then
  echo "H200: gpu_session55b.sh, then gpu_session50b.sh"
  OUT="$OUT" bash "$REPO/experiments/gpu_sessions/gpu_session55b.sh"
  OUT="$OUT" bash "$REPO/experiments/gpu_sessions/gpu_session50b.sh"
  exit 0
fi
SH=8:8192,16:8192,32:8192,64:8192,128:8192,4:32768,8:32768,16:32768,32:32768,4:131072,8:131072
for f in nvfp4 mxfp4; do
  timeout 200 python3 experiments/check_mgpu_attention.py --no-mosaic --fmt $f --shapes $SH \
    --triton-variants ";fp4_split_target=2048;fp4_split_target=1024" --out "$R/$f" \
    > "$R/$f.txt" 2>&1
  echo "$f rc=$?"; grep -iE "error" "$R/$f.txt" | head -3
done
timeout 100 python3 experiments/check_mgpu_attention.py --no-mosaic --fmt nvfp4 \
  --shapes 4:32768,16:8192,32:8192,64:8192,8:32768,16:32768,4:131072 \
  --triton-variants ";fp4_split_target=2048;fp4_split_target=1024" --out "$R/nvfp4_2" \
  > "$R/nvfp4_2.txt" 2>&1
echo "nvfp4_2 rc=$?"
for f in nvfp4 mxfp4 nvfp4_2; do
  echo "== $f"; python3 experiments/check_mgpu_attention.py --summary "$R/$f/kernels_attention_mgpu.json"
done
exit 0
