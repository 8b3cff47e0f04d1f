#!/usr/bin/env bash
# Prepared in session 7 for the next session, on nvidia-h200-x2 (not yet run): the RL loop on one
# and two GPUs with the expert stages token-parallel under a data/FSDP mesh (moe._token_parallel:
# without it GSPMD would replicate the Pallas expert kernels on both GPUs). Prediction: the
# 2-GPU train step below the 1-GPU one (session 5's 1.5-1.6x scaling was measured with ragged_dot).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session8b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r8b
timeout 500 python3 experiments/scaling.py --config configs/small.py --steps 12 \
  --layout "1 GPU=0:(1,1,1,1)" --layout "2 GPUs DP+FSDP=0,1:(1,2,1,1)" \
  --layout "2 GPUs EP=0,1:(1,1,2,1)" --hardware "H200" \
  --out "$R/scaling" > "$R/scaling.txt" 2>&1
tar czf "$OUT/session8b.tgz" -C /tmp r8b
tail -15 "$R/scaling.txt" | cut -c1-200
exit 0
