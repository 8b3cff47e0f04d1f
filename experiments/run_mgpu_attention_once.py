"""Run the Mosaic GPU FP4-KV attention kernel at 111 sequences x 32K context (GQA 32 / 4,
head_dim 128, NVFP4) once, for Nsight Compute (``ncu_source_profile DIR body
experiments.run_mgpu_attention_once`` in gpu_prelude.sh), with the knobs session 18c profiled
(``KNOBS``: two 64-row tiles per step, the lazy sum, the masked body everywhere, 16 splits; the
defaults changed after that profile). Checks the output against the Triton kernel first, so a
profile never describes a wrong kernel. GPU only.
"""

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import attention_mgpu as AM
from pallas_kernels import kv_layout as KL
from pallas_kernels import mgpu_kv_layout as MK
from pallas_kernels.attention_triton import decode_attention_triton
from trace_jax import quant as Q

B, HQ, H, S, D = 111, 32, 4, 32768, 128
KNOBS = dict(sub=2, lazy_sum=True, fast_full=False, approx=False, no_auto_barriers=False,
             num_splits=16)
quant = jax.jit(lambda x: Q.quantize(x, "nvfp4", axis=-1, global_scope="row"))
ks = jax.random.split(jax.random.PRNGKey(0), 3)
k, v = (quant(jax.random.normal(kk, (B, H, S, D), jnp.float32)) for kk in ks[:2])
q = jax.random.normal(ks[2], (B, HQ, D), jnp.bfloat16)
lengths = jnp.full((B,), S, jnp.int32).at[0].set(1)
ref = np.asarray(jax.jit(lambda q, k, v, n: decode_attention_triton(
    q, k, v, n, sm_scale=D ** -0.5))(q, KL.to_kv_words(k), KL.to_kv_words(v), lengths),
    np.float32)
cache = jax.jit(MK.to_mgpu_kv)(k, v)
del k, v
out = jax.jit(lambda q, c, n: AM.decode_attention_mgpu(q, c, n, **KNOBS, backend="mgpu"))(
    q, cache, lengths)
err = np.linalg.norm(np.asarray(out, np.float32) - ref) / np.linalg.norm(ref)
print(f"{KNOBS}: rel err vs Triton {err:.1e}", flush=True)
if not err < 1e-2:
    raise SystemExit(f"wrong output (rel err {err})")
print("done")
