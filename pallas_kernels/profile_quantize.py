"""One launch of the fused quantize-with-hint kernel per format and scope (NVFP4 and MXFP4 row
scope, NVFP4 per-tensor; default knobs) on 65536 x 4096 bf16, in a fixed order, for a hardware
profiler:

  ncu --clock-control none -k regex:quantize_with_hint --section SourceCounters ... \\
      python3 -m pallas_kernels.profile_quantize

Prints the launch order and checks each result bit for bit against the jitted reference
(codes, scales, hint bits), so a profile never describes a wrong kernel.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import quantize_hint as QH

M, K = 65536, 4096


def main() -> int:
    x = (jax.random.normal(jax.random.key(0), (M, K)) * 3.0).astype(jnp.bfloat16)
    for i, (fmt, scope) in enumerate((("nvfp4", "row"), ("mxfp4", "row"), ("nvfp4", "tensor"))):
        q, h = QH.quantize_with_hint_triton(x, fmt, global_scope=scope)
        rq, rh = jax.jit(lambda x, f=fmt, s=scope: QH.quantize_with_hint_reference(
            x, f, global_scope=s))(x)
        same = all(np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
                   for a, b in ((q.codes, rq.codes), (q.scales, rq.scales), (h.bits, rh.bits)))
        print(f"launch {i}: {fmt} {scope} {QH.default_knobs(K)} bit-identical {same}",
              flush=True)
        if not same:
            raise SystemExit(f"{fmt}: kernel differs from the reference")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
