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
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session29d.sh
NAME=r29d exec bash "$(dirname "$0")/gpu_session29c.sh"  # the same runs, after 5be97fb
