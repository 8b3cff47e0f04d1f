#!/usr/bin/env bash
# Ran at commit 199f9b4 (session 22, one H200).
# One H200: (1) the quantize-with-hint kernel's new values output (the dequantized activation the
# rollout's next matmul reads, written by the kernel: experiments/check_quantize_values.py)
# against XLA on the GPU, bit for bit, and its device time against the kernel + XLA's dequantize;
# (2) the 4-layer 30B FP4 step at 32K profiled as 22b (launches, busy) and timed at 32K / 128K;
# (3) the same step with XLA's bf16 GEMMs on cuBLAS instead of its Triton GEMM fusions
# (--xla_gpu_enable_triton_gemm=false; 22b: the q/k/v and o projections at 1.4-1.8 TB/s).
# Prediction (written before the run): 0 mismatches in every row; at 888 x 768 the fused call ~5
# us against ~7 us; the step 216 -> ~200 launches, busy -30..-40 us, 4.34 -> 4.26-4.30 ms at 32K;
# cuBLAS within +-1% of the Triton GEMMs (the GEMMs ~96 us per step of 4.3 ms).
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session22c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r22c
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
timeout 150 python3 experiments/check_quantize_values.py --out "$R/qv" > "$R/qv.txt" 2>&1
echo "qv rc=$?"
rollout_4l prof 120 fp4 32768 --steps 8 --profile_steps 8
rollout_4l step 150 fp4 32768,131072 --steps 16
XLA_FLAGS=--xla_gpu_enable_triton_gemm=false rollout_4l step_cublas 150 fp4 32768,131072 --steps 16
rm -rf "$R"/prof/profile/trace_*
tar -C "$R" -czf "$OUT/r22c.tar.gz" .
grep "^|" "$R/qv/quantize_values.md"; grep -iE "error|Traceback" "$R/qv.txt" | head -5
f=$(ls "$R"/prof/profile/*.md 2>/dev/null | head -1); [ -n "$f" ] && sed -n 1,3p "$f" | cut -c1-160
rollout_rows step step_cublas
exit 0
