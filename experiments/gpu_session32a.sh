#!/usr/bin/env bash
# Prepared in session 31, not yet run (its device time was spent). One H200, issue 7: is XLA's
# excess precision (its GPU fusions skipping bf16 casts) what made the fused activation quantizer
# and XLA's ops, bit-identical on the same input, record 1-17% different codes inside one greedy
# rollout (31f), and TRACE's GPU mismatch depend on P's precision?
#   inroll      the quantizer kernel against XLA's ops inside greedy tiny rollouts, flag off;
#   exact       the P-precision study with XLA_FLAGS=--xla_allow_excess_precision=false, 8
#               batches (XLA's default: 31c's auto, f32 P 1.14e-3, bf16 P 3.5e-4, bf16 engine
#               5.3e-5 / 5.6e-6);
#   step_*      the 4-layer 30B NVFP4 decode step with the flag off and on (what exact casts
#               cost).
# Prediction (written before the run): inroll gap 0 and no site differences; exact: TRACE f32 P
# at the CPU's 3.6-5e-4, bf16 P no better; the bf16 engine's floor up (on the CPU the flag raised
# it 12x); step within 2%. If so, next: lax.reduce_precision at the quantizer sites' inputs only.
# Usage (repo root, with .whl/ and runs/tiny_f32 carried): bash experiments/gpu_session32a.sh
source "$(dirname "$0")/gpu_prelude.sh" r32a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
save() { tar -C "$R" -czf "$OUT/r32a.tar.gz" .; }
EXACT=--xla_allow_excess_precision=false
XLA_FLAGS=$EXACT timeout 120 python3 experiments/check_rollout_attention.py \
  --config configs/tiny.py --checkpoint runs/tiny_f32 --batches 1 --piece quantizer \
  > "$R/inroll.txt" 2>&1
echo "inroll rc=$?"; save
source "$(dirname "$0")/gpu_pm.sh"
XLA_FLAGS=$EXACT pm exact 170 8; save
XLA_FLAGS=$EXACT rollout_4l step_exact 100 fp4 32768 --steps 12; save
rollout_4l step_default 100 fp4 32768 --steps 12; save
grep -v Warning "$R/inroll.txt" | tail -8
pm_summary exact
show_table step_exact step_default
exit 0
