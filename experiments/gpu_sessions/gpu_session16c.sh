#!/usr/bin/env bash
# Ran at commit 3c4c9a3 (session 16).
# Session 16, one H200: the FP4 decode step's small XLA ops (session 15d profile, mapped to source
# lines from its compiled HLO: ~165 us per layer besides attention and the expert kernels).
# Changes: (a) the rollout's activation sites (expert_in, expert_hidden, attn/kv) quantized by the
# fused Pallas quantize-with-hint kernel (numerics.ACTIVATION_QUANTIZER="auto"), not ~25 XLA
# fusions (~26 us per layer); (b) the routing order by a rank count instead of two GPU sorts
# (8.6 + 3.4 us per layer); (c) the grouped wrapper's expert cumsums as triangle sums (~7.6 us per
# layer in five kernels); (d) the attention's launch order grid (P, H, B) (16b: -0.5..-1.0%).
# (1) the 4-layer 30B step at 32K / 128K, bf16 + fp4, and fp4 with the XLA quantizer;
# (2) a device-time profile of the fp4 step at 32K (per-kernel table).
# Prediction (written before the run): (a) -15..-20 us per layer, (b) -7, (c) -3, (d) -5: the FP4
# step at 32K 4.55 -> ~4.40 ms (16b's 4.55 on another machine: +-5%), with the XLA quantizer
# ~0.07 ms slower than with the kernel; bf16 unchanged (~2.76 ms); FP4/BF16 ~3.45-3.5x.
# Usage (repo root, with .whl/ carried): bash experiments/gpu_sessions/gpu_session16c.sh
source "$(dirname "$0")/../gpu_prelude.sh" r16c
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
# (as run: a local roll() with these arguments, now gpu_prelude's rollout_4l)
rollout_4l roll 150 bf16,fp4 32768,131072 --steps 12
rollout_4l roll_xlaq 150 fp4 32768,131072 --steps 12 --activation_quantizer xla
rollout_4l prof 150 fp4 32768 --steps 8 --profile_steps 8
tar -C "$R" -czf "$OUT/r16c.tar.gz" . && cp "$R"/*.txt "$OUT/" 2>/dev/null
for n in roll roll_xlaq prof; do
  grep -E "^\| (fp4|bf16) |Error|error" "$R/$n/rollout_throughput.md" "$R/$n.txt" 2>/dev/null \
    | sed "s/^/$n /" | cut -c1-140 | head -8
done
f=$(ls "$R"/prof/profile/*.md 2>/dev/null | head -1); [ -n "$f" ] && sed -n 1,30p "$f" | cut -c1-110
exit 0
