"""One launch of each decode-attention kernel at a rollout shape, for a hardware profiler:

  ncu --clock-control none -k regex:decode_attention --section WarpStateStats ... \\
      python3 -m pallas_kernels.profile_attention [B] [S]

Default B = 32 sequences x S = 32768 cache rows, Qwen3-30B heads (32 query / 4 kv, head_dim
128): the NVFP4 and MXFP4 kernels at their defaults for the caches' layout (``FP4_PROFILE_LAYOUT``:
``kv_words``, the rollout's, -> v6; ``natural`` -> v4), then the bf16 kernel. Prints the
launch order and checks each output against the float32 reference, so a profile never describes
a wrong kernel. Question (issue 7): is the FP4 kernel issue-bound (time tracks instructions per
row, NOTES_attention.md) or latency-bound (few eligible warps)?
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import kv_layout as KL
from pallas_kernels.attention_triton import decode_attention_triton
from trace_jax import ops
from trace_jax.quant import quantize


def main(argv) -> int:
    b = int(argv[1]) if len(argv) > 1 else 32
    s = int(argv[2]) if len(argv) > 2 else 32768
    hq, h, d = 32, 4, 128
    key = jax.random.key(0)
    q = jax.random.normal(key, (b, hq, d), jnp.float32).astype(jnp.bfloat16)
    kf = jax.random.normal(jax.random.fold_in(key, 1), (b, h, s, d), jnp.bfloat16)
    vf = jax.random.normal(jax.random.fold_in(key, 2), (b, h, s, d), jnp.bfloat16)
    lengths = jnp.full((b,), s, jnp.int32)
    words = os.environ.get("FP4_PROFILE_LAYOUT", KL.LAYOUT) == KL.LAYOUT
    lay = KL.to_kv_words if words else (lambda c: c)  # noqa: E731
    caches = [(fmt, lay(quantize(kf, fmt, axis=-1, global_scope="row")),
               lay(quantize(vf, fmt, axis=-1, global_scope="row"))) for fmt in ("nvfp4", "mxfp4")]
    caches.append(("bf16", kf, vf))
    for i, (fmt, kc, vc) in enumerate(caches):
        out = decode_attention_triton(q, kc, vc, lengths, sm_scale=d ** -0.5,
                                      interpret=jax.default_backend() != "gpu")
        ref = ops.decode_attention_reference(q, kc, vc, lengths)
        o, r = np.asarray(out, np.float32), np.asarray(ref, np.float32)
        err = float(np.linalg.norm(o - r) / np.linalg.norm(r))
        print(f"launch {i}: {fmt} B={b} S={s} rel err {err:.1e}", flush=True)
        if not err < 2e-2:
            raise SystemExit(f"{fmt}: wrong output (rel err {err})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
