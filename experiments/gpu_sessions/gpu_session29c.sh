#!/usr/bin/env bash
# One H200, issue 6: the streamed grouped kernel (fp4_matmul_mgpu.GROUPED_STREAM: a fixed grid
# of CTAs, each walking all of its (chunk, weight-tile) items' K steps through one pipeline, so
# the next item's tiles load while the current one computes; prepared in session 29, CPU-lowered
# and emulated) against the direct kernel (a program and a pipeline per (expert, tile)).
# Prediction (written before the run): outputs identical (maxdiff 0: the same f32 sums per
# item); the down projection 768 x 2048 kernel alone 8-15% faster (888 rows: 37.8 -> 32-35 us,
# 216 rows: 30.3 -> 26-28), since its 3 K steps per program pay a pipeline fill each; the
# 2048 x 768 single weight and the fused gate / up pair (8 K steps) 0-6% faster; the 4-layer
# step at 32K 0.5-1.5% faster. A hang or a wrong row would show as a timeout or maxdiff > 0.
# Ran at commit 517c794. The streamed kernel and its options were removed after 29d (not
# faster; commit 5be97fb keeps them), so this script needs that commit.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session29c.sh
NAME=${NAME:-r29c}  # (gpu_session29d.sh reruns this as r29d)
source "$(dirname "$0")/../gpu_prelude.sh" "$NAME"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 170 python3 experiments/check_mgpu_matmul.py --grouped --stream --out "$R/grouped" \
  > "$R/grouped.txt" 2>&1
echo "grouped rc=$?"
timeout 120 python3 experiments/check_mgpu_swiglu.py --tokens 27,111 --knobs "stream=1" \
  --out "$R/swiglu" > "$R/swiglu.txt" 2>&1
echo "swiglu rc=$?"
rollout_4l step_direct 90 fp4 32768 --steps 16 --grouped_stream direct
rollout_4l step_stream 90 fp4 32768 --steps 16 --grouped_stream stream
tar -C "$R" -czf "$OUT/$NAME.tar.gz" .
for f in grouped swiglu; do
  grep -hE "^ *(k=|tokens=)" "$R/$f.txt" | tr ' ' '\n' \
    | grep -E "^(k|n|tokens|rows)=|kernel_us|^mgpu(_stream)?_us|^fused(_stream1)?_us|maxdiff|relerr" \
    | grep -v w4a4 | paste -sd' ' | fold -w 1000
  grep -hiE "error|Traceback|timed out" "$R/$f.txt" | head -4
done
rollout_rows step_direct step_stream
exit 0
