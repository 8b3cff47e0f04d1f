#!/usr/bin/env bash
# Ran at commit 35886a0 + the uncommitted aligned_rows_kernel (_PLAN_BLOCK = 16), session 22, one H200, as one inline command (kept here as run).
# The 4-layer 30B FP4 step at 32K with the aligned-layout bookkeeping as XLA ops and as the
# Pallas kernel, alternating (xla, kernel, xla, kernel), to check 22f's order (kernel first).
# Prediction (written before the run): the kernel faster in both pairs by 1-3%.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session22g.sh
source "$(dirname "$0")/../gpu_prelude.sh" r22g >/dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO
for plan in xla kernel xla kernel; do
  rollout_4l "s_$plan" 60 fp4 32768 --steps 16 --grouped_plan $plan
  grep -E "^\| fp4 " $R/s_$plan/rollout_throughput.md | cut -c1-80
  mv $R/s_$plan $R/s_${plan}_$RANDOM
done
tar -C $R -czf $OUT/r22g.tar.gz .
