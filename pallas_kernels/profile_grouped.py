"""One launch of each grouped expert-matmul kernel variant on the 30B expert shape (K x N =
2048 x 768, 128 experts, 32 tokens x top-8), in a fixed order, for a hardware profiler:

  ncu --clock-control none -k regex:'fp4_matmul|bf16_grouped' --section WarpStateStats ... \\
      python3 -m pallas_kernels.profile_grouped

Prints the launch order (the profiler names kernels only by their Pallas name) and checks each
output against the reference, so a profile never describes a wrong kernel.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import fp4_matmul as fm
from pallas_kernels import matmul_triton as mt
from pallas_kernels.bench_matmul import route
from trace_jax import quant


def variants(m: int, k: int, n: int):
    """(name, fp4?, config) in launch order: the defaults, then the one-program-per-tile ones."""
    fp4 = mt.default_config(m, k, n, grouped=True)
    bf = mt.default_bf16_config(m, n)
    return [("nvfp4 persistent (default)", True, fp4),
            ("nvfp4 one program per tile", True,
             dataclasses.replace(fp4, programs=0, bn=64, num_stages=3)),
            ("bf16 persistent (default)", False, bf),
            ("bf16 one program per tile", False, dataclasses.replace(bf, programs=0,
                                                                     num_stages=4))]


def main() -> int:
    e, k, n, tokens, topk = 128, 2048, 768, 32, 8
    key = jax.random.key(0)
    w32 = jax.random.normal(key, (e, k, n), jnp.float32)
    wb = w32.astype(jnp.bfloat16)
    fw = fm.prepare_weights(quant.quantize(w32, "nvfp4", axis=-2))
    gs = route(tokens, e, topk, jax.random.fold_in(key, 1))
    m = tokens * topk
    x = jax.random.normal(jax.random.fold_in(key, 2), (m, k)).astype(jnp.bfloat16)
    ref_fp4 = np.asarray(fm.fp4_grouped_matmul_reference(x, fw, gs), np.float32)
    ref_bf = np.asarray(jax.lax.ragged_dot(x, wb, gs, preferred_element_type=jnp.float32))
    for i, (name, is_fp4, cfg) in enumerate(variants(m, k, n)):
        if is_fp4:
            out = jax.jit(lambda x, w, c=cfg: fm.fp4_grouped_matmul(x, w, gs, cfg=c))(x, fw)
        else:
            out = jax.jit(lambda x, w, c=cfg: fm.bf16_grouped_matmul(x, w, gs, cfg=c))(x, wb)
        ref = ref_fp4 if is_fp4 else ref_bf
        err = np.linalg.norm(np.asarray(out, np.float32) - ref) / np.linalg.norm(ref)
        print(f"launch {i}: {name} {cfg} rel err {err:.1e}", flush=True)
        if not err < 1e-2:
            raise SystemExit(f"{name}: wrong output (rel err {err})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
