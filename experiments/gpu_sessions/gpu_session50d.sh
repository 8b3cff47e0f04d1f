#!/usr/bin/env bash
# Ran in session 50 on an H100 with one chunk width; the manual-pipeline kernel (cta_wgs) was
# removed in session 51: check out 89d788c (its results' commit) to repeat it (NOTES_matmul).
# Issue 6, grouped kernel at 512 tokens: CTAs of 3 warpgroups, each an independent program with
# its own K pipeline (`fp4_matmul_mgpu._grouped_multi`, `cta_wgs=` / `GROUPED_CTA_WGS`; new in
# session 50, CPU-tested only: it lowers for CUDA). A 384-thread CTA makes ptxas fit the kernel
# in 168 registers (the direct kernel takes 253 at 512 tokens: 2 warpgroups an SM), so an SM runs
# 3 warpgroups, each tk 128 x 3 stages (185 KB a CTA): ~1.5x the bytes in flight an SM. Session
# 49's offline ptxas fitted the tk 128 kernel in 165 registers without spills; what removed
# restarts (tile runs) or barriers did nothing (gpu_session50a.sh / 50c.sh), what cut the
# warpgroups an SM (3 stages, the warp-specialized kernel) lost.
# 1. edge calls: 512 tokens at both expert shapes, skewed groups (several chunks) and the
#    fused pair, cta_wgs 3 against the library's default (maxdiff must be 0; NaN);
# 2. the grouped call at 512 tokens, both shapes: the default against cta_wgs 3 and 2 (2: tk
#    128 x 3 stages, 256 threads: registers capped at 255, no better than today: the control),
#    with the ptxas register counts;
# 3. the fused pair at 512 tokens, cta_wgs=3 (tk 128, 2 stages).
# Prediction (before the run): maxdiff 0; 168 registers, spills <= 100 B; 512 tokens 8-20%
# faster at 2048 x 768 with cta_wgs 3, 0-15% at 768 x 2048 (nt 2 today: x read once per 128
# rows; here once per 64); cta_wgs 2 within +-5% of the default; the pair 0-10%.
# Rule: maxdiff 0 everywhere, and cta_wgs 3 >= 5% faster than the default on both shapes and
# on the pair at 512 tokens: GROUPED_CTA_WGS = 3 for mp-56 calls, the 128-token and 1024-token
# calls measured next. Else the default stays 1.
# ~3 min on an H100 or an H200. Usage (repo root, with .whl/ carried):
#   bash experiments/gpu_sessions/gpu_session50d.sh
source "$(dirname "$0")/../gpu_prelude.sh" r50d
R="$OUT/r50d"; mkdir -p "$R"
install_wheels
timeout 100 python3 - > "$R/edge.txt" 2>&1 <<'PY'
import jax, jax.numpy as jnp
from pallas_kernels import fp4_matmul_mgpu as FM
from pallas_kernels.bench_matmul import route
from trace_jax.quant import quantize
def w_of(k, n, seed, e=128):
    q = quantize(jax.random.normal(jax.random.PRNGKey(seed), (e, k, n)), "nvfp4", axis=-2,
                 global_scope="tensor")
    return FM.prepare_mgpu(q)
d = lambda a, b: float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))))
nan = lambda a: bool(jnp.isnan(a.astype(jnp.float32)).any())
skew = jnp.zeros(128, jnp.int32).at[3].set(300).at[7].set(5).at[100].set(57)
g512 = route(512, 128, 8, jax.random.PRNGKey(512))
bad = 0
for k, n, cases in ((2048, 768, (("512 tokens", g512, 4096), ("skewed", skew, 400))),
                    (768, 2048, (("512 tokens", g512, 4096),))):
    w = w_of(k, n, k)
    for name, gs, m in cases:
        x = jax.random.normal(jax.random.PRNGKey(1), (m, k), jnp.bfloat16)
        base = jax.jit(lambda x, w, g: FM.fp4_grouped_matmul_mgpu(x, w, g, backend="mgpu"))(x, w, gs)
        out = jax.jit(lambda x, w, g: FM.fp4_grouped_matmul_mgpu(x, w, g, backend="mgpu",
                                                                 cta_wgs=3))(x, w, gs)
        bad += d(out, base) != 0 or nan(out)
        print(f"{k}x{n} {name} cta_wgs=3: maxdiff vs default {d(out, base)}, nan {nan(out)}",
              flush=True)
wg, wu = w_of(2048, 768, 7), w_of(2048, 768, 8)
x = jax.random.normal(jax.random.PRNGKey(2), (4096, 2048), jnp.bfloat16)
base = jax.jit(lambda x, a, b, g: FM.fp4_grouped_swiglu_mgpu(x, a, b, g, backend="mgpu"))(
    x, wg, wu, g512)
out = jax.jit(lambda x, a, b, g: FM.fp4_grouped_swiglu_mgpu(x, a, b, g, backend="mgpu",
                                                            cta_wgs=3))(x, wg, wu, g512)
bad += d(out, base) != 0 or nan(out)
print(f"pair 512 tokens cta_wgs=3: maxdiff vs default {d(out, base)}, nan {nan(out)}", flush=True)
print("edge: all identical" if not bad else f"edge: {bad} DIFFERENT")
raise SystemExit(1 if bad else 0)
PY
rc=$?; echo "edge rc=$rc"; grep -v "^W0000\|^I0000" "$R/edge.txt" | tail -8
[ $rc = 0 ] || exit 0
mkdir -p /tmp/r50d_ptx
MOSAIC_GPU_DUMP_PTXAS=1 MOSAIC_GPU_DUMP_TO=/tmp/r50d_ptx timeout 100 \
  python3 experiments/check_mgpu_matmul.py --grouped --tokens 512 --knobs 56:256:2 \
  --cta-wgs 3,2 --max-seconds 85 --out "$R/cta" > "$R/cta.txt" 2>&1
echo "cta rc=$?"
grep -iE "error|fail" "$R/cta.txt" | grep -v nvdisasm | head -5
grouped_summary "$R/cta/kernels_matmul_mgpu_grouped.json" | grep -v triton
ptxas_registers /tmp/r50d_ptx | tee "$R/registers.txt"
timeout 80 python3 experiments/check_mgpu_swiglu.py --tokens 512 --knobs "cta_wgs=3" \
  --out "$R/swiglu" > "$R/swiglu.txt" 2>&1
echo "fused pair rc=$?"; grep -E "^  tokens|rror" "$R/swiglu.txt" | cut -c1-1200
exit 0
