#!/usr/bin/env bash
# Reproduction studies on configs/small.py in one device call (issue 9), parameterised; what the
# session-4 headline call (gpu_session4c.sh) ran, for any set of studies. Runs resume, so a study
# too big for one call can be split over calls only if /tmp/repro survives (it does not across
# fresh device machines): size each call to finish. One tarball ($OUT/repro.tgz) comes back with the
# tables, plots, logs and every run's metrics.
#
#   STUDIES=headline,deployment SEEDS=0,1,2 bash experiments/gpu_repro.sh           # ~9 min, 2 GPUs
#   STUDIES=hint_layers,replay_is ABLATION_SEEDS=0 PAR=5 bash experiments/gpu_repro.sh
#
# Env: STUDIES, SEEDS (headline/deployment), ABLATION_SEEDS, GPUS (default: all), PAR (training processes at
# once; two to three per H200 ran well, four per H200 ran SFT ~20x slower), RL (100 steps at lr
# 5e-5), SFT (450 steps at lr 1e-3: sampled accuracy ~0.4), WARM (bf16: one BF16 SFT per seed
# for every variant; per_mode: one per seed and trainer numerics), DEADLINE (s after which training stops
# and the aggregation runs; default 420), LIMIT (s for the whole launcher; default 550).
set -uo pipefail
OUT=${OUT:-/tmp/gpu_out}
STUDIES=${STUDIES:-headline,deployment}
SEEDS=${SEEDS:-0,1,2}
ABLATION_SEEDS=${ABLATION_SEEDS:-0}
GPUS=${GPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)}
PAR=${PAR:-5}
RL=${RL:-100}
SFT=${SFT:-450}
DEADLINE=${DEADLINE:-420}
LIMIT=${LIMIT:-550}
WARM=${WARM:-bf16}
R=/tmp/repro_results
mkdir -p "$OUT" "$R"
export PYTHONUNBUFFERED=1 JAX_COMPILATION_CACHE_DIR=/tmp/jax_cache
nvidia-smi -L
NOTE="$(nvidia-smi -L | wc -l)x H200 (experiments/gpu_repro.sh, STUDIES=$STUDIES PAR=$PAR): SFT \
warm start $SFT steps at lr 1e-3 (--warm_start_numerics=$WARM; \
experiments/calibrate_sft.py on the H200: sampled accuracy 0.375 at step 450), RL $RL steps at \
lr 5e-5 (GRPO lr calibration: experiments/results/gpu/cal_rl_small.md)."
timeout "$LIMIT" python3 experiments/repro_parallel.py --config=configs/small.py \
  --studies "$STUDIES" --seeds "$SEEDS" --ablation_seeds "$ABLATION_SEEDS" \
  --gpus "$GPUS" --parallel "$PAR" --warm_start --warm_start_numerics "$WARM" \
  --out /tmp/repro --results "$R/repro" \
  --steps "$RL" --note "$NOTE" --deadline_s "$DEADLINE" \
  -- --config.sft.steps="$SFT" --config.train.lr=5e-5 --config.checkpoint.every=1000 \
  > "$R/repro_parallel.txt" 2>&1
cp /tmp/repro/log_* "$R/" 2>/dev/null
find /tmp/repro -name metrics.jsonl -o -name config.json -o -name diagnose.json \
  -o -name 'deploy_eval_*.json' -o -name wall_time_s.txt | tar czf "$R/runs.tgz" -T - 2>/dev/null
tar czf "$OUT/repro.tgz" -C /tmp repro_results
grep -v "^[WI][0-9]" "$R/repro_parallel.txt" | grep -v "^|" | tail -30
for f in "$R"/repro_small_*.md; do echo "== $f"; grep "^|" "$f" | head -16; done
exit 0
