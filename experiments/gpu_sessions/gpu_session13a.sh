#!/usr/bin/env bash
# Session 13, one H200: FP4-KV decode attention v5 / v6 (issue 7) -- the KV caches in the
# pallas_kernels.kv_layout word layout (codes bit-permuted at append time so that a word of 8
# codes decodes into its 4 bf16x2 MMA pairs with 8 integer ops instead of v4's 14). v5: K only;
# v6 (init_cache's default now): K and V, V decoded in its row orientation, then transposed.
# Static SASS per cache row (attention_compilecheck, default knobs): NVFP4 (32 / 1 warp / 3
# stages) v4 36.9, v5 34.2, v6 31.2; MXFP4 (64 / 2 warps) 39.8, 36.9, 33.9.
# 1) python -m pallas_kernels.bench_attention_v5: v4 / v5 / v6 on the same data, device time,
#    NVFP4 and MXFP4, B x ctx 32 x 8K, 8 / 32 / 128 x 32K, 32 x 128K, max |vN - v4|, relerr vs the reference.
# (The decode-step A/B planned here ran as gpu_session13c.sh.)
# Prediction (written before the run): issue-bound kernel (session 8: 70% of issue slots busy),
# so v6 1.08-1.15x v4 from 32K up, v5 1.03-1.07x; NVFP4 v6 60-70% of copy across the shapes;
# max |v6 - v4| <= 1e-7; FP4 4-layer step at 32K 6-9% faster (attention ~800 of 1283 us/layer).
# Usage (repo root): bash experiments/gpu_sessions/gpu_session13a.sh
source "$(dirname "$0")/../gpu_prelude.sh" r13a
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 240 python3 -m pallas_kernels.bench_attention_v5 --out "$R" > "$R/attn.txt" 2>&1
echo "attention rc=$?"
tar czf "$OUT/session13a.tgz" -C /tmp r13a
grep -iE "error|Traceback" "$R/attn.txt" | head -3
tail -16 "$R/kernels_attention_v5.md"
exit 0
