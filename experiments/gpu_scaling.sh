#!/usr/bin/env bash
# One 2-GPU call: SFT calibration of configs/small.py (GPU 1, in the background, first ~100 s)
# and the 1-GPU vs 2-GPU scaling of the RL loop (experiments/scaling.py). Writes under $OUT.
# Usage on the 2-GPU host (repo root): bash experiments/gpu_scaling.sh
set -uo pipefail
OUT=${OUT:-experiments/results/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$OUT/gpus.txt"
CUDA_VISIBLE_DEVICES=1 timeout 110 python3 experiments/calibrate_sft.py --config=configs/small.py \
  --max_steps=${CALIB_STEPS:-300} --every=25 --eval_batches=4 --json "$OUT/calib_small.json" \
  > "$OUT/calib_small.txt" 2>&1 &
CAL=$!
python3 experiments/scaling.py --config=configs/small.py --steps 12 --hardware "NVIDIA H200" \
  --out "$OUT/scaling" \
  --layout "1 GPU=0:(1,1,1,1)" --layout "2 GPUs DP+FSDP=0,1:(1,2,1,1)" \
  --layout "2 GPUs EP=0,1:(1,1,2,1)" \
  -- --config.rollout.batch_prompts=64 --config.rollout.group_size=8 --config.sft.steps=0 \
  2>&1 | tail -20
wait $CAL
grep "^|" "$OUT/calib_small.txt"
exit 0
