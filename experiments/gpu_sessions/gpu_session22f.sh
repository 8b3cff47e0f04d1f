#!/usr/bin/env bash
# Ran at commit 35886a0 + the uncommitted aligned_rows_kernel with _PLAN_BLOCK = 16 (session 22, one H200).
# One H200: the grouped wrapper's aligned-layout bookkeeping (aligned_rows + the groups' cumsum)
# as one Pallas Triton launch (fp4_matmul_mgpu.aligned_rows_kernel, ALIGNED_ROWS_KERNEL) against
# the XLA ops (22b's profile: four small fusions, ~21.5 us per layer): the 4-layer 30B FP4 step
# at 32K side by side (--grouped_plan kernel / xla), then the kernel's step profiled.
# Prediction (written before the run): the kernel ~4-8 us per launch (22e, 256 rows per program:
# 72 us), the 32K step 0.03-0.08 ms faster than with the XLA ops.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session22f.sh
source "$(dirname "$0")/../gpu_prelude.sh" r22f
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
for plan in kernel xla; do
  rollout_4l "step_$plan" 120 fp4 32768 --steps 16 --grouped_plan $plan
done
rollout_4l prof 100 fp4 32768 --steps 8 --profile_steps 8
rm -rf "$R"/prof/profile/trace_*
tar -C "$R" -czf "$OUT/r22f.tar.gz" .
rollout_rows step_kernel step_xla
f=$(ls "$R"/prof/profile/*.md 2>/dev/null | head -1); [ -n "$f" ] && sed -n 1,1p "$f" | cut -c1-160
grep -i "aligned\|Error" "$R"/prof/profile/*.md "$R/prof.txt" | head -5
exit 0
