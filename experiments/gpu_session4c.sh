#!/usr/bin/env bash
# Session-4 GPU call C on a 2-GPU host: the headline and deployment studies on configs/small.py (issue 9),
# after the NVFP4 GPU numerics fix. Call A (gpu_session4a.sh: 9 per-mode SFT warm starts as 8 processes
# on 2 GPUs, XLA GEMM autotuning off) ran SFT at 1.4 s/step and never left the warm-start phase;
# session 2's 5 processes ran RL at 0.1-0.24 s/step. Here: one BF16 SFT warm start per seed (3
# processes; the paper starts every variant from one BF16 checkpoint), then the 5 headline
# variants as 5 processes (seeds in turn), default XLA flags, one shared persistent compilation
# cache. The deployment study evaluates the headline's bf16 and trace policies.
# SFT 450 steps at lr 1e-3, RL 100 steps at lr 5e-5. One tarball comes back.
# Usage (repo root): bash experiments/gpu_session4c.sh [RL] [SFT] [PAR] [DEADLINE_S]
set -uo pipefail
OUT=${OUT:-/tmp/gpu_out}
RL=${1:-100}
SFT=${2:-450}
PAR=${3:-5}
DEADLINE=${4:-400}
R=/tmp/r4c
mkdir -p "$OUT" "$R"
export PYTHONUNBUFFERED=1 JAX_COMPILATION_CACHE_DIR=/tmp/jax_cache
nvidia-smi -L
NOTE="H200 x2, session 4 (experiments/gpu_session4c.sh): SFT warm start $SFT steps at lr 1e-3 \
(one BF16 SFT per seed, shared by every variant; experiments/calibrate_sft.py on the \
H200: sampled accuracy 0.375 at step 450), RL $RL steps at lr 5e-5 (GRPO lr calibration: \
experiments/results/gpu/cal_rl_small.md); at most $PAR processes at once."
timeout 550 python3 experiments/repro_parallel.py --config=configs/small.py \
  --studies headline,deployment --seeds 0,1,2 --ablation_seeds 0 \
  --gpus 0,1 --parallel "$PAR" --warm_start --out /tmp/repro --results "$R/repro" \
  --steps "$RL" --note "$NOTE" --deadline_s "$DEADLINE" \
  -- --config.sft.steps="$SFT" --config.train.lr=5e-5 --config.checkpoint.every=1000 \
  > "$R/repro_parallel.txt" 2>&1
cp /tmp/repro/log_* "$R/" 2>/dev/null
find /tmp/repro -name metrics.jsonl -o -name config.json -o -name diagnose.json \
  -o -name 'deploy_eval_*.json' -o -name wall_time_s.txt | tar czf "$R/runs.tgz" -T - 2>/dev/null
tar czf "$OUT/session4c.tgz" -C /tmp r4c
grep -v "^[WI][0-9]" "$R/repro_parallel.txt" | tail -40
for f in "$R"/repro_small_*.md; do echo "== $f"; grep "^|" "$f" | head -14; done
exit 0
