#!/usr/bin/env bash
# Prepared in session 30, not yet run (its device time was spent). One H200, issue 7: why bf16 P
# left TRACE's rollout ~10x *closer* to the trainer on the GPU (30d) when the CPU showed it
# further (+36%; NOTES_attention session 30). Each step takes one GPU-only piece out:
#   check   the kernel over per-sequence lengths 1..64 at the tiny shape (30's table: full
#           lengths only);
#   inrollout  the kernel against the XLA reference inside greedy tiny rollouts, per P (on the
#           CPU, kernel in interpret mode: f32 P gap 0, bf16 P max 0.14 / mean 0.011);
#   auto    30d again with 8 batches (diagnose now compiles its trainer pass once);
#   ref     the rollout's decode attention as the XLA reference (the CPU's computation);
#   (gpu_session31b.sh: the same study with XLA quantizers, and with every product at HIGHEST)
# Prediction (written before the run): check: f32 P <= 3e-6 at every length (so the kernel is
# right); inrollout: f32 P gap <= 1e-3 (if larger, the f32 path misbehaves in the rollout's
# situation: the answer); ref: f32 P closer than bf16 P, as on the CPU (then the kernel's
# bf16-P path is what matches the trainer, through something the isolated check does not
# show).
# Usage (repo root, with .whl/ and runs/tiny_f32 carried): bash experiments/gpu_sessions/gpu_session31a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r31a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
save() { tar -C "$R" -czf "$OUT/r31a.tar.gz" .; }  # after every step: a killed call keeps its files
timeout 60 python3 experiments/check_gpu_attention_precision.py --tiny > "$R/check.txt" 2>&1
echo "check rc=$?"; save
timeout 150 python3 experiments/check_rollout_attention.py --config configs/tiny.py \
  --checkpoint runs/tiny_f32 --batches 2 > "$R/inrollout.txt" 2>&1
echo "inrollout rc=$?"; save
source "$(dirname "$0")/../gpu_pm.sh"
pm auto 150 8; save
pm ref 100 3 --attention reference; save
grep -v Warning "$R/check.txt" | tail -10
grep -v Warning "$R/inrollout.txt" | tail -5
pm_summary auto ref
exit 0
