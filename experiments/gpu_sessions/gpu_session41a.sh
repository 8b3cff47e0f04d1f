#!/usr/bin/env bash
# Session 41, one call that adapts to the card it gets (a call for an H200 may run on an H100).
# On an H200: issue 7's late_vt A/B (gpu_session39d.sh, ~2 min; it decides LATE_VT there),
# then issue 6's dense timing probes once (gpu_session40a.sh, REPEATS=1 GROUPED=0, ~2.5 min;
# GROUPED=1 adds the grouped probes, ~3 min more).
# On an H100 (late_vt already measured there in session 39): the dense probes twice and the
# grouped ones (~7 min; REPEATS=1: the dense probes once, ~5 min).
# The predictions are in the two scripts. 39d's files come back as $OUT/r39d.tar.gz.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session41a.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
here=$(dirname "$0")
if grep -q H200 <<<"$(nvidia-smi -L)"; then
  OUT=/tmp/r39d_out bash "$here/gpu_session39d.sh"
  tar -C /tmp/r39d_out -czf "$OUT/r39d.tar.gz" .
  REPEATS=1 GROUPED=${GROUPED:-0} bash "$here/gpu_session40a.sh"
else
  bash "$here/gpu_session40a.sh"
fi
