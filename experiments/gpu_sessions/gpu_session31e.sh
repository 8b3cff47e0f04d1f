#!/usr/bin/env bash
# Session 31, one H200, issue 7, after 31d (at HIGHEST the XLA activation quantizer took away
# TRACE's GPU-only bf16-P advantage and brought its kl_k3 to the CPU's level):
#   quant   experiments/check_gpu_quantizers.py: the fused kernel, XLA's quantize and the
#           guided quantize on the GPU against the CPU, bit for bit, at the model's widths;
#   xla     the study with the XLA quantizer at the default precision, 8 batches (31c's auto
#           is the same with the kernel).
# Prediction (written before the run): quant finds the kernel or XLA-on-GPU differing from the
# CPU somewhere; xla: f32 P below 31c's 1.14e-3 and no bf16-P advantage.
# Usage (repo root, with .whl/ and runs/tiny_f32 carried): bash experiments/gpu_sessions/gpu_session31e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r31e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
save() { tar -C "$R" -czf "$OUT/r31e.tar.gz" .; }
timeout 120 python3 experiments/check_gpu_quantizers.py > "$R/quant.txt" 2>&1
echo "quant rc=$?"; save
source "$(dirname "$0")/../gpu_pm.sh"
pm xla 170 8 --activation_quantizer xla; save
grep -v Warning "$R/quant.txt" | tail -30
pm_summary xla
exit 0
