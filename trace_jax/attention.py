"""Grouped-query attention with RoPE and per-head q/k RMSNorm, over a BF16 or FP4 KV cache.

KV cache layout (one entry per layer): ``{"k": K, "v": V}`` where each is the logical tensor
``[B, Hkv, S, Dh]`` (batch, KV head, cache slot, head dim), either a bf16 array or a packed FP4
:class:`~trace_jax.quant.QTensor` quantized along ``Dh`` with a per-row global scale (so one
token's row is quantized independently of every other row and appending is exact). FP4 K
and V caches keep their code bits in the decode kernel's word layout (``QTensor.layout ==
"kv_words"``, :mod:`pallas_kernels.kv_layout`: 8 integer ops per 8 codes instead of 14), or,
with ``FP4_CACHE_LAYOUT = "mgpu"`` (NVFP4), one ``{"kv": MgpuKV}`` per layer
(:mod:`pallas_kernels.mgpu_kv_layout`: K and V^T for the Mosaic GPU kernel); every site QTensor
(and so every hint) is natural. Sequences are
right-padded: slot ``j`` of sequence ``b`` is valid iff ``j < lengths[b]``; decode writes the new
token at slot ``lengths[b]``.

Letters: B batch, T tokens, S cache slots, H query heads, K kv heads, D head dim, M model dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from trace_jax import ops
from trace_jax import quant as Q


def rms_norm(x, scale, eps):
    """RMSNorm in f32 with ``scale`` taken in ``x``'s dtype, as every other weight is (the
    rollout's synced copy holds it in bf16; an f32 master scale in the trainer made its norms,
    and so its FP4 codes, differ from the rollout's: session 31)."""
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    scale = scale.astype(x.dtype).astype(jnp.float32).reshape((1,) * (x.ndim - 1) + (-1,))
    return (y * scale).astype(x.dtype)


