#!/usr/bin/env bash
# For the next GPU session (issues 6 and 7), written in session 45:
# 1. on an H200 only, issue 7's late_vt A/B (gpu_session39d.sh, ~2 min; its decision rule in
#    pallas_kernels/NOTES.md);
# 2. the 4-layer 30B FP4 decode step with the grouped kernel's rows x layout (the default since
#    session 45) against the aligned one (the default in sessions 20-44), at 32K and 128K;
# 3. the issue's grouped table at 32 / 128 / 512 tokens (both expert shapes) with the rows layout
#    as the library picks it.
# Prediction (before the run): (2) rows 0.3-1.5% faster at both contexts (the bookkeeping kernel,
# ~2.65 us, twice per layer, and the aligned kernel no faster: session 45's H100 table in
# NOTES_matmul); revert GROUPED_X_LAYOUT to "aligned" if rows is >1% slower at either context
# in the mean of two pairs with both pairs slower (one process per arm; sessions 20d / 20e's
# single pairs of this A/B differed by ~3%, so the arms alternate: rows, aligned, rows, aligned).
# Session 47 moved the grouped table (3) first, written straight into $OUT (the H200's grouped
# numbers are the issue's, never measured there with the rows layout).
# (3) on an H200 the rows call at 256 / 1024 rows 28-31 / 36-40 us, 70-78% of copy (session
# 29b's aligned calls: 34.0 / 43.1 us, 66.3 / 64.1%); 4096 rows ~50%. On an H100 as 45c / 45d.
# ~8 min on an H200 (~6 if the late_vt A/B ran already on the machine), ~6 on an H100.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session46a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r46a
late_vt_ab_if_h200
install_wheels
timeout 200 python3 experiments/check_mgpu_matmul.py --grouped --tokens 32,128,512 \
  --max-seconds 170 --out "$OUT/grouped" > "$OUT/grouped.txt" 2>&1
echo "grouped rc=$?"
grep -E "^device|^  k=" "$OUT/grouped.txt" | sed -E 's/triton_(relerr|us|pct_copy)=[^ ]* *//g' | cut -c1-400
step_layout_ab r46a.tar.gz
grep -hiE "Error|Traceback" "$R"/*.txt | sort | uniq -c | head -6
exit 0
