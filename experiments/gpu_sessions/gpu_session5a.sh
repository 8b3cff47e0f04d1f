#!/usr/bin/env bash
# Session-5 GPU call A on a 2-GPU host: the hint-coverage ablation (issue 9, claim 3) on small.py,
# seed 0: hints on 25 / 50 / 100% of layers, 1-bit mantissa vs exact full-code hints (6 trace runs,
# one process each, 3 per H200), from one BF16 SFT warm start (450 steps), 100 RL steps at lr 5e-5.
# Results: experiments/results/repro_small_hint_layers.*. Usage (repo root):
# bash experiments/gpu_sessions/gpu_session5a.sh
STUDIES=hint_layers ABLATION_SEEDS=0 PAR=6 DEADLINE=450 LIMIT=550 WARM=bf16 \
  exec bash "$(dirname "$0")/../gpu_repro.sh"
