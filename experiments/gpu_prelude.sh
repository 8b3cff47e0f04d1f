# Sourced by the one-call GPU scripts (`source "$(dirname "$0")/gpu_prelude.sh" NAME`): strict
# mode, $OUT (what the device returns), $R = /tmp/NAME (the call's scratch folder, tarred into
# $OUT at the end), unbuffered Python, and the GPUs named in the log.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_out}
R=/tmp/$1
mkdir -p "$OUT" "$R"
export PYTHONUNBUFFERED=1
nvidia-smi -L

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)

# ncu_source_profile DIR KERNEL_REGEX MODULE: Nsight Compute with PC sampling of `python3 -m
# MODULE` (its kernels matching KERNEL_REGEX), run in the current directory; writes DIR/prof.ncu-rep,
# its raw / source (SASS) / details pages and DIR/summary.txt (experiments/ncu_source_summary.py:
# stall reasons per launch, executed instructions and stall samples per opcode).
ncu_source_profile() {
  local dir=$1 kern=$2 module=$3
  [ -n "$NCU" ] || { echo "ncu not found (PATH, /opt/nvidia/nsight-compute/*/ncu)"; return 1; }
  mkdir -p "$dir"
  timeout 240 "$NCU" --clock-control none -k "regex:$kern" -o "$dir/prof" --section SpeedOfLight \
    --section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy \
    --section ComputeWorkloadAnalysis --import-source no python3 -m "$module" \
    > "$dir/ncu_log.txt" 2>&1
  echo "$module: ncu rc=$?"; grep "launch " "$dir/ncu_log.txt"
  "$NCU" --import "$dir/prof.ncu-rep" --page raw --csv > "$dir/raw.csv" 2>&1
  "$NCU" --import "$dir/prof.ncu-rep" --page source --csv --print-source sass > "$dir/source.csv" 2>&1
  "$NCU" --import "$dir/prof.ncu-rep" --page details > "$dir/details.txt" 2>&1
  python3 "$REPO/experiments/ncu_source_summary.py" "$dir" > "$dir/summary.txt" 2>&1
}
