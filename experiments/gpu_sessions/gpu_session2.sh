#!/usr/bin/env bash
# Session-2 GPU call on a 2-GPU host, batched: (1) SFT calibration of configs/small.py on GPU 1
# while (2) the 1-GPU vs 2-GPU scaling of the RL loop runs; (3) the headline reproduction study on
# configs/small.py (5 variants x 3 seeds, SFT steps chosen from the calibration), in parallel
# processes over both GPUs, aggregated. Writes tables/JSON/PNG and a tarball of the runs' metrics
# under $OUT. Usage (repo root): bash experiments/gpu_sessions/gpu_session2.sh [RL_STEPS]
set -uo pipefail
OUT=${OUT:-/tmp/gpu_out}
RL=${1:-80}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi -L
CUDA_VISIBLE_DEVICES=1 timeout 100 python3 experiments/calibrate_sft.py --config=configs/small.py \
  --max_steps=250 --every=25 --eval_batches=2 --json "$OUT/calib_small.json" \
  > "$OUT/calib_small.txt" 2>&1 &
CAL=$!
timeout 240 python3 experiments/scaling.py --config=configs/small.py --steps 6 \
  --hardware "2x NVIDIA H200 (one host)" --out "$OUT/scaling" \
  --layout "1 GPU=0:(1,1,1,1)" --layout "2 GPUs DP+FSDP=0,1:(1,2,1,1)" \
  --layout "2 GPUs EP=0,1:(1,1,2,1)" \
  -- --config.rollout.batch_prompts=64 --config.rollout.group_size=8 --config.sft.steps=0
wait $CAL
grep "^|" "$OUT/calib_small.txt"
SFT=$(python3 - "$OUT/calib_small.json" <<'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except Exception:
    rows = []
ok = [r["step"] for r in rows if r["step"] and r["sampled"] >= 0.25]
print(ok[0] if ok else (rows[-1]["step"] if rows else 150))
PY
)
echo "SFT steps chosen: $SFT"
timeout 300 python3 experiments/repro_parallel.py --config=configs/small.py --studies headline \
  --seeds 0,1,2 --gpus 0,1 --parallel 10 --out /tmp/repro --results "$OUT/repro" --steps "$RL" \
  --skip_diagnose --note "H200, session 2: SFT steps $SFT from experiments/calibrate_sft.py (first \
with sampled accuracy >= 0.25), RL $RL steps." \
  -- --config.sft.steps="$SFT" --config.checkpoint.every=1000
tar czf "$OUT/repro_runs.tgz" $(find /tmp/repro -name metrics.jsonl -o -name config.json -o -name 'log_*.txt') 2>/dev/null
ls -la "$OUT"
exit 0
