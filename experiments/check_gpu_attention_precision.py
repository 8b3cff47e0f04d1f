"""What precision the trainer's f32 attention and the decode kernel really compute on this device.

  python experiments/check_gpu_attention_precision.py [--tiny]

Session 30d found, on an H200, TRACE's rollout / trainer kl_k3 ~10x *smaller* with the decode
kernel's P rounded to bf16 than with its f32 P (the CPU showed the opposite, +36%). This
measures, at the tiny model's attention shapes and at one long context, the relative error
against float64 attention of: ``attention.causal_attention`` (the trainer's; at
``Precision.HIGHEST`` since session 32, before at the default precision, TF32 on the GPU) at its
last query row with f32 and bf16 P, and the decode kernel (``ops.decode_attention``) over a bf16 cache with f32 and
bf16 P, then the NVFP4 decode kernel over full and per-sequence lengths. Prints one line per
(shape, computation); ``--tiny``: the tiny model's shape only. (Session 31 traced the 10x to
XLA's GPU fusions skipping bf16 casts, not to the kernel: NOTES_attention session 31.)
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pallas_kernels import kv_layout as KL  # noqa: E402
from trace_jax import attention, ops  # noqa: E402
from trace_jax import quant as Q  # noqa: E402


def _f64_last_row(q, k, v):
    """float64 attention of each sequence's last query over all its keys (GQA)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    B, T, H, D = q.shape
    K = k.shape[2]
    out = np.zeros((B, H, D))
    for b in range(B):
        for h in range(H):
            s = k[b, :, h // (H // K)] @ q[b, -1, h] / np.sqrt(D)
            p = np.exp(s - s.max())
            out[b, h] = p @ v[b, :, h // (H // K)] / p.sum()
    return out


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _decode_f32_out(q, kc, vc, n, p):
    """The decode attention with an f32 output: the Triton kernel on a GPU (what
    ``ops.decode_attention`` runs there, ``out_dtype`` f32), the reference elsewhere."""
    if jax.default_backend() == "gpu":
        from pallas_kernels.attention_triton import decode_attention_triton

        fn = lambda q, kc, vc, n: decode_attention_triton(  # noqa: E731
            q, kc, vc, n, sm_scale=q.shape[-1] ** -0.5, precision=p, out_dtype=jnp.float32)
    else:
        fn = lambda q, kc, vc, n: ops.decode_attention_reference(  # noqa: E731
            q.astype(jnp.float32), kc, vc, n, p_precision=p)
    return jax.jit(fn)(q, kc, vc, n)


SHAPES = ((8, 64, 4, 2, 32), (2, 2048, 32, 4, 128))  # (B, T, H, K, D): tiny.py's, a longer one


def measure(B, T, H, K, D) -> list[tuple[str, float]]:
    """(computation, relative error against float64) at one shape: the trainer's attention at
    the last query row (default and highest precision), the decode attention over a bf16 cache
    and over an NVFP4 ``kv_words`` cache (full lengths; then per-sequence lengths, its worst
    sequence as well), each with f32 and bf16 P."""
    keys = jax.random.split(jax.random.key(T), 3)
    q = (jax.random.normal(keys[0], (B, T, H, D)) * 2).astype(jnp.bfloat16)
    k = (jax.random.normal(keys[1], (B, T, K, D)) * 2).astype(jnp.bfloat16)
    v = jax.random.normal(keys[2], (B, T, K, D)).astype(jnp.bfloat16)
    want = _f64_last_row(q, k, v)
    f32 = lambda x: x.astype(jnp.float32)  # noqa: E731  (outputs compared before rounding)
    out = []
    for p in ops.P_PRECISIONS:  # (Precision.HIGHEST since session 32, P as the rollout's)
        trainer = jax.jit(lambda q, k, v, p=p: attention.causal_attention(f32(q), k, v, p)[:, -1])
        out.append((f"trainer causal_attention, P {p}", _rel(trainer(q, k, v), want)))
    kc, vc = (jnp.swapaxes(a, 1, 2) for a in (k, v))  # [B, K, T, D] cache
    n = jnp.full((B,), T, jnp.int32)
    for p in ops.P_PRECISIONS:
        out.append((f"decode attention, bf16 cache, P {p}",
                    _rel(_decode_f32_out(q[:, -1], kc, vc, n, p), want)))
    # the rollout's NVFP4 cache in the kv_words layout (decode v6), against float64 attention
    # over the dequantized cache
    qz = jax.jit(lambda a: Q.quantize(a.astype(jnp.float32), "nvfp4", axis=-1,
                                      global_scope="row"))
    kq, vq = qz(kc), qz(vc)
    kd, vd = (jnp.swapaxes(Q.dequantize(c), 1, 2) for c in (kq, vq))
    want4 = _f64_last_row(q, kd, vd)
    kw, vw = KL.to_kv_words(kq), KL.to_kv_words(vq)
    for p in ops.P_PRECISIONS:
        out.append((f"decode attention, NVFP4 kv_words, P {p}",
                    _rel(_decode_f32_out(q[:, -1], kw, vw, n, p), want4)))
    # per-sequence lengths (a rollout's: 1 .. T, most not a multiple of the block)
    lens = np.asarray([T - 7, 1, 5, 17, 31, 33, T // 2 + 3, T])[:B]
    want_n = np.stack([_f64_last_row(q[b:b + 1, -1:], kd[b:b + 1, :m], vd[b:b + 1, :m])[0]
                       for b, m in enumerate(lens)])
    for p in ops.P_PRECISIONS:
        o = np.asarray(_decode_f32_out(q[:, -1], kw, vw, jnp.asarray(lens, jnp.int32), p))
        name = f"decode attention, NVFP4 kv_words, lengths {lens.min()}..{lens.max()}, P {p}"
        out.append((name, _rel(o, want_n)))
        out.append((name + ", worst sequence", max(_rel(o[b], want_n[b]) for b in range(B))))
    return out


def main() -> int:
    print("backend", jax.default_backend(), jax.devices()[0].device_kind)
    for shape in SHAPES[:1] if "--tiny" in sys.argv else SHAPES:
        for name, err in measure(*shape):
            print("B{} T{} H{} K{} D{}".format(*shape), f" {name:70s} relerr vs float64 {err:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
