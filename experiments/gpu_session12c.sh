#!/usr/bin/env bash
# Session 12, one H200: why the paired-unit layout (commit 3304579, carried as .carry/paired:
# its pallas_kernels/ and trace_jax/ with today's profile_dense.py) ran 1.5x slower than v2
# with 15% fewer static SASS. Nsight Compute with PC sampling on both, the same launches
# (dense 8192 x 28672 NVFP4, M = 1 split-K default, M = 64 and M = 1 stream-K): executed
# instruction mix and stall reasons per opcode (experiments/ncu_source_summary.py).
# Prediction (written before the run): the paired kernel executes more load instructions
# (LDS / LDGSTS: the 4x-duplicated linear layout of its joined pair tensors) or stalls on
# "short scoreboard" / "mio throttle" at the shared-memory reads; its ALU mix (no PRMT) is lighter.
# Usage (repo root): bash experiments/gpu_session12c.sh
source "$(dirname "$0")/gpu_prelude.sh" r12c
export XLA_PYTHON_CLIENT_PREALLOCATE=false
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
ROOT=$PWD
for v in v2 paired; do
  mkdir -p "$R/$v"
  dir=$ROOT; [ "$v" = paired ] && dir=$ROOT/.carry/paired
  (cd "$dir" && PYTHONPATH=/tmp/site:$dir timeout 200 "$NCU" --clock-control none \
     -k 'regex:fp4_matmul' -o "$R/$v/dense" --section SpeedOfLight --section WarpStateStats \
     --section SourceCounters --section LaunchStats --import-source no \
     python3 -m pallas_kernels.profile_dense > "$R/$v/ncu_log.txt" 2>&1)
  echo "$v ncu rc=$?"; grep "launch " "$R/$v/ncu_log.txt"
  "$NCU" --import "$R/$v/dense.ncu-rep" --page raw --csv > "$R/$v/raw.csv" 2>&1
  "$NCU" --import "$R/$v/dense.ncu-rep" --page source --csv --print-source sass \
    > "$R/$v/source.csv" 2>&1
  "$NCU" --import "$R/$v/dense.ncu-rep" --page details > "$R/$v/details.txt" 2>&1
  python3 "$ROOT/experiments/ncu_source_summary.py" "$R/$v" > "$R/$v/summary.txt" 2>&1
done
tar czf "$OUT/session12c.tgz" -C /tmp r12c
for v in v2 paired; do
  echo "=== $v"; grep -E "Duration|Registers Per|Dynamic Shared" "$R/$v/details.txt" | head -9
  sed -n '/source page/,/all opcodes/p' "$R/$v/summary.txt" | head -26
done
exit 0
