#!/usr/bin/env bash
# Session 39 (issue 7): v6 with each decoded V plane transposed at its own P.V MMA
# (`late_vt=1`) against the default at 111 x 32K and 27 x 128K. sm_90 compile
# (`attention_compilecheck`): NVFP4 f32 P 16.0 instead of 20.0 KB of shared memory at 168
# instead of 136 registers, 12 instead of 10 warps per SM (the default is shared-memory bound),
# 32.1 instead of 32.4 SASS per row; NVFP4 bf16 P 11 warps either way; MXFP4 f32 P 12 instead
# of 14 warps; MXFP4 bf16 P 13 instead of 12.
# Prediction (before the run): on an H100 (NVFP4 already at 92-95% of copy) NVFP4 f32 P with
# late_vt within -3..+2% of the default; on an H200 0-4% faster; MXFP4 f32 P 0-3% slower
# (fewer warps); bf16 P within 1%. Relative errors identical (same arithmetic).
# (After the run: the warp counts above came from a resident_warps without CUDA's register
# sub-partition rule; with it MXFP4 f32 P and bf16 P hold 12 warps either way, NVFP4 f32 P
# 10 -> 12 stands. NOTES_attention session 39.)
# Session 47 added two NVFP4 variants at 2 pipeline stages (the default has 3): compiled for
# sm_90 (`python -m pallas_kernels.attention_compilecheck`), NVFP4 f32 P at (32, 1, 2) is 136
# registers, 15.2 KB, 12 warps per SM and 31.5 SASS per row (the default 136 / 20.0 KB / 10 /
# 32.4; late_vt 168 / 16.0 / 12 / 32.1); late_vt at 2 stages 168 / 11.2 KB / 12 / 31.5. The
# 3-stage pick dates from session 13's sweep (before the f32 P split). Prediction: 2 stages
# -2..+4% on an H200 (12 warps as late_vt, with fewer instructions, but one tile less in
# flight per warp). Rule: if a 2-stage variant gains >= 1.5% on NVFP4 f32 P at both shapes and
# more than late_vt alone, make it NVFP4 v6's default (`attention_triton.tuned_knobs`) instead.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session39d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r39d
install_wheels
for fmt in nvfp4 mxfp4; do
  extra=""; limit=${LIMIT:-80}
  if [ $fmt = nvfp4 ]; then extra=";num_stages=2;late_vt=1,num_stages=2"; limit=${LIMIT:-110}; fi
  timeout "$limit" python3 experiments/check_mgpu_attention.py --no-mosaic --fmt $fmt \
    --shapes "${SH:-111:32768,27:131072}" \
    --triton-variants ";late_vt=1;bf16_p=1;bf16_p=1,late_vt=1$extra" --out "$OUT/$fmt" \
    > "$OUT/$fmt.txt" 2>&1
  echo "$fmt rc=$?"
  python3 experiments/check_mgpu_attention.py --summary "$OUT/$fmt/kernels_attention_mgpu.json"
done
grep -hiE "error|Traceback" "$OUT"/*.txt | head -5
exit 0
