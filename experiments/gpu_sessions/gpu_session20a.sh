#!/usr/bin/env bash
# Ran at commit 438c3c5 (session 20).
# One H200, issue 6. (1) Is the dense Mosaic FP4 kernel bound per SM or per CTA? Its grid at
# 8192 x 28672 is 448 CTAs = 3.39 per SM (4 fit: 0.85 waves), and session 14 found its time
# insensitive to pipeline depth and tile width but 9% faster with 10% fewer ALU instructions
# (the raw-scale diagnostic): a per-SM issue limit, where the 52 SMs holding 4 CTAs set the time.
# Probe: N giving exactly 1 / 2 / 3 / 4 CTAs per SM (8448 / 16896 / 25344 / 33792), and K split
# over 2 or 4 CTAs per 64 rows at 28672 (new `splits`: 896 / 1792 CTAs, dynamically balanced).
# (2) The 4-layer 30B FP4 step at 32K with the grouped expert kernel's x padded vs unpadded
# (19g's default, not yet timed in the step). (3) SASS / ptxas dumps of the dense and grouped kernels (MOSAIC_GPU_DUMP_*), for offline counts.
# Prediction (written before the run): per-SM bound: % of copy at M = 8 ~ 1/SM 35-45%, 2/SM
# 60-65%, 3/SM and 4/SM 71-75%, 28672 67% (as in 14h); splits 2 at 28672 1.06-1.12x the
# unsplit kernel (71-75% of copy incl. the partial sum), splits 4 no better than 2. If instead
# per-CTA latency bound: 3/SM ~64%, 4/SM ~72%, splits ~1.0x. Step: nopad 0.3-0.6% faster
# (12 calls x 2-3 us of 4.36 ms).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session20a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r20a
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 120 python3 experiments/check_mgpu_matmul.py --shapes 8192x28672 --ms 1,8 \
  --splits 1,2,4 --out "$R/dense_split" > "$R/dense_split.txt" 2>&1; echo "dense_split rc=$?"
timeout 110 python3 experiments/check_mgpu_matmul.py --shapes \
  8192x8448,8192x16896,8192x25344,8192x33792 --ms 8 --splits 1,2 --baselines "" \
  --out "$R/dense_grid" > "$R/dense_grid.txt" 2>&1; echo "dense_grid rc=$?"
# (--grouped_x_layout rows: added after the run, when the aligned layout became the default)
for pad in nopad pad; do
  rollout_4l "step_$pad" 110 fp4 32768 --steps 16 --grouped_x_layout rows --grouped_x_pad $pad
done
for kind in dense grouped; do
  mkdir -p "$R/sass_$kind"
  MOSAIC_GPU_DUMP_SASS=1 MOSAIC_GPU_DUMP_PTXAS=1 MOSAIC_GPU_DUMP_PTX=1 \
    MOSAIC_GPU_DUMP_TO="$R/sass_$kind" timeout 45 python3 -m \
    experiments.run_mgpu$([ $kind = grouped ] && echo _grouped)_once > "$R/sass_$kind.txt" 2>&1
  echo "sass_$kind rc=$? files=$(ls "$R/sass_$kind" | wc -l)"
done
tar -C "$R" -czf "$OUT/r20a.tar.gz" .
for n in dense_split dense_grid; do
  grep -iE "error|Traceback" "$R/$n.txt" | head -3; grep "^|" "$R/$n"/*.md | cut -c1-300
done
rollout_rows step_nopad step_pad
exit 0
