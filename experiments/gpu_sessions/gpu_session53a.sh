#!/usr/bin/env bash
# Ran in session 53 on an H100 (experiments/results/gpu/session53/53a/): the split K pipeline
# stored the default's output bit for bit and was slower at every shape; it is removed (commit
# 20d67ba has it, GROUPED_X_STEPS and --split / xsteps), so this script no longer runs as written.
# Issue 6, grouped kernel: a deeper weight pipeline at the kernel's occupancy. Session 53
# (gpu_session52a.sh, H100, kernel device time) found, at 512 tokens with 2 CTAs an SM (the
# kernel's occupancy): the weight stream alone (weights_only:2) 45.3 / 47.2 us, the whole TMA
# stream (stream_only:2) 51.6 / 49.2, the kernel 62.4 / 65.1 (2048 x 768 / 768 x 2048). At 128
# tokens the kernel equals its stream (45.5 vs stream_only:2 45.2; weights_only:2 42.1). Both
# run 2 pipeline stages: while a warpgroup decodes and multiplies one stage, one stage is in
# flight, ~9 KB of weights a CTA; at mp 56 an x stage is 32 KB more (from L2), so 3-4 stages of
# one pipeline do not fit 2 CTAs an SM.
# New (CPU-tested: it lowers for CUDA, its jaxpr copies and waits as designed): the split K
# pipeline (fp4_matmul_mgpu.GROUPED_X_STEPS, check_mgpu_matmul --split S:X[:NT]): weights in a
# ring of S stages, x in one of X, each with its own barriers; S 4, X 2 is 102 KB a CTA at mp
# 56 (2 CTAs an SM). This call:
#   1. bit for bit against the default (check_mgpu_grouped_edge.py: 512 tokens and skewed groups,
#      both expert shapes and the fused pair, 2 repeats): steps 4 with x 2 (nt 1) and x 1;
#   2. 512 tokens: the default, nt 1 (no split), and the split 4:2, 3:2, 4:1 (68 KB: x one
#      stage), 4:2:1 (nt 1);
#   3. the fused gate / up pair at 512 tokens (check_mgpu_swiglu.py): the split 4:1 and 3:1
#      (x one stage: 104 / 86 KB a CTA; 4:2 would be 136 KB, one CTA an SM);
#   4. 128 tokens: the kernel at 2 / 3 / 4 stages of one pipeline (mp 16: 21 KB a stage, 4 fit
#      2 CTAs an SM) and the split 4:2.
# Prediction (before the run), H100: 512 tokens, 2048 x 768 (nt 1): split 4:2 55-59 us (62.4),
# 3:2 57-61; 768 x 2048: 4:2:1 (all 3 K steps' weights in flight at once) 58-63 us against the
# default's 65.1 and nt 1's 66-68. The pair 4:1 100-108 us (112.1). 128 tokens: 4 stages
# 42-45 us (45.5 / 47.4 at 2).
# Rule: the split >= 3% faster than the default at both 512-token shapes (its best S:X[:NT]
# each), maxdiff 0 and the edge check passed -> default_grouped_knobs gives mp 56 calls steps 4
# with GROUPED_X_STEPS 2; 128 tokens: 3 or 4 stages >= 2% faster at both shapes with maxdiff 0
# -> the decode pick. Otherwise the default stays and the split is removed.
# ~8.5 min on an H100. Usage (repo root, with .whl/ carried):
#   [QUICK=1] bash experiments/gpu_sessions/gpu_session53a.sh
# QUICK=1 (~4.5 min, for a call with little device time left): the edge check with 1 repeat,
# 512 tokens with the split 4:2, 4:1, 4:2:1 only, no 128 tokens.
source "$(dirname "$0")/../gpu_prelude.sh" r53a
R="$OUT/r53a"; mkdir -p "$R"
install_wheels
quick=${QUICK:-0}
timeout 200 python3 experiments/check_mgpu_grouped_edge.py --shapes 2048x768,768x2048 \
  --repeats $([ "$quick" = 1 ] && echo 1 || echo 2) --pair --variants "steps=4,GROUPED_X_STEPS=2,nt=1;steps=4,GROUPED_X_STEPS=1" \
  > "$R/edge.txt" 2>&1
echo "edge rc=$?"; grep -E "FAIL|rror" "$R/edge.txt" | head -5; tail -1 "$R/edge.txt"
if [ "$quick" = 1 ]; then grouped_check t512 512 100 --tiles 1 --split 4:2,4:1,4:2:1; exit 0; fi
grouped_check t512 512 140 --tiles 1 --split 4:2,3:2,4:1,4:2:1
timeout 130 python3 experiments/check_mgpu_swiglu.py --tokens 512 --out "$R/pair" \
  --knobs "steps=4,xsteps=1;steps=3,xsteps=1" > "$R/pair.txt" 2>&1
echo "pair rc=$?"; grep -E "^\|? *512" "$R/pair.txt" | head -3
grouped_check t128 128 100 --knobs 16:256:2,16:256:3,16:256:4 --split 4:2
exit 0
