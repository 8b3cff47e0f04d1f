"""One launch of each dense FP4 decode-matmul variant on 8192 x 28672 (NVFP4), in a fixed order,
for a hardware profiler (session 11: is the kernel issue-bound, as its static SASS suggests?):

  ncu --clock-control none -k regex:fp4_matmul --section WarpStateStats ... \\
      python3 -m pallas_kernels.profile_dense

Prints the launch order and checks each output against the reference, so a profile never
describes a wrong kernel.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import fp4_matmul as fm
from pallas_kernels import matmul_triton as mt
from trace_jax import quant

K, N = 8192, 28672


def variants():
    """(M, config) in launch order: the defaults at M = 1 and 64, then M = 1 stream-K."""
    d1 = mt.default_config(1, K, N, grouped=False)
    return [(1, d1), (64, mt.default_config(64, K, N, grouped=False)),
            (1, dataclasses.replace(d1, split_k=1, num_stages=5, programs=3 * mt._sm_count()))]


def main() -> int:
    key = jax.random.key(0)
    w = fm.prepare_weights(quant.quantize(jax.random.normal(key, (K, N)), "nvfp4", axis=-2))
    for i, (m, cfg) in enumerate(variants()):
        x = jax.random.normal(jax.random.fold_in(key, m), (m, K)).astype(jnp.bfloat16)
        ref = np.asarray(fm.fp4_matmul_reference(x, w), np.float32)
        out = np.asarray(jax.jit(lambda x, w, c=cfg: mt.dense(x, w, c))(x, w), np.float32)
        err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
        print(f"launch {i}: M={m} {cfg} rel err {err:.1e}", flush=True)
        if not err < 1e-2:
            raise SystemExit(f"M={m} {cfg}: wrong output (rel err {err})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
