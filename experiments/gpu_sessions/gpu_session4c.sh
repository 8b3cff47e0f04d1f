#!/usr/bin/env bash
# Session-4 GPU call C on a 2-GPU host (a record of what ran; results in
# experiments/results/repro_small_headline.*): the headline study on small.py, 3 seeds, from one
# BF16 SFT warm start per seed (450 steps; the paper starts every variant from one BF16
# checkpoint), 100 RL steps at lr 5e-5, the 5 headline variants as 5 processes (seeds in turn).
# Training finished at 323 s; the aggregation (then serial: the code-distance diagnosis took 188 s)
# was cut by the 550 s limit during the deployment evaluation (since then the training jobs run
# those evaluations themselves: repro.py --post_eval). Usage (repo root):
# bash experiments/gpu_sessions/gpu_session4c.sh
STUDIES=headline,deployment SEEDS=0,1,2 PAR=5 DEADLINE=400 WARM=bf16 \
  exec bash "$(dirname "$0")/../gpu_repro.sh"
