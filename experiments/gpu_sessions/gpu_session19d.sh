#!/usr/bin/env bash
# Ran at commit 7bbd245 (session 19).
# One H200: the FP4 attention's split combine kernel alone, knob sweep (experiments/
# sweep_attention_combine.py): D2 columns per program (td 16 = default, 8, 4), warps, splits per
# loop step, at the (B, P) partials of the default split rule. 19c: the combine is 10.6 of
# 67.9 us at 8 x 32K (P = 128) and ~19 us at 111 x 32K / 27 x 128K; its grid is B x 4 x 64 / td
# programs (128 at B = 8), each looping over P / 32 chunks of both halves.
# Prediction (written before the run): latency-bound at small B, so td 4 (4x the programs)
# ~2x faster at B = 8 (P = 128: ~5 us instead of ~10); at B >= 27 (>= 432 programs at td 16)
# td 8 within 10% of td 16, td 4 slower (more m / l reads per program); p_chunk 64 +-5%.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session19d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r19d
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
timeout 300 python3 experiments/sweep_attention_combine.py --out "$R/combine" \
  --knobs ";td=8;td=4;td=8,num_warps=2;td=4,num_warps=2;td=4,num_warps=1;p_chunk=64;td=8,p_chunk=64;p_chunk=16" \
  > "$R/combine.txt" 2>&1
echo "combine rc=$?"
tar -C "$R" -czf "$OUT/r19d.tar.gz" .
grep -iE "error|Traceback" "$R/combine.txt" | head -5
python3 -c "
import json, sys
for r in json.load(open(sys.argv[1]))['rows']:
    print(r['batch'], r['splits'], '  '.join(f'{k[:-3]}={v:.1f}' for k, v in r.items() if k.endswith('_us')))
" "$R/combine/kernels_attention_combine_knobs.json"
exit 0
