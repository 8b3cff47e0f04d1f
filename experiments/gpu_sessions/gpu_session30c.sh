#!/usr/bin/env bash
# One H200, issue 7: what P's precision does with the GPU kernel's own bits, and the MXFP4 step.
# (1) experiments/p_precision_mismatch.py on the default tiny run's checkpoint (session 29's CPU
#     study used the reference attention's bf16 rounding of P, the kernel's size, not its bits).
#     Prediction: TRACE kl_k3 with f32 P within 20% of the CPU's 1.19e-3; bf16 P +20-50%.
# (2) the 4-layer 30B FP4 step with MXFP4 weights and cache, f32 vs bf16 P (bf16 P now has its
#     own v6 knobs, 30b). Prediction: bf16 P 5-8% faster at 32K and 128K.
# Usage (repo root, with .whl/ and runs/tiny_f32 carried): bash experiments/gpu_sessions/gpu_session30c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r30c
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
python3 -c "from trace_jax import ops; print('attention kernel:', ops._kernel('decode_attention', 'decode_attention'))"
timeout 300 python3 experiments/p_precision_mismatch.py --config configs/tiny.py \
  --checkpoint runs/tiny_f32 --batches 8 --out "$R/pm" > "$R/pm.txt" 2>&1
echo "pm rc=$?"
rollout_4l mx_f32 150 fp4 32768,131072 --fmt mxfp4 --steps 12 --attn_p_precision f32
rollout_4l mx_bf16 150 fp4 32768,131072 --fmt mxfp4 --steps 12 --attn_p_precision bf16
tar -C "$R" -czf "$OUT/r30c.tar.gz" .
cat "$R/pm/p_precision_mismatch.md"; grep -iE "error|Traceback" "$R/pm.txt" | head -5
show_table mx_f32 mx_bf16
exit 0
