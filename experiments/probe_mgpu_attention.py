"""Can Pallas Mosaic GPU (jax 0.11.2) express the pieces of an FP4-KV decode attention kernel
built like the Mosaic FP4 matmul (``pallas_kernels/fp4_matmul_mgpu.py``)? Lowers, on a CPU
machine (``lowering_platforms=("cuda",)``; running it needs the GPU), one warpgroup's step:

* S^T [64 cache rows, 8 query heads] = K [64, 128] (registers, WGMMA layout: where the matmul
  puts its decoded FP4 weights) @ Q^T (shared memory, the [8, 128] tile's transposed view, as
  the matmul's x);
* the softmax's row reductions over the 64 cache rows (across the warpgroup's 4 warps) and exp2.

    python experiments/probe_mgpu_attention.py    # prints "lowered" or the error

Session 16: both lower (NOTES_attention, "a Mosaic GPU attention kernel"). Not yet probed: P
stored transposed as the second wgmma's B operand (the matmul's ``_store_transposed``, removed in session 17, did it
for its output) and V^T decoded from a token-major V cache layout.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

ROWS, D, G = 64, 128, 8


def _body(k_gmem, q_gmem, o_gmem, k_smem, q_smem, o_smem, bar):
    plgpu.copy_gmem_to_smem(k_gmem, k_smem, bar)
    plgpu.copy_gmem_to_smem(q_gmem, q_smem, bar)
    plgpu.barrier_wait(bar)
    k = plgpu.load(k_smem, layout=plgpu.Layout.WGMMA, optimized=False)  # stands in for a decode

    def scores(acc_ref):
        plgpu.wgmma(acc_ref, k, q_smem.T)
        plgpu.wgmma_wait(0)
        return acc_ref[...]

    s = pl.run_scoped(scores, plgpu.ACC((ROWS, G), jnp.float32))  # S^T, WGMMA layout
    m = jnp.max(s, axis=0)  # per query head, over the rows of all 4 warps
    p = jnp.exp2(s - m[None, :])
    o_smem[...] = p / jnp.sum(p, axis=0)[None, :]
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_smem, o_gmem)
    plgpu.wait_smem_to_gmem(0)


def main() -> int:
    tiles = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))
    kernel = plgpu.kernel(
        _body, out_type=jax.ShapeDtypeStruct((ROWS, G), jnp.float32), grid=(1,),
        grid_names=("x",),
        scratch_types=[plgpu.SMEM((ROWS, D), jnp.bfloat16, transforms=tiles),
                       plgpu.SMEM((G, D), jnp.bfloat16, transforms=tiles),
                       plgpu.SMEM((ROWS, G), jnp.float32), plgpu.Barrier(num_arrivals=2)])
    args = (jax.ShapeDtypeStruct((ROWS, D), jnp.bfloat16),
            jax.ShapeDtypeStruct((G, D), jnp.bfloat16))
    try:
        jax.jit(kernel).trace(*args).lower(lowering_platforms=("cuda",))
    except Exception as e:  # noqa: BLE001  (the point is to print what does not lower)
        print(f"{type(e).__name__}: {str(e)[:2000]}")
        return 1
    print("lowered")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
