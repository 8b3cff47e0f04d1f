"""The model's heavy operations behind one interface each: the pure-JAX reference everywhere, the
Pallas kernels from ``pallas_kernels`` on GPU where they exist.

* :func:`grouped_matmul` -- tokens sorted by expert times per-expert weights (bf16: ``ragged_dot``,
  on GPU the Pallas bf16 grouped kernel whose backward is grouped kernels too -- XLA's GPU
  gradient of ``ragged_dot`` expands to dense [E, M, K] masked products; packed FP4 QTensors
  and the QAT trainer's :class:`ScaledExperts`: exact ``code * block scale`` bf16 values through
  the same bf16 products, the global scale on the f32 accumulator; FP4 weights in the Pallas
  kernel layout: the Pallas FP4 grouped matmul on GPU, its pure-JAX reference elsewhere).
* :func:`grouped_swiglu` -- the MoE gate / up stage, ``silu(x gate) * (x up)`` (FP4 weights in
  the Mosaic GPU layout: one fused kernel on GPU).
* :func:`decode_attention` -- one query token per sequence against a bf16 or FP4 KV cache.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from trace_jax import quant as Q
from trace_jax.checks import check_group_sizes, check_per_sequence


@functools.cache
def _on_gpu() -> bool:
    return jax.default_backend() == "gpu"


def _kernel(module: str, name: str):
    """The kernel function if its module imports and we are on GPU, else None."""
    if not _on_gpu():
        return None
    try:
        mod = __import__(f"pallas_kernels.{module}", fromlist=[name])
    except ImportError:
        return None
    return getattr(mod, name, None)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ScaledExperts:
    """FP4 expert weights as the FP4 kernels multiply them: ``values`` [E, K, N], each weight's
    exact ``code * block scale`` (bf16 holds it exactly), and ``global_scale`` f32 [E], which
    multiplies expert e's f32 accumulator before the one rounding of the product. The QAT
    trainer (``SiteIO.weight``: ``values`` straight-through in the masters) and the rollout's
    packed QTensors use it, so trainer, rollout and kernels round the same products. (Rounding
    ``code * block scale * global scale`` to bf16 instead left the tiny checkpoint's vanilla QAT
    at kl_k3 2.0e-3 against the FP4 kernels' reference on the CPU, session 32.)"""

    values: jax.Array
    global_scale: jax.Array

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    @classmethod
    def from_qtensor(cls, q: Q.QTensor, dtype=jnp.float32) -> "ScaledExperts":
        """Packed [E, K, N] weights quantized along K, as values in ``dtype`` (exact in bf16)."""
        ones = dataclasses.replace(q, global_scale=jnp.ones_like(q.global_scale))
        e = q.shape[0]  # a per-tensor scale broadcasts to every expert
        g = jnp.broadcast_to(q.global_scale.astype(jnp.float32), (e, 1, 1)).reshape(e)
        return cls(Q.dequantize(ones, dtype), g)


def grouped_matmul(x_MxK: jax.Array, w, group_sizes_E: jax.Array) -> jax.Array:
    """``out[i] = x[i] @ w[e(i)]`` for rows sorted by expert (``group_sizes`` rows per expert;
    rows past the sum are zero). ``w`` is an [E, K, N] array, FP4 weights (packed QTensors or
    kernel layout) or :class:`ScaledExperts`. Computes in ``x``'s dtype with FP32 accumulation
    (FP4 weights: their global scale on the accumulator)."""
    check_group_sizes(group_sizes_E, x_MxK.shape[0])
    dt = x_MxK.dtype
    if isinstance(w, Q.QTensor):
        w = ScaledExperts.from_qtensor(w, dt)
    if isinstance(w, ScaledExperts):
        from pallas_kernels import fp4_matmul as FM

        gs = group_sizes_E.astype(jnp.int32)
        if _on_gpu() and dt == jnp.bfloat16:  # the Pallas bf16 grouped kernel, scale in-kernel
            return FM.bf16_grouped_matmul(x_MxK, w.values.astype(dt), gs,
                                          expert_scale=w.global_scale)
        out = jax.lax.ragged_dot(x_MxK, w.values.astype(dt), gs,
                                 preferred_element_type=jnp.float32)
        return (out * FM.expert_rows(jax.lax.stop_gradient(w.global_scale), gs,
                                     out.shape[0])).astype(dt)
    if not isinstance(w, jax.Array):  # FP4 weights in kernel layout (pack_params)
        from pallas_kernels.fp4_matmul import fp4_grouped_matmul  # its reference off the GPU

        return fp4_grouped_matmul(x_MxK, w, group_sizes_E.astype(jnp.int32)).astype(dt)
    if _on_gpu() and dt == jnp.bfloat16 and w.ndim == 3:
        from pallas_kernels import fp4_matmul as FM

        # Pallas grouped kernel with a grouped-kernel backward (ragged_dot where it cannot tile)
        return FM.bf16_grouped_matmul(x_MxK, w.astype(dt), group_sizes_E)
    out = jax.lax.ragged_dot(x_MxK, w.astype(dt), group_sizes_E.astype(jnp.int32),
                             preferred_element_type=jnp.float32)
    return out.astype(dt)


def grouped_swiglu(x_MxK: jax.Array, w_gate, w_up, group_sizes_E: jax.Array) -> jax.Array:
    """``silu(x @ w_gate[e]) * (x @ w_up[e])`` for rows sorted by expert, in ``x``'s dtype: the
    two products rounded to ``x``'s dtype, the SwiGLU in f32. FP4 weights in kernel layout
    (``pack_params``) with a bf16 ``x`` go to ``fp4_matmul.fp4_grouped_swiglu`` (one fused
    kernel for Mosaic GPU weights); otherwise two :func:`grouped_matmul` calls."""
    if (not isinstance(w_gate, (jax.Array, Q.QTensor, ScaledExperts))
            and x_MxK.dtype == jnp.bfloat16):
        from pallas_kernels.fp4_matmul import fp4_grouped_swiglu  # its reference off the GPU

        return fp4_grouped_swiglu(x_MxK, w_gate, w_up, group_sizes_E.astype(jnp.int32))
    g = grouped_matmul(x_MxK, w_gate, group_sizes_E).astype(jnp.float32)
    u = grouped_matmul(x_MxK, w_up, group_sizes_E).astype(jnp.float32)
    return (jax.nn.silu(g) * u).astype(x_MxK.dtype)


# P's precision in the decode attention's P.V (``decode_attention``'s ``p_precision``; the model
# passes ``Numerics.attention_p``, set from ``rollout.attention_p_precision``): "f32" (the GPU
# kernel splits P into two bf16 terms, two MMAs: 8e-7 relative error at 128K against float64)
# or "bf16" (P rounded once to bf16, one MMA: 5e-4). On the GPU the kernel takes it as its
# ``precision``; the CPU reference rounds its unnormalised P to bf16 too, so CPU runs show a
# rounding of the same size (not the kernel's bits). H200, v6 kernel, device time
# (NOTES_attention): "bf16" makes the NVFP4 call 13-15% faster at 32K+ and the 4-layer 30B FP4
# step 9.0-9.5% faster (session 29), the MXFP4 call 10% faster at its own knobs (session 30b).
# The trainer's attention (``attention.causal_attention``) rounds P the same way, so on the CPU
# rollout and trainer agree under either (up to rare f32 summation-order differences); "f32" stays the default (the kernel's
# bf16 P rounds relative to a running max per block and split, which the trainer cannot replay
# bit for bit). (The opt-in Mosaic kernel over the "mgpu" cache layout,
# :func:`decode_attention_mgpu`, keeps its own two P terms.)
P_PRECISIONS = ("f32", "bf16")


def check_p_precision(p: str, name: str = "p_precision") -> str:
    """``p`` if it is one of :data:`P_PRECISIONS`, else a ValueError naming ``name``."""
    if p not in P_PRECISIONS:
        raise ValueError(f"{name}={p!r}: use one of {P_PRECISIONS}")
    return p


def decode_attention(q_BxHxD, k_cache, v_cache, lengths_B, *, p_precision="f32") -> jax.Array:
    """Attention of one query token per sequence over cache slots ``< lengths[b]``, with P.V at
    ``p_precision`` (:data:`P_PRECISIONS`).

    Caches are ``[B, Hkv, S, D]`` bf16 arrays or FP4 QTensors (see ``trace_jax.attention``)."""
    check_p_precision(p_precision)
    fn = _kernel("decode_attention", "decode_attention")
    if fn is not None:
        return fn(q_BxHxD, k_cache, v_cache, lengths_B, precision=p_precision)
    return decode_attention_reference(q_BxHxD, k_cache, v_cache, lengths_B,
                                      p_precision=p_precision)


def decode_attention_mgpu(q_BxHxD, cache, lengths_B) -> jax.Array:
    """:func:`decode_attention` over an NVFP4 cache in the ``"mgpu"`` layout
    (``pallas_kernels.mgpu_kv_layout.MgpuKV``): the Mosaic GPU kernel on a GPU, the reference
    over the natural caches elsewhere (the same reference as the other layouts')."""
    fn = _kernel("attention_mgpu", "decode_attention_mgpu")
    if fn is not None:
        return fn(q_BxHxD, cache, lengths_B)
    from pallas_kernels.mgpu_kv_layout import from_mgpu_kv

    return decode_attention_reference(q_BxHxD, *from_mgpu_kv(cache), lengths_B)


def decode_attention_reference(q_BxHxD, k_cache, v_cache, lengths_B, *, sm_scale=None,
                               p_precision="f32") -> jax.Array:
    """Float32 masked-softmax attention over the dequantized cache, in ``q``'s dtype; slots
    ``>= lengths[b]`` may hold anything (NaN included). ``sm_scale`` defaults to 1/sqrt(D).
    FP4 caches may be in either QTensor layout (natural, or init_cache's "kv_words").
    ``p_precision="bf16"``: the unnormalised weights exp(s - max) are rounded to bf16 before
    P.V (their f32 sum normalises): a rounding of the size the GPU kernel's one-MMA P.V makes,
    not its bits (the kernel rounds relative to a running max per block and split)."""

    check_p_precision(p_precision)

    def values(c):
        if not isinstance(c, Q.QTensor):
            return c.astype(jnp.float32)
        if c.layout != "natural":
            from pallas_kernels.kv_layout import to_natural

            c = to_natural(c)
        return Q.dequantize(c)

    k, v = values(k_cache), values(v_cache)
    B, H, D = q_BxHxD.shape
    K, S = k.shape[1], k.shape[2]
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"caches K {k.shape} / V {v.shape} do not fit q {q_BxHxD.shape}: "
                         f"both need [B, KV heads, S, D] with B = {B}, D = {D}")
    check_per_sequence("lengths", lengths_B, B, 1, S, "the cache's rows")
    if H % K:
        raise ValueError(f"{H} query heads are not a multiple of {K} kv heads")
    scale = 1.0 / jnp.sqrt(jnp.float32(D)) if sm_scale is None else jnp.float32(sm_scale)
    hi = jax.lax.Precision.HIGHEST
    qg = q_BxHxD.reshape(B, K, H // K, D).astype(jnp.float32)
    s = jnp.einsum("bkgd,bksd->bkgs", qg, k, precision=hi) * scale
    valid = jnp.arange(S)[None, :] < lengths_B[:, None]  # B,S
    s = jnp.where(valid[:, None, None, :], s, -jnp.inf)
    v = jnp.where(valid[:, None, :, None], v, 0.0)  # unwritten slots may hold anything
    o = softmax_pv(s, v, "bkgs,bksd->bkgd", p_precision)
    return o.reshape(B, H, D).astype(q_BxHxD.dtype)


def softmax_pv(s, v, spec: str, p_precision: str) -> jax.Array:
    """``softmax(s) . v`` over s's last axis (``spec``: the P.V einsum, its output led by s's
    other axes), f32 at ``Precision.HIGHEST``; ``p_precision="bf16"``: the unnormalised weights
    exp(s - max) rounded to bf16, their f32 sum normalising. The decode reference and the
    trainer's ``attention.causal_attention`` both call it, so they round P alike."""
    hi = jax.lax.Precision.HIGHEST
    if check_p_precision(p_precision) == "bf16":
        e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        w = e.astype(jnp.bfloat16).astype(jnp.float32)
        return jnp.einsum(spec, w, v, precision=hi) / jnp.sum(e, axis=-1)[..., None]
    return jnp.einsum(spec, jax.nn.softmax(s, axis=-1), v, precision=hi)
