#!/usr/bin/env bash
# Prepared in session 8 for the next session (one H200; not yet run): the RL main job with
# rollout.kernel_layout on, which no GPU run of trace_jax.main has used yet (the rollout
# benchmarks have, through the same model forward). Two short small.py runs, off then on; the
# log's "t A+B s" is rollout + train seconds per RL step. If "on" runs and its rollouts are
# faster, make the flag default to on for GPU backends (it is off by default today).
# Prediction: rollout seconds per step down >= 1.5x (per-layer params, Pallas FP4 experts).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session9c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r9c
for kl in False True; do
  timeout 260 python3 -m trace_jax.main --config=configs/small.py --config.workdir="$R/kl_$kl" \
    --config.sft.steps=20 --config.train.steps=20 --config.rollout.kernel_layout=$kl 2>&1 \
    | tr '\r' '\n' | grep -E "^step|Error|error|Traceback" > "$R/kl_$kl.txt"
done
tar czf "$OUT/session9c.tgz" -C /tmp --exclude="kl_*/*" r9c  # logs only: the workdirs hold checkpoints
for kl in False True; do echo "== kernel_layout=$kl"; tail -4 "$R/kl_$kl.txt"; done
exit 0
