#!/usr/bin/env bash
# Ran at commit cb4b1f6 (session 20).
# One H200, issue 6: the grouped Mosaic expert kernel on the aligned x layout (x_layout=
# "aligned": the wrapper copies each expert's rows to an 8-aligned offset, so a chunk reads mp
# rows instead of mp + 8 from the sorted rows). 20a/b found the dense kernel's rate falls with
# the x tile (M = 8: 75%, M = 32: 58%); the grouped kernel reads 24-row tiles at mp 16 (~64-67%).
# (1) check_mgpu_matmul --grouped --aligned at the four 30B decode shapes (mp 16 and 8, kernel
# alone and call, max diff vs the rows layout); (2) the 4-layer 30B FP4 step at 32K, rows vs
# aligned side by side.
# Prediction (written before the run): the same outputs (max diff 0); the kernel alone 5-12%
# faster with mp 16 (16-row tiles), mp 8 faster still at 216 rows and slower at 888 rows
# (second chunks re-read weights); the call gains less: the wrapper's gather writes M + 7E rows
# (4.5-7.3 MB, ~2-3 us). In the step, the gather should fuse with the dispatch gather: 0-1%.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session20d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r20d
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 120 python3 experiments/check_mgpu_matmul.py --grouped --aligned --out "$R/aligned" \
  > "$R/aligned.txt" 2>&1; echo "aligned rc=$?"
for lay in aligned rows; do
  rollout_4l "step_$lay" 110 fp4 32768 --steps 16 --grouped_x_layout $lay
done
tar -C "$R" -czf "$OUT/r20d.tar.gz" .
grep -iE "error|Traceback" "$R/aligned.txt" | head -3; grep "^|" "$R/aligned"/*.md | cut -c1-700
rollout_rows step_aligned step_rows
exit 0
