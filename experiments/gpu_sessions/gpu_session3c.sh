#!/usr/bin/env bash
# Session-3 GPU call C on a 2-GPU host: the reproduction studies on configs/small.py (issue 9),
# sized after call B (experiments/gpu_sessions/gpu_session3b.sh), whose 25 one-seed processes all spent the
# 170 s before its deadline compiling their first RL step. Here: one process per variant (seeds in
# turn, compiled steps shared), SFT warm start 450 steps (call B's calibration: sampled accuracy
# 0.375 at step 450 of a 600-step schedule), RL 100 steps at lr 5e-5. GPU 1 first explains the
# NVFP4 code differences between GPU and CPU (check_gpu_numerics.py). One tarball comes back.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session3c.sh [RL_STEPS] [SFT_STEPS]
set -uo pipefail
OUT=${OUT:-/tmp/gpu_out}
RL=${1:-100}
SFT=${2:-450}
R=/tmp/r3c
mkdir -p "$OUT" "$R"
export PYTHONUNBUFFERED=1
nvidia-smi -L
CUDA_VISIBLE_DEVICES=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.1 timeout 90 python3 \
  experiments/check_gpu_numerics.py --n 65536 > "$R/gpu_numerics.txt" 2>&1 &
NOTE="H200 x2, session 3 (experiments/gpu_sessions/gpu_session3c.sh): SFT warm start $SFT steps at lr 1e-3 \
(one per seed and trainer numerics, shared by the variants; experiments/calibrate_sft.py on the \
H200: sampled accuracy 0.375 at step 450), RL $RL steps at lr 5e-5 (GRPO lr calibration: \
experiments/results/gpu/cal_rl_small.md)."
timeout 520 python3 experiments/repro_parallel.py --config=configs/small.py \
  --studies headline,hint_layers,replay_is,deployment --seeds 0,1,2 --ablation_seeds 0 \
  --gpus 0,1 --parallel 15 --warm_start --out /tmp/repro --results "$R/repro" \
  --steps "$RL" --note "$NOTE" --deadline_s 390 \
  -- --config.sft.steps="$SFT" --config.train.lr=5e-5 --config.checkpoint.every=1000 \
  > "$R/repro_parallel.txt" 2>&1
wait
tail -8 "$R/repro_parallel.txt"
cp /tmp/repro/log_* "$R/" 2>/dev/null
find /tmp/repro -name metrics.jsonl -o -name config.json -o -name diagnose.json \
  -o -name 'deploy_eval_*.json' -o -name wall_time_s.txt | tar czf "$R/runs.tgz" -T - 2>/dev/null
tar czf "$OUT/session3c.tgz" -C /tmp r3c
cat "$R/gpu_numerics.txt" | grep -v "^[WI][0-9]"
for f in "$R"/repro_small_*.md; do echo "== $f"; grep "^|" "$f" | head -14; done
exit 0
