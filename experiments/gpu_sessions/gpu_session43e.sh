#!/usr/bin/env bash
# Session 43 (issue 6): the dense kernel's new 33-64-row default (tk 256, 2 stages, 2 tiles;
# `default_dense_tk` / `default_steps`) as the library picks it (`--splits auto`, no knob
# given) at M = 1 / 8 / 32 / 33 / 48 / 64, then the old one (tk 128, 3 stages) at M = 48 / 64
# beside it. 8192 x 28672, device time.
# Prediction (before the run): on an H100 as 43c / 43d measured (M = 48 ~63 us against ~82,
# M = 64 ~75.5 against ~82; M <= 32 unchanged: 50.8 / 52.7 / 58.2 us, session 43a); on an H200
# M = 64 68-74 us against session 28's 73.7-74.1 for the old default (its memory hides more of
# the stream, so less to gain), M = 48 55-62 against 65.8.
# On an H200 it first runs the late_vt A/B (gpu_session39d.sh, ~2 min; issue 7's decision rule
# in NOTES.md).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session43e.sh
source "$(dirname "$0")/../gpu_prelude.sh" r43e
late_vt_ab_if_h200
install_wheels
timeout 150 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 1,8,32,33,48,64 \
  --splits auto --baselines "" --max-seconds 120 --out "$R/new" > "$R/new.txt" 2>&1
echo "new rc=$?"
timeout 100 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 48,64 --tk 128 \
  --steps 3 --splits auto --baselines "" --max-seconds 80 --out "$R/old" > "$R/old.txt" 2>&1
echo "old rc=$?"
tar -C "$R" -czf "$OUT/r43e.tar.gz" .
dense_summary new old
grep -hiE "Error|Traceback" "$R"/*.txt | sort | uniq -c | head -6
exit 0