def rope(x_BxTxHxD, positions_BxT, theta: float):
    """Rotary embedding, rotate-half convention (as Hugging Face Qwen3)."""
    d = x_BxTxHxD.shape[-1]
    inv_freq = 1.0 / (theta ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    ang = positions_BxT.astype(jnp.float32)[..., None] * inv_freq[None, None, :]  # B,T,D/2
    cos = jnp.concatenate([jnp.cos(ang)] * 2, axis=-1)[:, :, None, :]
    sin = jnp.concatenate([jnp.sin(ang)] * 2, axis=-1)[:, :, None, :]
    xf = x_BxTxHxD.astype(jnp.float32)
    x1, x2 = xf[..., : d // 2], xf[..., d // 2 :]
    rot = jnp.concatenate([-x2, x1], axis=-1)
    # Both products rounded to f32 before the add: left to itself XLA contracts the sum into an
    # FMA with one product or the other depending on the program (the trainer's forward fused
    # fma(x, cos, rot * sin), the rollout's decode loop fma(rot, sin, x * cos)), and the two
    # then round ~1e-5 of the elements apart (session 37, experiments/locate_rollout_mismatch.py).
    a, b = jax.lax.optimization_barrier((xf * cos, rot * sin))
    return (a + b).astype(x_BxTxHxD.dtype)


def init_cache(cfg, numerics, batch: int, slots: int):
    """An empty cache (a tuple with one dict per layer): FP4 where the numerics quantize the KV
    site, else in the activation dtype; ``{"k", "v"}``, or ``{"kv": MgpuKV}`` (with at least
    ``slots`` slots, rounded up to 64) for the ``"mgpu"`` layout."""
    if FP4_CACHE_LAYOUT not in CACHE_LAYOUTS:
        raise ValueError(f"attention.FP4_CACHE_LAYOUT {FP4_CACHE_LAYOUT!r}: expected one of "
                         f"{CACHE_LAYOUTS}")
    shape = (batch, cfg.n_kv_heads, slots, cfg.head_dim)
    caches = []
    for layer in range(cfg.n_layers):
        if numerics.quantizes(f"layers/{layer}/attn/kv") and FP4_CACHE_LAYOUT == "mgpu":
            if numerics.fmt != "nvfp4":
                raise ValueError(f"the 'mgpu' KV cache layout holds NVFP4 caches; the numerics "
                                 f"quantize to {numerics.fmt}")
            if cfg.head_dim % 64:
                raise ValueError(f"the 'mgpu' KV cache layout needs head_dim % 64 == 0, got "
                                 f"{cfg.head_dim}")
            if numerics.attention_p != "f32":  # its kernel keeps P in f32; the trainer would not
                raise ValueError(f"the 'mgpu' KV cache layout computes P in f32; the numerics ask "
                                 f"for attention_p={numerics.attention_p!r}")
            from pallas_kernels.mgpu_kv_layout import empty_mgpu_kv

            caches.append({"kv": empty_mgpu_kv(batch, cfg.n_kv_heads, -(-slots // 64) * 64,
                                               cfg.head_dim)})
            continue
        if numerics.quantizes(f"layers/{layer}/attn/kv"):
            make = lambda layout: empty_fp4(shape, numerics.fmt, layout)  # noqa: E731
        else:
            make = lambda layout: jnp.zeros(shape, jnp.dtype(cfg.dtype))  # noqa: E731
        # distinct buffers (both are donated)
        caches.append({"k": make(FP4_CACHE_LAYOUT), "v": make(FP4_CACHE_LAYOUT)})
    return tuple(caches)


# FP4 KV caches' code layout: "kv_words" (pallas_kernels.kv_layout.LAYOUT; the Triton decode
# kernel's fast path), "natural" (benchmarks of the older kernel versions) or "mgpu" (NVFP4 only:
# pallas_kernels.mgpu_kv_layout, read by the Mosaic GPU kernel attention_mgpu; session 18: faster
# than Triton v6 at 8 x 128K and 32 x 8K, slower at 32K with 32+ sequences); read by init_cache
FP4_CACHE_LAYOUT = "kv_words"
CACHE_LAYOUTS = ("kv_words", "natural", "mgpu")


def empty_fp4(shape, fmt, layout="natural") -> Q.QTensor:
    """An all-zero FP4 cache tensor of logical ``shape`` (per-row global scales for NVFP4; zero
    codes are the same bits in every layout)."""
    f = Q.get_format(fmt)
    lead, d = tuple(shape[:-1]), shape[-1]
    g_shape = lead + (1,) if f.has_global_scale else (1,) * len(shape)
    return Q.QTensor(
        codes=jnp.zeros(lead + (d // 2,), jnp.uint8),
        # zero bytes (a float 0 has no E8M0 encoding: it would become NaN)
        scales=jax.lax.bitcast_convert_type(jnp.zeros(lead + (d // f.block_size,), jnp.uint8),
                                            f.scale_dtype),
        global_scale=jnp.ones(g_shape, jnp.float32),
        fmt=f.name,
        axis=-1,
        layout=layout,
    )


def _to_bhsd(a):
    return jnp.swapaxes(a, 1, 2)  # [B, T, K, X] -> [B, K, T, X]


def write_cache(cache_x, new_BxTxKxX, start_B):
    """Write rows for T new tokens at slots start[b]..start[b]+T-1 (bf16 array or QTensor)."""
    def put(buf, new):
        if buf.size == 1:  # MXFP4's constant global scale: nothing per row
            return buf
        new = _to_bhsd(new).astype(buf.dtype)
        return jax.vmap(lambda b, n, s: jax.lax.dynamic_update_slice_in_dim(b, n, s, axis=1))(
            buf, new, start_B)

    if isinstance(cache_x, Q.QTensor):
        if cache_x.layout != new_BxTxKxX.layout:  # a site QTensor into the cache's layout
            from pallas_kernels.kv_layout import to_kv_words

            new_BxTxKxX = to_kv_words(new_BxTxKxX)
        return jax.tree.map(put, cache_x, new_BxTxKxX)
    return put(cache_x, new_BxTxKxX)


def attention_block(p, x_BxTxM, positions_BxT, *, cfg, sio, layer, cache=None):
    """Self-attention sublayer (without the residual). With ``cache`` and T == 1 this is a decode
    step: the token is appended at slot positions[b] and attends over the cache; with ``cache`` and
    T > 1 it is a prefill into an empty cache; without, plain causal attention (training)."""
    B, T, _ = x_BxTxM.shape
    H, K, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    dt = x_BxTxM.dtype
    q = (x_BxTxM @ p["wq"].astype(dt)).reshape(B, T, H, D)
    k = (x_BxTxM @ p["wk"].astype(dt)).reshape(B, T, K, D)
    v = (x_BxTxM @ p["wv"].astype(dt)).reshape(B, T, K, D)
    q = rope(rms_norm(q, p["q_norm"], cfg.norm_eps), positions_BxT, cfg.rope_theta)
    k = rope(rms_norm(k, p["k_norm"], cfg.norm_eps), positions_BxT, cfg.rope_theta)

    # FP4 K/V continue as exact f32 values (code * block scale * row scale, which bf16 cannot
    # hold): the values the decode kernel reads from the cache, so the trainer's and the
    # prefill's attention see the same K/V as every decode step (as bf16 they made TRACE's
    # rollout / trainer kl_k3 3.2x larger on the tiny run, CPU; NOTES_attention session 31)
    kv_BxTx2xKxD, q_kv = sio.activation(f"layers/{layer}/attn/kv", jnp.stack([k, v], axis=2),
                                        values_dtype=jnp.float32)
    k, v = kv_BxTx2xKxD[:, :, 0], kv_BxTx2xKxD[:, :, 1]

    new_cache = None
    if cache is not None and "kv" in cache:  # the "mgpu" layout: NVFP4 K and V^T in one
        from pallas_kernels.mgpu_kv_layout import write_rows

        if q_kv is None:
            raise ValueError(f"layer {layer}: an 'mgpu' (NVFP4) KV cache, but these numerics do "
                             "not quantize the KV site (a cache built under other numerics?)")
        start = positions_BxT[:, 0]
        rows = lambda i: jax.tree.map(lambda a: _to_bhsd(a[:, :, i]), q_kv)  # noqa: E731
        new_cache = {"kv": write_rows(cache["kv"], rows(0), rows(1), start)}
    elif cache is not None:
        start = positions_BxT[:, 0]
        if q_kv is not None:
            if q_kv.layout != cache["k"].layout == cache["v"].layout:  # one permutation, not two
                from pallas_kernels.kv_layout import to_kv_words

                q_kv = to_kv_words(q_kv)
            new_k = jax.tree.map(lambda a: a[:, :, 0], q_kv)
            new_v = jax.tree.map(lambda a: a[:, :, 1], q_kv)
        else:
            new_k, new_v = k, v
        new_cache = {"k": write_cache(cache["k"], new_k, start),
                     "v": write_cache(cache["v"], new_v, start)}
    if cache is not None and T == 1:
        o = (ops.decode_attention_mgpu(q[:, 0], new_cache["kv"], start + 1) if "kv" in new_cache
             else ops.decode_attention(q[:, 0], new_cache["k"], new_cache["v"], start + 1,
                                       p_precision=sio.numerics.attention_p))[:, None]
    else:
        o = causal_attention(q, k, v, sio.numerics.attention_p)
    out = o.reshape(B, T, H * D).astype(dt) @ p["wo"].astype(dt)
    return out, new_cache


def causal_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, p_precision: str = "f32"):
    """Causal GQA attention in float32 at ``Precision.HIGHEST`` (query head h uses kv head
    h // (H // K)), in ``q``'s dtype: the decode reference's arithmetic
    (``ops.decode_attention_reference``), row for row. ``p_precision="bf16"`` rounds the
    unnormalised weights exp(s - max) to bf16 before P.V, as the rollout's decode attention
    does under ``Numerics.attention_p="bf16"`` (their f32 sum normalises)."""
    B, T, H, D = q_BxTxHxD.shape
    K = k_BxTxKxD.shape[2]
    hi = jax.lax.Precision.HIGHEST
    qg = q_BxTxHxD.reshape(B, T, K, H // K, D).astype(jnp.float32)
    s = jnp.einsum("btkgd,bskd->bkgts", qg, k_BxTxKxD.astype(jnp.float32), precision=hi)
    s = s * (1.0 / jnp.sqrt(jnp.float32(D)))
    mask = jnp.tril(jnp.ones((T, T), bool))[None, None, None]
    s = jnp.where(mask, s, -jnp.inf)
    o = ops.softmax_pv(s, v_BxTxKxD.astype(jnp.float32), "bkgts,bskd->bkgtd", p_precision)
    return jnp.moveaxis(o, 3, 1).reshape(B, T, H, D).astype(q_BxTxHxD.dtype)  # B,T,K,G,D
