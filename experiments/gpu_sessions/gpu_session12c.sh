#!/usr/bin/env bash
# Session 12, one H200: why the paired-unit layout (commit 3304579, carried as .carry/paired:
# its pallas_kernels/ and trace_jax/ with today's profile_dense.py) ran 1.5x slower than v2
# with 15% fewer static SASS. Nsight Compute with PC sampling on both, the same launches
# (dense 8192 x 28672 NVFP4, M = 1 split-K default, M = 64 and M = 1 stream-K): executed
# instruction mix and stall reasons per opcode (experiments/ncu_source_summary.py).
# Prediction (written before the run): the paired kernel executes more load instructions
# (LDS / LDGSTS: the 4x-duplicated linear layout of its joined pair tensors) or stalls on
# "short scoreboard" / "mio throttle" at the shared-memory reads; its ALU mix (no PRMT) is lighter.
# Usage (repo root): bash experiments/gpu_sessions/gpu_session12c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r12c
export XLA_PYTHON_CLIENT_PREALLOCATE=false
for v in v2 paired; do
  dir=$REPO; [ "$v" = paired ] && dir=$REPO/.carry/paired
  (cd "$dir" && PYTHONPATH=/tmp/site:$dir ncu_source_profile "$R/$v" fp4_matmul \
     pallas_kernels.profile_dense)
done
tar czf "$OUT/session12c.tgz" -C /tmp r12c
for v in v2 paired; do
  echo "=== $v"; grep -E "Duration|Registers Per|Dynamic Shared" "$R/$v/details.txt" | head -9
  sed -n '/source page/,/all opcodes/p' "$R/$v/summary.txt" | head -26
done
exit 0
