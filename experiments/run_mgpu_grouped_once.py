"""Run the Mosaic GPU FP4 grouped (MoE) matmul at the 30B decode shapes (128 experts, top-8 of
111 tokens = 888 routed rows; 2048 x 768 and 768 x 2048) a few times each, for Nsight Compute
(``ncu_source_profile DIR body experiments.run_mgpu_grouped_once`` in gpu_prelude.sh). Checks
each output against the reference first, so a profile never describes a wrong kernel. GPU only.

Environment: ``GROUPED_TOKENS`` (comma list, default 111) picks the token counts, ``GROUPED_KN``
(e.g. ``2048x768``; default both shapes) the expert shape, ``GROUPED_X_LAYOUT`` (``rows`` /
``aligned``; default the library's) the x layout, ``GROUPED_NT`` the weight tiles per program
(default the library's). Launches run in that order, so an ncu report's
launches follow (tokens, shape).
"""

import os

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import fp4_matmul_mgpu as FM
from pallas_kernels.bench_matmul import route
from trace_jax.quant import quantize

E, TOPK = 128, 8
TOKENS = [int(t) for t in os.environ.get("GROUPED_TOKENS", "111").split(",")]
SHAPES = [tuple(int(d) for d in s.split("x"))
          for s in os.environ.get("GROUPED_KN", "2048x768,768x2048").split(",")]
LAYOUT = os.environ.get("GROUPED_X_LAYOUT") or None
NT = int(os.environ["GROUPED_NT"]) if os.environ.get("GROUPED_NT") else None
weights = {}  # (k, n) -> the Mosaic weights, quantized once per shape
for tokens, (k, n) in ((t, s) for t in TOKENS for s in SHAPES):
    gs = route(tokens, E, TOPK, jax.random.PRNGKey(tokens))
    m = tokens * TOPK
    if (k, n) not in weights:
        q = jax.jit(lambda w: quantize(w, "nvfp4", axis=-2, global_scope="tensor"))(
            jax.random.normal(jax.random.PRNGKey(k), (E, k, n), jnp.float32))
        weights[k, n] = jax.jit(FM.prepare_mgpu)(q)
    w = weights[k, n]
    x = jax.random.normal(jax.random.PRNGKey(m), (m, k), jnp.bfloat16)
    f = jax.jit(lambda x, w, g: FM.fp4_grouped_matmul_mgpu(x, w, g, backend="mgpu",
                                                            x_layout=LAYOUT, nt=NT))
    ref = np.asarray(jax.jit(FM.fp4_grouped_matmul_mgpu_reference)(x, w, gs), np.float32)
    out = np.asarray(f(x, w, gs), np.float32)
    err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    print(f"tokens={tokens} K={k} N={n} layout={LAYOUT} nt={NT}: rel err {err:.1e}", flush=True)
    if not err < 1e-3:
        raise SystemExit(f"tokens={tokens} K={k} N={n}: wrong output (rel err {err})")
    for _ in range(3):
        jax.block_until_ready(f(x, w, gs))
print("done")
