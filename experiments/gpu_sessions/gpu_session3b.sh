#!/usr/bin/env bash
# Session-3 GPU call B on a 2-GPU host: the reproduction studies on configs/small.py (issue 9).
#   0. GPU 1: check_gpu_numerics.py (the quantizer after the exact-reciprocal fix).
#   1. GPU 0: SFT calibration (lr 1e-3, 600-step schedule): the first step with sampled accuracy
#      >= 0.35 sets the warm-start length (the call-A calibration: 800 steps leave ~0.95, 250 ~0.16).
#   2. experiments/repro_parallel.py --warm_start --per_seed: one shared SFT warm start per (seed,
#      trainer numerics), then headline (5 variants x 3 seeds) + hint_layers (6) + replay_is (4,
#      seed 0) RL runs in parallel over both GPUs, RL lr 5e-5 (call A: 3e-4 collapses, 1e-4 dips,
#      3e-5 is stable), then aggregation with the deployment evaluation and the code-distance
#      histogram. Everything comes back as one tarball (the device returns at most 8 files).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session3b.sh [RL_STEPS]
set -uo pipefail
OUT=${OUT:-/tmp/gpu_out}
RL=${1:-120}
R=/tmp/r3  # working files; only a tarball and the tables go to $OUT (8 files at most come back)
mkdir -p "$OUT" "$R"
export PYTHONUNBUFFERED=1
nvidia-smi -L
CUDA_VISIBLE_DEVICES=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.2 timeout 90 python3 \
  experiments/check_gpu_numerics.py --json "$R/gpu_numerics.json" > "$R/gpu_numerics.txt" 2>&1 &
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 experiments/calibrate_sft.py --config=configs/small.py \
  --max_steps=600 --every=50 --eval_batches=2 --json "$R/calib_small.json" \
  > "$R/calib_small.txt" 2>&1
wait
SFT=$(python3 - "$R/calib_small.json" <<'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except Exception:
    rows = []
ok = [r["step"] for r in rows if r["step"] and r["sampled"] >= 0.35]
print(ok[0] if ok else 400)
PY
)
echo "SFT steps chosen: $SFT"
NOTE="H200 x2, session 3 (experiments/gpu_sessions/gpu_session3b.sh): SFT warm start $SFT steps at lr 1e-3 \
(experiments/calibrate_sft.py: first step with sampled accuracy >= 0.35), one per seed and trainer \
numerics, shared by the variants; RL $RL steps at lr 5e-5."
timeout 400 python3 experiments/repro_parallel.py --config=configs/small.py \
  --studies headline,hint_layers,replay_is,deployment --seeds 0,1,2 --ablation_seeds 0 \
  --gpus 0,1 --parallel 25 --per_seed --warm_start --out /tmp/repro --results "$R/repro" \
  --steps "$RL" --note "$NOTE" --deadline_s 300 \
  -- --config.sft.steps="$SFT" --config.train.lr=5e-5 --config.checkpoint.every=1000 \
  > "$R/repro_parallel.txt" 2>&1
tail -5 "$R/repro_parallel.txt"
cp /tmp/repro/log_* "$R/" 2>/dev/null
find /tmp/repro -name metrics.jsonl -o -name config.json -o -name diagnose.json \
  -o -name 'deploy_eval_*.json' | tar czf "$R/runs.tgz" -T - 2>/dev/null
tar czf "$OUT/session3b.tgz" -C /tmp r3
cp "$R"/repro_small_*.md "$OUT/" 2>/dev/null
grep "^|" "$R/calib_small.txt" "$R/gpu_numerics.txt"
for f in "$R"/repro_small_*.md; do echo "== $f"; grep "^|" "$f" | head -14; done
exit 0
