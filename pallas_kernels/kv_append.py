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
cache (measured in bench_attention.py; a Pallas kernel would only add a launch).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from trace_jax.checks import check_per_sequence
from trace_jax.quant import QTensor, quantize


def _update_rows(buf_BHSX, upd_BHTX, pos_B):
    def one(b, u, p):
        return jax.lax.dynamic_update_slice(b, u.astype(b.dtype), (0, p, 0))

    return jax.vmap(one)(buf_BHSX, upd_BHTX, pos_B)


def _check_rows(cache, new, positions):
    """ValueError unless ``new`` [B, H, T, D] and ``positions`` [B] fit the cache (logical
    [B, H, S, D]); concrete positions must also keep 0 <= position and position + T <= S."""
    shape = tuple(cache.shape)  # (a QTensor's shape is the logical one in either layout)
    b, h, s, d = shape
    if new.ndim != 4 or (new.shape[0], new.shape[1], new.shape[3]) != (b, h, d) or new.shape[2] > s:
        raise ValueError(f"new rows {tuple(new.shape)} do not fit the cache {shape}: "
                         f"need [{b}, {h}, T <= {s}, {d}]")
    t = new.shape[2]
    check_per_sequence("positions", positions, b, 0, s - t, f"{t} new rows in {s} cache rows")


def append_kv_reference(cache, new, positions):
    """Pure-JAX append (also what :func:`append_kv` runs on every backend)."""
    _check_rows(cache, new, positions)
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
