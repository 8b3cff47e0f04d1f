"""Append new K/V rows to a decode cache (bf16 array or FP4 QTensor), in place when donated.

    append_kv(cache, new_BxHxTxD, positions_B) -> cache

Writes ``new`` at rows ``positions[b] .. positions[b] + T - 1`` of sequence ``b``. For an FP4
cache the new rows are quantized first with the cache layout (``quantize(new, fmt, axis=-1,
global_scope="row")``: every row independently), so appending row by row gives exactly the codes,
scales and global scales of quantizing the whole tensor at once. Rows past the end are not
supported (``dynamic_update_slice`` clamps the start so the T rows fit: keep
``positions + T <= S``).

Implementation: one vmapped ``lax.dynamic_update_slice`` per buffer (XLA). Under ``jit`` with the
cache donated, XLA updates the buffers in place: the cost is the new rows only, not a copy of the
cache (measured in bench_attention.py). In the decode step that is one small scatter kernel per
buffer, six for NVFP4 K and V: :func:`append_rows_pallas` writes already-quantized rows into all
of them in one launch (session 16; the model's FP4 decode path on one GPU).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from trace_jax.quant import QTensor, get_format, quantize


def _update_rows(buf_BHSX, upd_BHTX, pos_B):
    def one(b, u, p):
        return jax.lax.dynamic_update_slice(b, u.astype(b.dtype), (0, p, 0))

    return jax.vmap(one)(buf_BHSX, upd_BHTX, pos_B)


def append_kv_reference(cache, new, positions):
    """Pure-JAX append (also what :func:`append_kv` runs on every backend)."""
    positions = jnp.asarray(positions, jnp.int32)
    if isinstance(cache, QTensor):
        if cache.axis != -1:
            raise ValueError("FP4 KV caches are quantized along the last (head_dim) axis")
        qn = quantize(new, cache.fmt, axis=-1, global_scope="row")
        if cache.layout != "natural":  # the kv_words layout (pallas_kernels.kv_layout)
            from pallas_kernels.kv_layout import to_kv_words

            qn = to_kv_words(qn)
        codes = _update_rows(cache.codes, qn.codes, positions)
        scales = _update_rows(cache.scales, qn.scales, positions)
        gs = cache.global_scale
        if gs.shape[2] == cache.codes.shape[2] and gs.shape[2] > 1:  # per-row (nvfp4)
            gs = _update_rows(gs, qn.global_scale, positions)
        return QTensor(codes, scales, gs, cache.fmt, cache.axis, cache.layout)
    return _update_rows(cache, new, positions)


def _per_row_scale(q: QTensor) -> bool:  # NVFP4 caches: a global scale per row
    return get_format(q.fmt).has_global_scale


def _buffers(q: QTensor):
    """A cache QTensor's per-row buffers as (codes, scale bytes[, per-row global scales])."""
    out = [q.codes, jax.lax.bitcast_convert_type(q.scales, jnp.uint8)]
    return out + [q.global_scale] if _per_row_scale(q) else out


def _rows_kernel(pos_ref, *refs, n, s_max):
    new_refs, out_refs = refs[:n], refs[2 * n:]  # (refs[n:2n]: the aliased cache inputs)
    row = pl.ds(jnp.clip(pos_ref[0], 0, s_max - 1), 1)  # dynamic_update_slice's clamp
    for src, dst in zip(new_refs, out_refs):
        dst[row, :] = src[...]


def append_rows_pallas(caches, news, positions, *, interpret=False):
    """One decode token per sequence into several FP4 caches at once: every buffer of every
    ``caches[i]`` (QTensor [B, H, S, X], codes / scales / per-row global scales) gets row
    ``positions[b]`` of sequence ``b`` from ``news[i]`` ([B, H, 1, X], same format and layout),
    in place (the caches are aliased to the outputs: donate them under jit). One Pallas (Triton)
    launch with a program per (sequence, head) for all of them, where the XLA path
    (:func:`append_kv_reference`) runs one scatter per buffer (six for NVFP4 K and V). Returns
    the updated caches; equal to ``append_kv_reference`` with the new rows already quantized."""
    bufs, new_bufs = [], []
    for c, q in zip(caches, news):
        if (c.fmt, c.layout) != (q.fmt, q.layout) or q.codes.shape[2] != 1:
            raise ValueError(f"new rows must be one token in the cache's format and layout: "
                             f"cache {(c.fmt, c.layout)}, new {(q.fmt, q.layout)} "
                             f"{q.codes.shape}")
        bufs += _buffers(c)
        new_bufs += _buffers(q)
    b, h, s_max, _ = caches[0].codes.shape
    n = len(bufs)
    spec = lambda a, rows: pl.BlockSpec((None, None, rows, a.shape[-1]),  # noqa: E731
                                        lambda i, j: (i, j, 0, 0))
    out = pl.pallas_call(
        functools.partial(_rows_kernel, n=n, s_max=s_max),
        grid=(b, h),
        in_specs=[pl.BlockSpec((1,), lambda i, j: (i,))] + [spec(a, 1) for a in new_bufs]
        + [spec(a, s_max) for a in bufs],
        out_specs=[spec(a, s_max) for a in bufs],
        out_shape=[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in bufs],
        input_output_aliases={1 + n + i: i for i in range(n)},
        compiler_params=plgpu.CompilerParams(num_warps=1),
        interpret=interpret,
        name="append_kv_rows",
    )(positions.astype(jnp.int32), *new_bufs, *bufs)
    res, k = [], 0
    for c in caches:
        m = len(_buffers(c))
        codes, sbytes, *gs = out[k:k + m]
        k += m
        scales = jax.lax.bitcast_convert_type(sbytes, c.scales.dtype)
        res.append(dataclasses.replace(c, codes=codes, scales=scales,
                                       global_scale=gs[0] if gs else c.global_scale))
    return tuple(res)


def rows_kernel_fits(q: QTensor) -> bool:
    """Whether :func:`append_rows_pallas` tiles this cache (Triton rows: powers of two)."""
    return all(a.shape[-1] & (a.shape[-1] - 1) == 0 for a in _buffers(q))


def append_kv(cache, new, positions, *, backend="auto"):
    """See the module docstring. ``backend`` is accepted for symmetry; only XLA is implemented
    because it already runs at the cost of the written rows."""
    if backend not in ("auto", "reference", "xla"):
        raise ValueError(f"unknown backend {backend!r}")
    return append_kv_reference(cache, new, positions)


def empty_cache(shape_BHSD, fmt="bf16", layout="natural"):
    """A zero cache of logical shape [B, H, S, D]: bf16 array or FP4 QTensor with the layout above
    (``layout="kv_words"``: the v5 attention's K layout; all-zero codes are the same bits)."""
    b, h, s, d = shape_BHSD
    if fmt == "bf16":
        return jnp.zeros(shape_BHSD, jnp.bfloat16)
    q = quantize(jnp.zeros(shape_BHSD, jnp.float32), fmt, axis=-1, global_scope="row")
    return dataclasses.replace(q, layout=layout)
