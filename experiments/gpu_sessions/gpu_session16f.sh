#!/usr/bin/env bash
# Ran at commit 235c63a (session 16).
# Session 16, one H200: the FP4 decode step's K/V rows written by one Pallas launch for all six
# buffers of both caches (kv_append.append_rows_pallas, attention.KV_APPEND="auto"), not six XLA
# scatters (16d's by_source: scatters + slices ~16 us per layer at 32K).
# (1) the 4-layer 30B step, bf16 + fp4 at 32K / 128K, and fp4 with --kv_append xla side by side;
# (2) if (1) ran, 48 layers as 16e.
# Prediction (written before the run): the FP4 step -8..-12 us per layer (4 layers at 32K
# -0.03..-0.05 ms); no cache copies (a copied 2.2 GB cache would add ~1 ms per layer).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session16f.sh
source "$(dirname "$0")/../gpu_prelude.sh" r16f
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
C=32768,131072  # (as run: a local roll() and the 48-layer command, now gpu_prelude's helpers)
rollout_4l roll 120 bf16,fp4 $C --steps 16
rollout_4l roll_xla_append 120 fp4 $C --steps 16 --kv_append xla
rollout_4l roll_again 120 fp4 $C --steps 16
if grep -qE "^\| fp4 " "$R/roll/rollout_throughput.md" 2>/dev/null; then
  rollout_48l full 410  # (as run: timeout 400, --time_budget_s 380)
fi
tar -C "$R" -czf "$OUT/r16f.tar.gz" . && cp "$R"/*.txt "$OUT/" 2>/dev/null
for n in roll roll_xla_append roll_again full; do
  grep -E "^\| (fp4|bf16) " "$R/$n/rollout_throughput.md" 2>/dev/null | sed "s/^/$n /" \
    | cut -c1-130
done
grep -hE "Error|error" "$R"/*.txt | head -5
exit 0
