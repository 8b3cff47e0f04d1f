"""Decode attention (one new token per sequence) over a bf16 or FP4 KV cache.

    decode_attention(q_BxQxD, k_cache, v_cache, lengths_B, *, sm_scale=None, backend="auto")
        -> [B, Q, D] bf16

Letters: B batch, Q query heads, H kv heads (GQA: query head q reads kv head q // (Q // H)),
S max cache length, D head_dim.

Caches: bf16 arrays [B, H, S, D], or FP4 :class:`trace_jax.quant.QTensor` of that tensor with
``axis=-1`` (nvfp4 with a per-row global scale [B, H, S, 1]; mxfp4 with global scale ones), with
their codes in the natural layout or in ``pallas_kernels.kv_layout``'s ``kv_words`` order. Positions ``>= lengths[b]`` are masked (whatever they hold, NaN included). Softmax and
accumulation are f32. ``lengths`` must be >= 1.

Backends: ``"reference"`` (pure JAX, f32: dequantize the cache then masked softmax attention; the
CPU fallback), ``"triton"`` (Pallas Triton split-K kernel, :mod:`pallas_kernels.attention_triton`;
``interpret=True`` on CPU), ``"auto"``: reference on CPU, triton on GPU (the fastest measured,
see NOTES_attention.md).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from trace_jax import ops
from trace_jax.checks import check_per_sequence


def decode_attention_reference(q, k_cache, v_cache, lengths, *, sm_scale=None, backend="auto",
                               precision="f32"):
    """Pure-JAX f32 reference (and CPU fallback): ``trace_jax.ops``' reference, [B, Q, D] bf16;
    ``precision="bf16"``: P rounded to bf16 before P.V (``ops.decode_attention_reference``)."""
    del backend
    return ops.decode_attention_reference(q, k_cache, v_cache, jnp.asarray(lengths, jnp.int32),
                                          sm_scale=sm_scale,
                                          p_precision=precision).astype(jnp.bfloat16)


def decode_attention(q, k_cache, v_cache, lengths, *, sm_scale=None, backend="auto", **kw):
    """Attention of one new query token per sequence over the cache; see the module docstring.

    Extra keyword arguments tune the triton kernel: block_k, num_splits, split_target,
    num_warps, num_stages, precision ("f32": P @ V with P split into two bf16 terms, default;
    "bf16": P rounded to bf16), decode (default: "v6" for K and V caches in the
    ``pallas_kernels.kv_layout`` word layout, which ``trace_jax.attention.init_cache`` makes,
    1.06-1.09x v4 for NVFP4 on the H200; "v5" for only K in it; else "v4" when head_dim % 8 == 0,
    else "v3"; "v4": v3 reading the V codes as 32-bit words, 1.36-1.51x v3 from 32K up; "v3": inline-PTX
    FP4 decode with transposed MMAs, the query heads on the MMA's N side), chains (v3/v4: independent row chunks per iteration). Tiling defaults
    measured on the H200 (``attention_triton.tuned_knobs``, NOTES_attention.md): bf16 cache
    block_k=128, 8 warps; v4 / v6 NVFP4 block_k=32, 1 warp, 3 stages; v4 MXFP4 block_k=64, 2 warps
    (session 5's sweep; partly within run-to-run noise); v6 MXFP4 block_k=32, 1 warp, 2 stages
    (sessions 30b and 38).
    """
    d = q.shape[-1]
    sm_scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    on_cpu = jax.default_backend() == "cpu"
    if backend == "auto":
        backend = "reference" if on_cpu else "triton"
    if backend == "reference":  # (of the kernel's knobs only P's precision applies)
        return decode_attention_reference(q, k_cache, v_cache, lengths, sm_scale=sm_scale,
                                          precision=kw.get("precision", "f32"))
    if backend == "triton":
        from pallas_kernels.attention_triton import decode_attention_triton

        # (here: inside the jitted kernel wrapper lengths are traced, their values unchecked)
        check_per_sequence("lengths", lengths, q.shape[0], 1, k_cache.shape[2], "the cache's rows")
        return decode_attention_triton(q, k_cache, v_cache, lengths, sm_scale=sm_scale,
                                       interpret=on_cpu, **kw)
    raise ValueError(f"unknown backend {backend!r}; expected auto, reference or triton")
