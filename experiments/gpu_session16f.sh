#!/usr/bin/env bash
# Ran at commit 235c63a (session 16).
# Session 16, one H200: the FP4 decode step's K/V rows written by one Pallas launch for all six
# buffers of both caches (kv_append.append_rows_pallas, attention.KV_APPEND="auto"), not six XLA
# scatters (16d's by_source: scatters + slices ~16 us per layer at 32K).
# (1) the 4-layer 30B step, bf16 + fp4 at 32K / 128K, and fp4 with --kv_append xla side by side;
# (2) if (1) ran, 48 layers as 16e.
# Prediction (written before the run): the FP4 step -8..-12 us per layer (4 layers at 32K
# -0.03..-0.05 ms); no cache copies (a copied 2.2 GB cache would add ~1 ms per layer).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_session16f.sh
source "$(dirname "$0")/gpu_prelude.sh" r16f
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
roll() {  # NAME ENGINES ARGS...
  local name=$1 engines=$2; shift 2
  timeout 120 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4 \
    --prefill_len 0 --kernel_layout --loop 8 --contexts 32768,131072 --engines "$engines" \
    --breakdown never --steps 16 --out "$R/$name" "$@" > "$R/$name.txt" 2>&1
  echo "$name rc=$?"
}
roll roll bf16,fp4
roll roll_xla_append fp4 --kv_append xla
roll roll_again fp4
if grep -qE "^\| fp4 " "$R/roll/rollout_throughput.md" 2>/dev/null; then
  timeout 400 python3 experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py \
    --kernel_layout --prefill_len 0 --loop 8 --steps 16 --breakdown never --copy_gb 1 \
    --contexts 32768,131072 --engines bf16,fp4 --time_budget_s 380 --out "$R/full" \
    > "$R/full.txt" 2>&1
  echo "full rc=$?"
fi
tar -C "$R" -czf "$OUT/r16f.tar.gz" . && cp "$R"/*.txt "$OUT/" 2>/dev/null
for n in roll roll_xla_append roll_again full; do
  grep -E "^\| (fp4|bf16) " "$R/$n/rollout_throughput.md" 2>/dev/null | sed "s/^/$n /" \
    | cut -c1-130
done
grep -hE "Error|error" "$R"/*.txt | head -5
exit 0
