#!/usr/bin/env bash
# Ran at commit c5fd6b0 (session 16).
# Session 16, one H200: 16a found the fused split merge (last split of a head merges) no faster
# than the separate combine kernel (111 x 32K 757 vs 753 us; 27 x 128K 793 vs 734): with grid
# (B, H, P) every head's last split runs in the last wave, so all merges queue at the end. Now
# split_order="inner" (grid (P, H, B), the default with "fused") launches a head's splits
# together, and a half split target (4096: P 32 -> 16 at 111 x 32K) halves the partials.
# (1) check_attention_combine.py: kernel (outer, default P) as the reference, kernel:inner,
#     fused (inner), kernel::4096, fused::4096 at the 4 NVFP4 shapes;
# (2) the 4-layer 30B step at 32K and 128K: bf16 + fp4 (kernel), fp4 fused, fp4 kernel 4096,
#     fp4 fused 4096, side by side.
# Prediction (written before the run): inner order alone within 1% of outer; fused (inner)
# = kernel + ~5 us: 111 x 32K ~735 us (69.5% of copy, kernel combine 753), 128 x 32K ~851; at
# 27 x 128K (P = 128, a 64-step merge at the tail) ~745, worse than the kernel (734), and
# ~725 with target 4096 (P = 64). Target 4096 with the kernel combine: combine 21 -> ~11 us,
# the attention kernel itself +-2%. 4-layer FP4 step at 32K: best variant -1.5..-2.5% vs kernel.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session16b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r16b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 200 python3 experiments/check_attention_combine.py --out "$R/combine" \
  --shapes nvfp4:111:32768,nvfp4:27:131072,nvfp4:128:32768,nvfp4:32:32768 \
  --combines kernel,kernel:inner,fused,kernel::4096,fused::4096 > "$R/combine.txt" 2>&1
echo "combine rc=$?"
C=32768,131072  # (as run: a local roll() with these arguments, now gpu_prelude's rollout_4l)
rollout_4l roll_kernel 130 bf16,fp4 $C --steps 12 --attn_combine kernel
rollout_4l roll_fused 130 fp4 $C --steps 12 --attn_combine fused
rollout_4l roll_kernel4096 130 fp4 $C --steps 12 --attn_combine kernel --attn_split_target 4096
rollout_4l roll_fused4096 130 fp4 $C --steps 12 --attn_combine fused --attn_split_target 4096
cp -r "$R"/* "$OUT/" 2>/dev/null
grep -E "^  fmt|Error|error" "$R/combine.txt" | cut -c1-600
for n in roll_kernel roll_fused roll_kernel4096 roll_fused4096; do
  grep -E "^\| (fp4|bf16) " "$R/$n/rollout_throughput.md" | sed "s/^/$n /" | cut -c1-120
done
exit 0
