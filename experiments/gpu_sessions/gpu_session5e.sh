#!/usr/bin/env bash
# Session-5 GPU call E on one H200 (results under $OUT as one tarball), in turn:
#   1. the code-distance histogram (issue 9, claim 2) again, now that metrics.code_stats counts in
#      int32 (session 4's distance-0 bin stalled at 2^25): the headline TRACE run of seed 0 on
#      small.py (BF16 SFT warm start 450 steps, RL 100 steps at lr 5e-5), then
#      `repro.py --post_eval=diagnose` on its final policy.
#   2. decode attention rows (issue 7) with the v4 knobs from session 5's sweep as the default,
#      v3 and v2 beside it, 32K and 128K first.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session5e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r5e
export JAX_COMPILATION_CACHE_DIR=/tmp/jax_cache
timeout 330 python3 experiments/repro.py --config=configs/small.py --out=/tmp/repro \
  --study=headline --variants=trace --seeds=0 --steps=100 --warm_start --post_eval=diagnose \
  --skip_diagnose --results="$R/job" --config.sft.steps=450 --config.train.lr=5e-5 \
  --config.checkpoint.every=1000 > "$R/diagnose_run.txt" 2>&1
cp /tmp/repro/headline/trace/seed0/diagnose.json "$R/diagnose_trace_seed0.json"
cp /tmp/repro/headline/trace/seed0/metrics.jsonl "$R/metrics_trace_seed0.jsonl"
timeout 170 python3 -m pallas_kernels.bench_attention --out "$R/attn" \
  --skip v3check,sweep,long,qh,variants,append --max-seconds 150 > "$R/attn.txt" 2>&1
tar czf "$OUT/session5e.tgz" -C /tmp r5e
grep -v "^[WI][0-9]" "$R/diagnose_run.txt" | tail -5
python3 -c "import json; d = json.load(open('$R/diagnose_trace_seed0.json')); \
[print(k, v.get('code_distance_hist'), v.get('mismatch_one_step_frac')) for k, v in d.items() \
 if isinstance(v, dict)]"
grep "^|" "$R/attn/kernels_attention.md" | head -12
exit 0
