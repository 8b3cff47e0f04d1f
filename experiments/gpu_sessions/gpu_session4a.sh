#!/usr/bin/env bash
# Session-4 GPU call A on a 2-GPU host (a record of what ran): all four small.py studies, 9 SFT warm
# starts (one per seed and trainer numerics) then 15 training jobs, at most 8 processes at once,
# XLA GEMM autotuning off, one shared compilation cache. Result: the 8 warm-start processes ran SFT
# at 1.4 s/step (0.7 s/step while others were still compiling) and the call ended inside the
# warm-start phase; nothing came back but logs. Two to three processes per H200 is what works
# (gpu_session4c.sh). Usage (repo root): bash experiments/gpu_sessions/gpu_session4a.sh
XLA_FLAGS=--xla_gpu_autotune_level=0 STUDIES=headline,hint_layers,replay_is,deployment \
  SEEDS=0,1,2 ABLATION_SEEDS=0 PAR=8 DEADLINE=400 WARM=per_mode \
  exec bash "$(dirname "$0")/../gpu_repro.sh"
