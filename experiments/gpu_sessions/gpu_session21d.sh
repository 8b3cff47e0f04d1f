#!/usr/bin/env bash
# Ran at commit 3a185c1 (session 21).
# One H200, issue 6: why the fused gate / up / SwiGLU kernel is 3.6% slower than the two unfused
# kernels at 888 rows (21b). ptxas resource dumps of every Mosaic kernel the check compiles
# (unfused, unfused W4A4, fused, fused serial, fused W4A4, in that order), and the serial K step
# (SWIGLU_SERIAL: the gate wgmma waited on before the up tile is decoded, one A tile live).
# Prediction (written before the run): the unfused kernel 120 registers (20a's dump), the fused
# one ~180-230 (two decoded 64 x 256 bf16 A tiles live: 2 CTAs per SM instead of 4), serial
# ~130-150; serial at 111 / 128 tokens: the kernel 80 -> 74-78 us; at 27 tokens within 3%.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session21d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r21d
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$REPO || exit 1
mkdir -p "$R/ptxas"
MOSAIC_GPU_DUMP_PTXAS=1 MOSAIC_GPU_DUMP_TO="$R/ptxas" timeout 200 \
  python3 experiments/check_mgpu_swiglu.py --out "$R/swiglu" --tokens 27,111,128 \
  --knobs "serial=1" > "$R/swiglu.txt" 2>&1
echo "swiglu rc=$?"
tar -C "$R" -czf "$OUT/r21d.tar.gz" .
for f in "$R"/ptxas/*.ptxas; do
  echo "$(basename "$f"): $(grep -hoE "Used [0-9]+ registers|[0-9]+ bytes spill stores" "$f" | tr '\n' ' ')"
done
cat "$R"/ptxas/*.resources.txt 2>/dev/null | cut -c1-60 | sort | uniq -c
show_table swiglu
exit 0
