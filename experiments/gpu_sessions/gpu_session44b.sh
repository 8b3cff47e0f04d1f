#!/usr/bin/env bash
# Session 44: (1) bench_rollout.py's copy baseline timed 1 / 8 / 32 passes per jitted call (the
# review's fix: 32 by default now) against the device-time copy (devtime), a 2 GiB f32 array;
# (2) the dense kernel's library picks at M = 1 / 8 again (8192 x 28672), to tell the machine
# from the config where 43e read them 4-5% slower than session 43a's H100.
# Prediction: 1 pass per call ~0.9x the device-time copy, 32 passes within ~2% of it.
# Issued as this command line (a warm H100 after 43e) and committed as a script afterwards.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session44b.sh
source "$(dirname "$0")/../gpu_prelude.sh" r44b >/dev/null 2>&1
install_wheels >/dev/null 2>&1
cat > /tmp/cp.py <<'PY'
import sys; sys.path.insert(0, "experiments")
import jax, bench_rollout as BR
from pallas_kernels import devtime
nb = 2 << 30
for p in (1, 8, 32):
    print(f"copy 2 GiB, {p} passes per call: {BR.copy_bandwidth(nb, 10, p)/1e12:.3f} TB/s", flush=True)
print(f"device-time copy: {devtime.copy_bandwidth_device(nb // 4)/1e12:.3f} TB/s", flush=True)
PY
timeout 100 python3 /tmp/cp.py 2>&1 | grep -v Warn | tee "$OUT/copy.txt"
timeout 80 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 1,8 --splits auto \
  --baselines "" --max-seconds 60 --out "$OUT/rep" > "$OUT/rep.txt" 2>&1
python3 experiments/check_mgpu_matmul.py --summary "$OUT"/rep/*.json 2>&1 | tail -3
exit 0
