#!/usr/bin/env bash
# Ran at commit b4a919e (session 22, one H200).
# One H200: where the 4-layer 30B FP4 decode step at 32K (111 sequences) spends its time now,
# after session 21's fused gate / up / SwiGLU kernel and 2-tile down projection: a profile of 8
# steps (--profile_steps) and every profiled kernel attributed to its source lines
# (dump_step_hlo.py --by_source), to choose the next per-layer cut. Session 16's by_source
# (before sessions 17-21) is the last such table.
# Prediction (written before the run): busy ~4.2 ms per step, attention kernel + combine
# ~3.0-3.1 ms of it (~72%), the expert kernels ~0.5 ms, ~45-55 launches per layer, and
# ~80-110 us per layer in kernels other than attention and the expert matmuls.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session22b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r22b
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
rollout_4l prof 120 fp4 32768 --steps 8 --profile_steps 8
P=$(ls "$R"/prof/profile/fp4_32768.json 2>/dev/null | head -1)
timeout 150 python3 experiments/dump_step_hlo.py --context 32768 --batch 111 --kernel_layout \
  --out "$R/step_hlo.txt" --by_source "$P" > "$R/by_source.txt" 2>&1
echo "hlo rc=$?"
gzip -f "$R/step_hlo.txt"
tar -C "$R" -czf "$OUT/r22b.tar.gz" .
rollout_rows prof
f=$(ls "$R"/prof/profile/*.md 2>/dev/null | head -1); [ -n "$f" ] && sed -n 1,14p "$f" | cut -c1-160
head -45 "$R/by_source.txt" | cut -c1-170
exit 0
