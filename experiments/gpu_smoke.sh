#!/usr/bin/env bash
# One GPU session's checks, batched: kernel bit-identity of quantize-with-hint, the diagnosis table
# and a short RL run of configs/small.py. Writes logs/JSON under ${OUT:-experiments/results/gpu}.
# Usage on the H200 host (repo root): bash experiments/gpu_smoke.sh [RL_STEPS]
# The RL run logs to TensorBoard: install tensorboardX (requirements.txt) first; the lent host
# lacks it (carry its wheel as experiments/gpu_sessions/gpu_session27b.sh does).
set -uo pipefail
OUT=${OUT:-experiments/results/gpu}
STEPS=${1:-20}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" | tee "$OUT/env.txt"
echo "== quantize_with_hint bit-identity on GPU"
timeout 120 python3 -m pallas_kernels.bench_attention --skip long,append --out "$OUT" \
  2>&1 | tail -20 | tee "$OUT/quantize_hint.txt"
echo "== diagnose configs/small.py (random init)"
timeout 200 python3 -m trace_jax.diagnose --config=configs/small.py --json 2>/dev/null \
  | tail -1 | tee "$OUT/diagnose_small.json"
echo "== RL: configs/small.py, $STEPS steps"
timeout 240 python3 -m trace_jax.main --config=configs/small.py --config.workdir=/tmp/small \
  --config.sft.steps=20 --config.train.steps="$STEPS" 2>&1 | tr '\r' '\n' | grep -E "^step|Error|error" \
  | tee "$OUT/rl_small.txt"
cp /tmp/small/metrics.jsonl "$OUT/rl_small_metrics.jsonl" 2>/dev/null
exit 0
