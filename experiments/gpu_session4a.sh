#!/usr/bin/env bash
# Session-4 GPU call A on a 2-GPU host: the reproduction studies on configs/small.py (issue 9),
# after the NVFP4 GPU numerics fix. Session 3's calls B/C ran 15-25 processes at once and every
# FP4-QAT process was still compiling its first RL step at the deadline; session 2's 5 processes
# finished. Here: at most PAR processes (default 8; headline variants first, then the ablations),
# XLA GEMM autotuning off (it times candidate kernels on a GPU the other processes share; the
# small model's GEMMs are tiny) and one persistent compilation cache shared by all processes.
# SFT warm start 450 steps (one per seed and trainer numerics), RL 100 steps at lr 5e-5.
# One tarball comes back. Usage (repo root): bash experiments/gpu_session4a.sh [RL] [SFT] [PAR] [DEADLINE_S]
set -uo pipefail
OUT=${OUT:-/tmp/gpu_out}
RL=${1:-100}
SFT=${2:-450}
PAR=${3:-8}
DEADLINE=${4:-400}
R=/tmp/r4a
mkdir -p "$OUT" "$R"
export PYTHONUNBUFFERED=1 JAX_COMPILATION_CACHE_DIR=/tmp/jax_cache XLA_FLAGS=--xla_gpu_autotune_level=0
nvidia-smi -L
NOTE="H200 x2, session 4 (experiments/gpu_session4a.sh): SFT warm start $SFT steps at lr 1e-3 \
(one per seed and trainer numerics, shared by the variants; experiments/calibrate_sft.py on the \
H200: sampled accuracy 0.375 at step 450), RL $RL steps at lr 5e-5 (GRPO lr calibration: \
experiments/results/gpu/cal_rl_small.md); at most $PAR processes at once, XLA GEMM autotuning off."
timeout 550 python3 experiments/repro_parallel.py --config=configs/small.py \
  --studies headline,hint_layers,replay_is,deployment --seeds 0,1,2 --ablation_seeds 0 \
  --gpus 0,1 --parallel "$PAR" --warm_start --out /tmp/repro --results "$R/repro" \
  --steps "$RL" --note "$NOTE" --deadline_s "$DEADLINE" \
  -- --config.sft.steps="$SFT" --config.train.lr=5e-5 --config.checkpoint.every=1000 \
  > "$R/repro_parallel.txt" 2>&1
cp /tmp/repro/log_* "$R/" 2>/dev/null
find /tmp/repro -name metrics.jsonl -o -name config.json -o -name diagnose.json \
  -o -name 'deploy_eval_*.json' -o -name wall_time_s.txt | tar czf "$R/runs.tgz" -T - 2>/dev/null
tar czf "$OUT/session4a.tgz" -C /tmp r4a
grep -v "^[WI][0-9]" "$R/repro_parallel.txt" | tail -40
for f in "$R"/repro_small_*.md; do echo "== $f"; grep "^|" "$f" | head -14; done
exit 0
