#!/usr/bin/env bash
# Session 31, one H200, issue 7, after 31e (the quantizers bit-identical to the CPU on random
# 2-d inputs, yet the rollout with the kernel quantizer gives lower hinted code agreement, 98.8
# vs 99.55%, and the bf16-P advantage):
#   quant   check_gpu_quantizers.py, now also rollout_quantize kernel vs XLA at the model's
#           N-d site shapes on the GPU;
#   inroll  the fused quantizer against XLA's ops inside greedy tiny rollouts.
# Prediction (written before the run): quant identical; inroll differs (gap > 0), so the
# difference lives in the model's use of the kernel, not in the kernel on its own.
# Usage (repo root, with .whl/ and runs/tiny_f32 carried): bash experiments/gpu_sessions/gpu_session31f.sh
source "$(dirname "$0")/../gpu_prelude.sh" r31f
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
save() { tar -C "$R" -czf "$OUT/r31f.tar.gz" .; }
timeout 120 python3 experiments/check_gpu_quantizers.py --rows 8192 > "$R/quant.txt" 2>&1
echo "quant rc=$?"; save
timeout 150 python3 experiments/check_rollout_attention.py --config configs/tiny.py \
  --checkpoint runs/tiny_f32 --batches 1 --piece quantizer > "$R/inroll.txt" 2>&1
echo "inroll rc=$?"; save
grep "rollout_quantize\|bit-identical\|differ" "$R/quant.txt" | grep -v ": identical"
grep -v Warning "$R/inroll.txt" | tail -40
exit 0
