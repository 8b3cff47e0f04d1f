#!/usr/bin/env bash
# Session 9, on nvidia-h200-x2: a shorter gpu_session8b.sh (what was left of the session's device
# time): the RL loop of small.py on one GPU and on two (data + FSDP mesh), the Pallas expert
# stages token-parallel (moe._token_parallel). Question: does the 2-GPU mesh run the Pallas
# kernels, and is its step faster than one GPU's? Prediction: it runs; 2-GPU step 1.3-1.6x faster.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session9d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r9d
timeout 380 python3 experiments/scaling.py --config configs/small.py --steps 8 \
  --layout "1 GPU=0:(1,1,1,1)" --layout "2 GPUs DP+FSDP=0,1:(1,2,1,1)" --hardware "H200" \
  --out "$R/scaling" > "$R/scaling.txt" 2>&1
echo "scaling rc=$?"
tar czf "$OUT/session9d.tgz" -C /tmp r9d
tail -15 "$R/scaling.txt" | cut -c1-200
exit 0
