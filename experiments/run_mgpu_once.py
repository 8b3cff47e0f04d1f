"""Run the Mosaic GPU FP4 matmul (8192 x 28672, M = 8) a few times per variant, for Nsight
Compute (``ncu_source_profile DIR body experiments.run_mgpu_once`` in gpu_prelude.sh). GPU only."""

import jax
import jax.numpy as jnp

from pallas_kernels import fp4_matmul_mgpu as FM
from trace_jax.quant import quantize

q = jax.jit(lambda w: quantize(w, "nvfp4", axis=-2, global_scope="tensor"))(
    jax.random.normal(jax.random.PRNGKey(0), (8192, 28672), jnp.float32))
w = jax.jit(FM.prepare_mgpu)(q)
x = jax.random.normal(jax.random.PRNGKey(1), (8, 8192), jnp.bfloat16)
for chunked in (False, True):
    f = jax.jit(lambda x, w, c=chunked: FM.fp4_matmul_mgpu(x, w, chunked=c, backend="mgpu"))
    for _ in range(3):
        jax.block_until_ready(f(x, w))
print("done")
