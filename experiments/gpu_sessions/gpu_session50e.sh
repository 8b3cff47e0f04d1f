#!/usr/bin/env bash
# Ran at commit a51d6f2 (session 51, H100); the manual-pipeline kernel (cta_wgs) was removed
# afterwards: check out a51d6f2 to repeat it (NOTES_matmul, sessions 50 and 51).
# Issue 6, grouped kernel at 512 tokens: the manual-pipeline kernel (`fp4_matmul_mgpu.
# _grouped_multi`, `cta_wgs=` / `GROUPED_CTA_WGS`) with its wgmma left in flight while the next
# K step's tile is awaited and decoded (`GROUPED_MMA_OVERLAP`; written in session 50 after the
# device budget ran out: CPU-tested only, it lowers for CUDA with `wgmma.wait_group 1`). The
# K loop runs two steps an iteration so that consecutive steps' decoded A operands live in
# different registers (a review found that one step a loop iteration rewrites the registers
# an in-flight wgmma reads, and that ptxas does not prevent it). The kernel now also takes the
# library's chunk widths (32, 40, 48: one K pipeline per width, as the direct kernel), so every
# cta_wgs column here runs with them; gpu_session50d.sh ran it with one width.
# Why: session 50 (H100) found the 512-token kernel bound neither by pipeline restarts (tile
# runs: no gain), nor by barriers (none: within 1%), nor by registers or warpgroups an SM (3
# warpgroups of 112 registers, 1.5x the bytes in flight: 14-27% slower). Every variant decodes
# a K step, issues its wgmma and waits for it before the next step, so in each warpgroup the
# tensor-core work and the decode take turns; at mp 56 a wgmma is 64 x (32..64) x tk.
# 1. edge calls (`check_mgpu_grouped_edge.py`), overlap on: 512 tokens and skewed groups
#    (several chunks) at both expert shapes and at K = 128 and 256 (1 and 2 K steps, fewer than
#    the stages), and the fused pair; cta_wgs 3, 1, and 1 at 2 stages, against the library's
#    default (maxdiff must be 0, no NaN); each call runs 3 times and must repeat itself bit for
#    bit (a register or stage race need not show in one run);
# 2. the grouped call at 512 tokens, both shapes: the default against cta_wgs 3 and 1 (tk 128 x
#    3 stages), each with and without the overlap, with the ptxas register counts and its wgmma
#    serialization warnings, if any; the PTX is kept (`ptx.tar.gz`) to check offline that no
#    instruction writes an in-flight wgmma's A registers;
# 3. the fused pair at 512 tokens: cta_wgs 3 without and with the overlap, 1 with it.
# Prediction (before the run): maxdiff 0; registers 112-120 without the overlap, ~30 more with
# it (two decoded A tiles live), no spills; the widths 3-8% faster than 50d's one width; with the
# overlap cta_wgs 3 5-20% faster than without (H100, one width: 71.5 / 83.2 us at 2048 x 768 /
# 768 x 2048),
# i.e. within -10..+10% of the default (62.5 / 65.4 us); cta_wgs 1 (3 CTAs an SM by shared
# memory) within 5% of cta_wgs 3.
# Rule: maxdiff 0 everywhere; a config >= 5% faster than the default on both shapes and on the
# pair at 512 tokens becomes the default for mp-56 calls (GROUPED_CTA_WGS, GROUPED_MMA_OVERLAP),
# then 128 / 1024 tokens and the 4-layer step are measured. Else the default stays (NOTES_matmul
# "Session 50" says what is left to try).
# ~6 min on an H100 or an H200 (at most ~9). Usage (repo root, with .whl/ carried):
#   bash experiments/gpu_sessions/gpu_session50e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r50e
R="$OUT/r50e"; mkdir -p "$R"
install_wheels
timeout 240 python3 experiments/check_mgpu_grouped_edge.py --knobs GROUPED_MMA_OVERLAP=1 \
  --variants "cta_wgs=3;cta_wgs=1;cta_wgs=1,steps=2" --shapes 2048x768,768x2048,128x768,256x768 \
  --pair --repeats 3 > "$R/edge.txt" 2>&1
rc=$?; echo "edge rc=$rc"; grep -E "^(ok|FAIL|edge|device)" "$R/edge.txt" | grep -v "^ok" | tail -20
[ $rc = 0 ] || exit 0
mkdir -p /tmp/r50e_ptx
MOSAIC_GPU_DUMP_PTX=1 MOSAIC_GPU_DUMP_PTXAS=1 MOSAIC_GPU_DUMP_TO=/tmp/r50e_ptx timeout 200 \
  python3 experiments/check_mgpu_matmul.py --grouped --tokens 512 --knobs 56:256:2 \
  --cta-wgs 3,1 --overlap --max-seconds 185 --out "$R/cta" > "$R/cta.txt" 2>&1
echo "cta rc=$?"
grep -iE "error|fail" "$R/cta.txt" | grep -v nvdisasm | head -5
grouped_summary "$R/cta/kernels_matmul_mgpu_grouped.json" | grep -v triton
grep -h "wgmma" /tmp/r50e_ptx/*.ptxas 2>/dev/null | sort | uniq -c | head -5
ptxas_registers /tmp/r50e_ptx ptx | tee "$R/registers.txt"
tar -C /tmp/r50e_ptx -czf "$R/ptx.tar.gz" .
timeout 120 python3 experiments/check_mgpu_swiglu.py --tokens 512 \
  --knobs "cta_wgs=3;cta_wgs=3,overlap=1;cta_wgs=1,overlap=1" --out "$R/swiglu" \
  > "$R/swiglu.txt" 2>&1
echo "fused pair rc=$?"; grep -E "^  tokens|rror" "$R/swiglu.txt" | cut -c1-1500
exit 0
