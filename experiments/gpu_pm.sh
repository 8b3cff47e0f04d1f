# Sourced by GPU scripts after gpu_prelude.sh: the p_precision_mismatch study on the default tiny
# run's checkpoint (runs/tiny_f32, carried).
# pm NAME TIMEOUT BATCHES [ARGS...]: experiments/p_precision_mismatch.py into $R/NAME/.
pm() {
  local name=$1 limit=$2 n=$3; shift 3
  timeout "$limit" python3 experiments/p_precision_mismatch.py --config configs/tiny.py \
    --checkpoint runs/tiny_f32 --batches "$n" --out "$R/$name" "$@" > "$R/$name.txt" 2>&1
  echo "$name rc=$?"
}

# pm_summary NAME...: TRACE's kl_k3 and hinted code agreement and the BF16 floor of each study
# (its per-batch log lines when it did not finish), then its errors.
pm_summary() {
  local n
  for n in "$@"; do
    echo "== $n"
    grep "^| trace | kl_k3\|^| trace | code_agreement_hinted\|^| bf16 | kl_k3" \
      "$R/$n/p_precision_mismatch.md" 2>/dev/null || grep "^batch" "$R/$n.txt"
    grep -iE "error|Traceback" "$R/$n.txt" | head -3
  done
}
