#!/usr/bin/env bash
# One H200 (session 23): the two PERFORMANCE.md targets not re-measured since sessions 9 / 17,
# at HEAD: the hint-guided QAT train step against the BF16 one (small.py, and the 30B shape at
# 2 layers x 8K tokens, as gpu_session9a.sh), and the hint capture's share of the 4-layer FP4
# decode step at 32K and 128K (fp4 vs fp4_nohints, as session 7's table).
# Prediction (written before the run): trace / bf16 1.2-1.3x on small.py, ~0.9x on the 30B
# shape (session 9: 1.23-1.30x / 0.90x); hint capture 1-4% of the step (session 7: 2.5% / 3.9%).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session23e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r23e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 200 python3 experiments/bench_train_step.py --config configs/small.py \
  --rows bf16,trace --steps 30 --out "$R/small" > "$R/small.txt" 2>&1
echo "small rc=$?"
timeout 200 python3 experiments/bench_train_step.py --config configs/qwen3_30b_a3b.py --layers 2 \
  --batch 8 --seq_len 1024 --rows bf16,trace --steps 10 --out "$R/30b" > "$R/30b.txt" 2>&1
echo "30b rc=$?"
rollout_4l hints 150 fp4,fp4_nohints 32768,131072 --steps 16
tar -C "$R" -czf "$OUT/r23e.tar.gz" .
for s in small 30b; do grep "^|" "$R/$s/train_step.md" | cut -c1-200; done
rollout_rows hints
grep -E "^\| fp4" "$R/hints/rollout_throughput.md" | cut -c1-120
grep -hiE "error|Traceback" "$R/small.txt" "$R/30b.txt" "$R/hints.txt" | head -5
exit 0
