#!/usr/bin/env bash
# One H200 (session 23): why hint capture costs 5.1% of the 4-layer FP4 step at 128K (23e:
# 4.11 vs 3.90 ms; -0.8% at 32K): per-kernel device time of fp4 and fp4_nohints at 128K, each
# profiled over one 8-step call.
# Prediction (written before the run): the difference sits in a few kernels that only the
# capture path has or that fuse differently with it (hint packing, a gather of the hinted rows),
# ~50 us per layer; the attention kernel the same in both.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session23f.sh
source "$(dirname "$0")/../gpu_prelude.sh" r23f
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
rollout_4l prof 200 fp4,fp4_nohints 131072 --steps 8 --profile_steps 8
rm -rf "$R"/prof/profile/trace_*  # the raw traces (MBs); their tables stay
tar -C "$R" -czf "$OUT/r23f.tar.gz" .
rollout_rows prof
for f in "$R"/prof/profile/*.md; do sed -n 1,30p "$f" | cut -c1-130; done
exit 0
