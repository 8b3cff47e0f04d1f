#!/usr/bin/env bash
# One H200 (session 23): where the 4-layer FP4 step's time goes at 32K with every current
# default (22b's by-source profile came before the bookkeeping kernel and the quantizer's
# values output), with the BF16 step's profile beside it.
# Prediction (written before the run): FP4 ~4.2 ms wall, ~3.9 ms busy, attention ~74% of busy,
# ~186 launches; BF16 ~2.6 ms wall.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session23d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r23d
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
rollout_4l prof 180 bf16,fp4 32768 --steps 8 --profile_steps 8
P=$(ls "$R"/prof/profile/fp4_32768.json 2>/dev/null | head -1)
timeout 150 python3 experiments/dump_step_hlo.py --context 32768 --batch 111 --kernel_layout \
  --out "$R/step_hlo.txt" --by_source "$P" > "$R/by_source.txt" 2>&1
echo "hlo rc=$?"
rm -f "$R/step_hlo.txt"
rm -f "$R"/prof/profile/*.json  # the raw traces (MBs); their tables stay
tar -C "$R" -czf "$OUT/r23d.tar.gz" .
rollout_rows prof
for f in "$R"/prof/profile/*.md; do sed -n 1,12p "$f" | cut -c1-160; done
head -40 "$R/by_source.txt" | cut -c1-170
exit 0
