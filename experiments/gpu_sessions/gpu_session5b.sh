#!/usr/bin/env bash
# Session-5 GPU call B on a 2-GPU host: routing replay x IS correction (issue 9, claim 4; seed 0,
# 4 trace runs) and the deployment study (claim 5; bf16 and trace policies, seeds 0-2, each job
# evaluating its own finished policies with the FP4 engine: repro.py --post_eval=deploy), 6
# processes (3 per H200), from one BF16 SFT warm start per seed, 100 RL steps at lr 5e-5.
# Results: experiments/results/repro_small_{replay_is,deployment}.*. Usage (repo root):
# bash experiments/gpu_sessions/gpu_session5b.sh
STUDIES=replay_is,deployment SEEDS=0,1,2 ABLATION_SEEDS=0 PAR=6 DEADLINE=470 LIMIT=560 WARM=bf16 \
  exec bash "$(dirname "$0")/../gpu_repro.sh"
