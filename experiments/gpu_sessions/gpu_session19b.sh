#!/usr/bin/env bash
# Ran at commit 4fe440b (session 19).
# One H200: 19a's Triton split sweep again, with the split combine reading its partials 32
# splits at a time (attention_triton.COMBINE_P_CHUNK; it read the whole [P, 16, 8] block) and
# the combine kernel's own device time in its own column. 19a: the default rule's P = 256
# (8 x 32K: 183 us, 8 x 128K: 330 us) was 2.8x / 1.5x slower than P = 128; compiled for sm_90
# the whole-block combine uses 212 registers at P = 256 and does not spill, so the cause is
# not known.
# Prediction (written before the run): if the combine is the cause, 8 x 32K default ~65 us and
# 8 x 128K ~220 us; the other columns within 2% of 19a (their combines are < 5% of the call).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session19b.sh
# (19a's sweep, run again at this commit; it ran as a copy of 19a's lines, folded into this call
# of 19a's script afterwards.)
NAME=r19b exec bash "$(dirname "$0")/gpu_session19a.sh"
