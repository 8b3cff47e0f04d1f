#!/usr/bin/env bash
# Prepared in session 30, not yet run (its device time was spent). One H200, issue 7: why bf16 P
# left TRACE's rollout ~10x *closer* to the trainer on the GPU (30d) when the CPU showed it
# further (+36%; NOTES_attention session 30). Each step takes one GPU-only piece out:
#   check   the kernel over per-sequence lengths 1..64 at the tiny shape (30's table: full
#           lengths only);
#   inrollout  the kernel against the XLA reference inside greedy tiny rollouts, per P (on the
#           CPU, kernel in interpret mode: f32 P gap 0, bf16 P max 0.14 / mean 0.011);
#   auto    30d again with 8 batches (diagnose now compiles its trainer pass once: ~2 min);
#   ref     the rollout's decode attention as the XLA reference (the CPU's computation);
#   xla     the rollout's activation quantizer as XLA ops instead of the fused kernel;
#   highest every XLA product at Precision.HIGHEST (the trainer's P.V ran in TF32).
# Prediction (written before the run): check: f32 P <= 3e-6 at every length (so the kernel is
# right); inrollout: f32 P gap <= 1e-3 (if larger, the f32 path misbehaves in the rollout's
# situation: the answer); ref: f32 P closer than bf16 P, as on the CPU (then the kernel's
# bf16-P path is what matches the trainer, through something the isolated check does not
# show); xla, highest: the sign of auto unchanged.
# Usage (repo root, with .whl/ and runs/tiny_f32 carried): bash experiments/gpu_session31a.sh
source "$(dirname "$0")/gpu_prelude.sh" r31a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 90 python3 experiments/check_gpu_attention_precision.py --tiny > "$R/check.txt" 2>&1
echo "check rc=$?"
timeout 150 python3 experiments/check_rollout_attention.py --config configs/tiny.py \
  --checkpoint runs/tiny_f32 --batches 2 > "$R/inrollout.txt" 2>&1
echo "inrollout rc=$?"
pm() {  # pm NAME TIMEOUT BATCHES [ARGS...]
  local name=$1 limit=$2 n=$3; shift 3
  timeout "$limit" python3 experiments/p_precision_mismatch.py --config configs/tiny.py \
    --checkpoint runs/tiny_f32 --batches "$n" --out "$R/$name" "$@" > "$R/$name.txt" 2>&1
  echo "$name rc=$?"
}
pm auto 200 8
pm ref 150 4 --attention reference
pm xla 150 4 --activation_quantizer xla
JAX_DEFAULT_MATMUL_PRECISION=highest pm highest 150 4
tar -C "$R" -czf "$OUT/r31a.tar.gz" .
grep -v Warning "$R/check.txt" | tail -10
grep -v Warning "$R/inrollout.txt" | tail -5
for n in auto ref xla highest; do
  echo "== $n"; grep "^| trace | kl_k3\|^| trace | code_agreement_hinted\|^| bf16 | kl_k3" "$R/$n/p_precision_mismatch.md" 2>/dev/null || grep "^batch" "$R/$n.txt"
  grep -iE "error|Traceback" "$R/$n.txt" | head -3
done
exit 0
