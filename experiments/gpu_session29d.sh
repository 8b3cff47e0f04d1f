#!/usr/bin/env bash
# One H200, issue 6: the streamed grouped kernel again after 29c, which was exact (maxdiff 0)
# but slower: kernel alone +3-9% (down projection at 888 rows 41.4 vs 38.2 us), the call +7-12
# us (chunk_table's XLA ops), the 4-layer step at 32K 4.42 vs 4.25 ms. 29c's index maps read
# the chunk table from global memory at every K step (~0.3 us per step, a dependent load before
# each TMA: about the measured loss); now each CTA copies its items' rows and scales to shared
# memory first. Prediction (written before the run): outputs identical; kernel alone within
# -8%..+3% of the direct kernel (if the per-step loads were the whole loss, what is left is the
# saved pipeline fills); the call still 5-10 us slower (chunk_table); the step within 2%.
# Ran at commit 5be97fb. The streamed kernel and its options were removed after 29d (not
# faster; commit 5be97fb keeps them), so this script needs that commit.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_session29d.sh
source "$(dirname "$0")/gpu_prelude.sh" r29d
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
tar -C "$R" -czf "$OUT/r29d.tar.gz" .
for f in grouped swiglu; do
  grep -hE "^ *(k=|tokens=)" "$R/$f.txt" | tr ' ' '\n' \
    | grep -E "^(k|n|tokens|rows)=|kernel_us|^mgpu(_stream)?_us|^fused(_stream1)?_us|maxdiff|relerr" \
    | grep -v w4a4 | paste -sd' ' | fold -w 1000
  grep -hiE "error|Traceback|timed out" "$R/$f.txt" | head -4
done
rollout_rows step_direct step_stream
exit 0
