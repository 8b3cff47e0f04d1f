"""Probe (session 14): can a Pallas Mosaic GPU kernel with the wgmma A operand decoded in
registers stream weights near the copy bandwidth on the H200? Runs JAX's shipped
``hopper_mixed_type_matmul_mgpu`` (int8 weights upcast to bf16 in registers, then wgmma) with the
weights as the M side (out^T = W^T x^T, the decode orientation) at the dense 8192 x 28672 shape,
for a few token counts and tilings; prints time, weight bytes / time against the copy bandwidth
and the max error against the XLA reference. Not a test: GPU only.

  python experiments/probe_mgpu_mixed.py
"""

import itertools
import os
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pallas_kernels import devtime  # noqa: E402
from jax.experimental.pallas.ops.gpu import hopper_mixed_type_matmul_mgpu as mm  # noqa: E402

N, K = 28672, 8192


def main():
    bw = devtime.report_copy_bandwidth(1 << 30)
    w = jax.random.randint(jax.random.key(0), (N, K), -128, 127, jnp.int8)
    for tokens in (64, 8):
        x = jax.random.normal(jax.random.key(1), (K, tokens), jnp.bfloat16)
        ref = jnp.dot(w.astype(jnp.bfloat16), x, preferred_element_type=jnp.float32)
        for tm, tk, steps, wgd in itertools.product((64, 128), (64, 128, 256), (4, 6),
                                                    (mm.MatmulDimension.M,)):
            cfg = mm.TuningConfig(tile_m=tm, tile_n=tokens, tile_k=tk, max_concurrent_steps=steps,
                                  epi_tile_n=tokens, epi_tile_m=64, wg_dimension=wgd)
            f = jax.jit(lambda w, x, cfg=cfg: mm.mixed_matmul_kernel(
                w, x, out_dtype=jnp.float32, config=cfg))
            try:
                out = f(w, x)
                err = float(jnp.max(jnp.abs(out - ref)) / jnp.max(jnp.abs(ref)))
                t = devtime.device_seconds(f, w, x)
            except Exception as e:  # noqa: BLE001
                print(f"tokens {tokens} tm {tm} tk {tk} steps {steps}: {type(e).__name__}: "
                      f"{str(e)[:300]}", flush=True)
                continue
            print(f"tokens {tokens} tm {tm} tk {tk} steps {steps}: {t * 1e6:.1f} us, "
                  f"{100 * N * K / t / bw:.1f}% of copy (int8 weights), rel err {err:.1e}",
                  flush=True)


if __name__ == "__main__":
    main()
