#!/usr/bin/env bash
# Session-7 GPU call B on one H200: the trainer's grouped expert matmul on the Pallas kernels
# (forward + the new backward: transposed-weight read and weight-gradient kernel) against
# ragged_dot, whose XLA gradient expanded to dense [E, M, K] products (call A: a 64 GiB
# intermediate at the 30B shape); then the small.py train step again with the kernels in place.
# (The small.py run hit its 200 s timeout in the fourth variant; its log is
# experiments/results/gpu/train_step_s7/b_small_grouped_only_log.txt.)
# Usage (repo root): bash experiments/gpu_sessions/gpu_session7b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r7b
timeout 330 python3 -m pallas_kernels.bench_grouped_train --sweep --out "$R/gt" > "$R/gt.txt" 2>&1
timeout 200 python3 experiments/bench_train_step.py --config configs/small.py --profile_steps 3 \
  --out "$R/small" > "$R/small.txt" 2>&1
tar czf "$OUT/session7b.tgz" -C /tmp r7b
tail -14 "$R/gt.txt" | cut -c1-250
grep -v '^{' "$R/gt.txt" | grep -i "error\|Traceback" | head -5 | cut -c1-300
python3 - "$R/gt/grouped_train.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    for s in r.get("sweep", []):
        c = s["cfg"]; t = {k: round(v, 3) for k, v in s.items() if k.endswith("_ms")}
        print(r["shape"], c["bm"], c["bn"], c["bk"], c["num_warps"], c["num_stages"], t)
PY
tail -12 "$R/small.txt" | cut -c1-150
head -8 "$R/small/train_step_profile_trace.md" | cut -c1-150
exit 0
