# Sourced by the one-call GPU scripts (`source "$(dirname "$0")/gpu_prelude.sh" NAME`): strict
# mode, $OUT (what the device returns), $R = /tmp/NAME (the call's scratch folder, tarred into
# $OUT at the end), unbuffered Python, and the GPUs named in the log.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_out}
R=/tmp/$1
mkdir -p "$OUT" "$R"
export PYTHONUNBUFFERED=1
nvidia-smi -L
