#!/usr/bin/env bash
# Prepared in session 8 for the next session (one H200; not yet run): the train-step rows that
# session 8 could not finish. (1) small.py with the code-agreement metrics (trace+codes: its
# compile did not fit session 8's 170-230 s limits; session 7: 1.45x); (2) the 30B shape (2 layers
# x 8K tokens) after the MoE gather backwards (session 7: bf16 97.8 ms, trace 0.90x; predicted
# ~4 ms faster for every row: the four scatter-adds per layer were 4.1 ms of the trace step).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session9a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r9a
timeout 300 python3 experiments/bench_train_step.py --config configs/small.py \
  --rows bf16,trace,trace+codes --steps 30 --out "$R/small" > "$R/small.txt" 2>&1
timeout 260 python3 experiments/bench_train_step.py --config configs/qwen3_30b_a3b.py --layers 2 \
  --batch 8 --seq_len 1024 --steps 10 --out "$R/30b" > "$R/30b.txt" 2>&1
tar czf "$OUT/session9a.tgz" -C /tmp r9a
for s in small 30b; do tail -7 "$R/$s/train_step.md"; done
exit 0
