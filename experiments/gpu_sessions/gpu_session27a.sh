#!/usr/bin/env bash
# One H200 (session 27): the CPU-compile changes checked on the GPU. quant's reciprocal and E4M3
# decode keep their integer forms there (INTEGER_FORMS: auto), e2m1 no longer takes a NaN's sign,
# kv_layout's bit move is one vectorised reduction instead of 32 shift/or steps, and
# model.init_params is jitted. Prediction: every check 0 mismatches (check_gpu_numerics.py,
# check_kv_words.py), quantize-with-hint bit-identical, diagnose and a 10-step RL run of small.py
# finish with finite metrics and hinted code agreement >= 0.99.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session27a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r27a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 150 python3 experiments/check_gpu_numerics.py > "$R/numerics.txt" 2>&1
echo "numerics rc=$?"
timeout 100 python3 experiments/check_kv_words.py > "$R/kv_words.txt" 2>&1
echo "kv_words rc=$?"
OUT=$R/smoke timeout 420 bash experiments/gpu_smoke.sh 10 > "$R/smoke.txt" 2>&1
echo "smoke rc=$?"
tar -C "$R" -czf "$OUT/r27a.tar.gz" .
tail -n 12 "$R/numerics.txt"; cat "$R/kv_words.txt"
grep -E "bit|ident|mismatch" "$R/smoke/quantize_hint.txt" | head -8
cut -c1-600 "$R/smoke/diagnose_small.json"; echo; tail -n 4 "$R/smoke/rl_small.txt"
grep -hiE "error|Traceback" "$R"/*.txt | head -6
exit 0
