#!/usr/bin/env bash
# Session-3 GPU call A on a 2-GPU host, batched (results under $OUT):
#   GPU 0: the rollout throughput benchmark (issue 8) with the v2 kernels and --kernel_layout
#          (FP4 experts through the Pallas FP4 grouped matmul, BF16 experts through the Pallas
#          BF16 grouped matmul; bf16_xla stays plain XLA).
#   GPU 1: check_gpu_numerics.py (which op of the NVFP4 scale rule is inexact on the GPU), then an
#          RL calibration of configs/small.py: two BF16 SFT warm starts (800 steps at lr 1e-3 and
#          2e-3), three GRPO learning rates from each (60 steps), reward curves summarised.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session3a.sh
# --loop 1 --stacked: how this ran (session 6 later made 8-step loops and per-layer params the defaults)
set -uo pipefail
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi -L
CUDA_VISIBLE_DEVICES=0 timeout 420 python3 experiments/bench_rollout.py --loop 1 --stacked \
  --config configs/qwen3_30b_a3b.py --layers 4 --contexts 8192,32768,131072 --prefill_len 8192 \
  --time_budget_s 330 --kernel_layout --out "$OUT/bench" > "$OUT/bench.txt" 2>&1 &
BENCH=$!
export CUDA_VISIBLE_DEVICES=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.12
timeout 90 python3 experiments/check_gpu_numerics.py --json "$OUT/gpu_numerics.json" \
  > "$OUT/gpu_numerics.txt" 2>&1
main() { timeout 380 python3 -m trace_jax.main --config=configs/small.py --config.variant=bf16 \
  --config.checkpoint.every=100000 "$@"; }
cal() {  # name sft_lr
  main --config.train.steps=0 --config.sft.steps=800 --config.sft.lr="$2" \
    --config.workdir="/tmp/cal/sft_$1" > "$OUT/cal_sft_$1.txt" 2>&1
  for lr in 3e-5 1e-4 3e-4; do
    main --config.init_from="/tmp/cal/sft_$1" --config.sft.steps=0 --config.train.steps=60 \
      --config.train.lr="$lr" --config.workdir="/tmp/cal/rl_$1_$lr" > "$OUT/cal_rl_$1_$lr.txt" 2>&1 &
  done
  wait
}
cal a 1e-3 &
CA=$!
cal b 2e-3 &
CB=$!
wait $CA $CB
python3 - "$OUT" <<'PY'
import glob, json, os, sys
rows = []
for d in sorted(glob.glob("/tmp/cal/rl_*")):
    m = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))] if os.path.exists(
        os.path.join(d, "metrics.jsonl")) else []
    seg = lambda a, b: sum(r["reward_mean"] for r in m[a:b]) / max(1, len(m[a:b]))
    rows.append(dict(run=os.path.basename(d), steps=len(m), r0=seg(0, 10), r1=seg(25, 35),
                     r2=seg(50, 60), H0=m[0]["entropy"] if m else None,
                     H1=m[-1]["entropy"] if m else None))
json.dump(rows, open(os.path.join(sys.argv[1], "cal_rl.json"), "w"), indent=1)
print("| run | steps | reward 0-9 | 25-34 | 50-59 | entropy first/last |\n|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['run']} | {r['steps']} | {r['r0']:.3f} | {r['r1']:.3f} | {r['r2']:.3f} | "
          f"{r['H0']} / {r['H1']} |")
PY
wait $BENCH
grep -A40 "^| engine | experts via" "$OUT/bench/rollout_throughput.md" | head -60
grep "^|" "$OUT/gpu_numerics.txt"
exit 0
