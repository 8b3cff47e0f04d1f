"""Fused activation quantize + mantissa-hint capture: one pass over x [M, K] (block axis -1).

    quantize_with_hint(x, fmt="nvfp4", *, global_scope="row", with_hint=True, backend="auto")
        -> (QTensor, Hint | None)

Bit-identical to ``q = trace_jax.quant.quantize(x, fmt, axis=-1, global_scope=global_scope)`` and
``extract_hint(q)`` (codes, block scales, global scale and packed mantissa bits), NaN/Inf
behaviour included. How the kernel keeps that on the GPU:

* every division (``g = amax / 2688``, ``amax_b / (6 g)``, ``z = x / (s g)``) is the IEEE
  correctly rounded ``div.rn.f32`` (inline PTX): Triton's own f32 ``/`` lowers to the
  approximate ``div.full.f32``;
* maxima are taken on the integer bit patterns of ``|x|``: NaN-propagating like XLA's ``max``
  (Triton's float max ignores NaN), and exact;
* ``min(raw, 448)`` is written as a select that keeps NaN; E4M3 rounding is the hardware
  round-to-nearest-even convert; the E8M0 exponent is read from the float's exponent field.

Backends: ``"reference"`` (trace_jax.quant; the CPU fallback), ``"triton"`` (Pallas Triton,
``interpret=True`` on CPU), ``"auto"``: reference on CPU, triton on GPU.

Kernel: grid over row blocks of BM rows; the row is walked in power-of-two chunks of KC columns
(a static loop): for ``global_scope="row"`` nvfp4 a first walk takes the row amax (the second
walk reads the same rows again, from L2), the second writes codes (two per byte), scales and
hint bits (eight per byte). ``global_scope="tensor"`` computes the one global scale in XLA first.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from trace_jax import quant
from trace_jax.quant import Hint, QTensor

_ABS = 0x7FFFFFFF


def quantize_with_hint_reference(x, fmt="nvfp4", *, global_scope="row", with_hint=True,
                                 backend="auto"):
    """trace_jax.quant.quantize + extract_hint along the last axis (the CPU fallback)."""
    del backend
    q = quant.quantize(x, fmt, axis=-1, global_scope=global_scope)
    return q, (quant.extract_hint(q) if with_hint else None)


# ---------------------------------------------------------------------------------------------
# Kernel


def _div(a, b, interpret):
    """IEEE round-to-nearest f32 division (``b`` broadcast to ``a``'s shape by the caller)."""
    if interpret:
        return a / b
    [out] = plgpu.elementwise_inline_asm(
        "div.rn.f32 $0, $1, $2;", args=[a, b], constraints="=r,r,r", pack=1,
        result_shape_dtypes=[jax.ShapeDtypeStruct(a.shape, jnp.float32)])
    return out


def _absmax_last(a):
    """max |a| over the last axis, NaN-propagating and exact (integer max of the bit patterns)."""
    bits = jax.lax.bitcast_convert_type(a, jnp.uint32) & _ABS
    return jax.lax.bitcast_convert_type(jnp.max(bits, axis=-1), jnp.float32)


def _round_magnitude(a):
    """RNE E2M1 magnitude index of a >= 0 (same chain as trace_jax.e2m1.round_magnitude)."""
    one = jnp.uint32(1)
    zero = jnp.uint32(0)
    idx = jnp.where(a > 0.25, one, zero)
    for thr, ge in ((0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True),
                    (5.0, False)):
        idx = idx + jnp.where((a >= thr) if ge else (a > thr), one, zero)
    return idx


def _pack_last(v_u32, group, width):
    """Sum of v << (width * j) over groups of ``group`` along the last axis -> uint8."""
    *lead, n = v_u32.shape
    v = v_u32.reshape(*lead, n // group, group)
    sh = jax.lax.broadcasted_iota(jnp.uint32, v.shape, v.ndim - 1) * jnp.uint32(width)
    return jnp.sum(v << sh, axis=-1).astype(jnp.uint8)


def _qh_kernel(x_ref, g_ref, codes_ref, scales_ref, gs_ref, *bits_ref, fmt, bs, kc, nk,
               row_scope, interpret, division):
    bm = x_ref.shape[0]
    nvfp4 = fmt == "nvfp4"
    if nvfp4:
        if row_scope:
            amax = jnp.zeros((bm,), jnp.float32)
            for c in range(nk):
                xa = x_ref[:, pl.ds(c * kc, kc)].astype(jnp.float32)
                am_c = _absmax_last(xa)
                amax = jax.lax.bitcast_convert_type(
                    jnp.maximum(jax.lax.bitcast_convert_type(amax, jnp.uint32),
                                jax.lax.bitcast_convert_type(am_c, jnp.uint32)), jnp.float32)
            g = _div(amax, jnp.full((bm,), 2688.0, jnp.float32), interpret)
            g = jnp.where(g == 0, 1.0, g)
            gs_ref[...] = g[:, None]
        else:
            g = jnp.broadcast_to(g_ref[...].reshape(1), (bm,))
    for c in range(nk):
        x = x_ref[:, pl.ds(c * kc, kc)].astype(jnp.float32)
        nbc = kc // bs
        xb = x.reshape(bm, nbc, bs)
        amax_b = _absmax_last(xb)  # [bm, nbc]
        finite = jnp.abs(amax_b) < jnp.inf
        if nvfp4:
            g2 = jnp.broadcast_to(g[:, None], (bm, nbc))
            raw = _div(amax_b, 6.0 * g2, interpret)
            raw = jnp.where(finite, raw, jnp.nan)
            raw = jnp.where(raw > 448.0, 448.0, raw)
            s8 = raw.astype(jnp.float8_e4m3fn)
            sbyte = jax.lax.bitcast_convert_type(s8, jnp.uint8)
            eff = s8.astype(jnp.float32) * g2
        else:
            ebits = (jax.lax.bitcast_convert_type(amax_b, jnp.uint32) >> 23) & 0xFF
            e = ebits.astype(jnp.int32) - 129
            e = jnp.where(amax_b > 0, e, -127)
            e = jnp.clip(e, -127, 127)
            b32 = jnp.where(finite, e + 127, 255).astype(jnp.uint32)
            sbyte = b32.astype(jnp.uint8)
            sf = jax.lax.bitcast_convert_type(b32 << 23, jnp.float32)
            eff = jnp.where(b32 == 255, jnp.nan, sf) * 1.0
        eff3 = jnp.broadcast_to(eff[:, :, None], (bm, nbc, bs))
        safe = jnp.where(eff3 > 0, eff3, 1.0)
        if division == "ieee":
            zq = _div(xb, safe, interpret)
        else:  # "recip": x * (1 / s), what XLA's CPU fusion computes for the reference
            zq = xb * _div(jnp.ones_like(safe), safe, interpret)
        z = jnp.where(eff3 > 0, zq,
                      jnp.where(eff3 != eff3, jnp.nan, 0.0))
        zbits = jax.lax.bitcast_convert_type(z, jnp.uint32)
        mag = _round_magnitude(jax.lax.bitcast_convert_type(zbits & _ABS, jnp.float32))
        code = (mag | ((zbits >> 31) << 3)).reshape(bm, kc)
        codes_ref[:, pl.ds(c * (kc // 2), kc // 2)] = _pack_last(code, 2, 4)
        scales_ref[:, pl.ds(c * nbc, nbc)] = sbyte
        if bits_ref:
            bits_ref[0][:, pl.ds(c * (kc // 8), kc // 8)] = _pack_last(code & 1, 8, 1)


def _pow2_divisor(n, cap):
    p = 1
    while p * 2 <= cap and n % (p * 2) == 0:
        p *= 2
    return p


@functools.partial(jax.jit, static_argnames=("fmt", "global_scope", "with_hint", "block_m",
                                             "chunk_k", "num_warps", "interpret", "division"))
def quantize_with_hint_triton(x, fmt="nvfp4", *, global_scope="row", with_hint=True,
                              block_m=8, chunk_k=256, num_warps=4, interpret=False,
                              division="ieee"):
    f = quant.get_format(fmt)
    if x.ndim != 2:
        raise ValueError(f"x must be [M, K], got shape {x.shape}")
    m, k = x.shape
    bs = f.block_size
    if k % bs:
        raise ValueError(f"{fmt}: K={k} is not a multiple of the block size {bs}")
    kc = _pow2_divisor(k, chunk_k)
    if kc < bs:
        raise ValueError(f"K={k} has no power-of-two chunk >= the block size {bs}")
    nk = k // kc
    bm = _pow2_divisor(m, block_m)
    row_scope = global_scope == "row"
    if global_scope not in ("row", "tensor"):
        raise ValueError(f"global_scope must be 'row' or 'tensor', got {global_scope!r}")
    if f.has_global_scale and not row_scope:
        amax = jnp.max(jnp.abs(x.astype(jnp.float32)), keepdims=True)
        g_in = amax / (6.0 * 448.0)
        g_in = jnp.where(g_in == 0, 1.0, g_in)
    else:
        g_in = jnp.ones((1, 1), jnp.float32)
    row = lambda w: pl.BlockSpec((bm, w), lambda i: (i, 0))  # noqa: E731
    out_shape = [jax.ShapeDtypeStruct((m, k // 2), jnp.uint8),
                 jax.ShapeDtypeStruct((m, k // bs), jnp.uint8),
                 jax.ShapeDtypeStruct((m, 1), jnp.float32)]
    out_specs = [row(k // 2), row(k // bs), row(1)]
    if with_hint:
        out_shape.append(jax.ShapeDtypeStruct((m, k // 8), jnp.uint8))
        out_specs.append(row(k // 8))
    kernel = functools.partial(_qh_kernel, fmt=f.name, bs=bs, kc=kc, nk=nk,
                               row_scope=row_scope and f.has_global_scale, interpret=interpret,
                               division=division)
    outs = pl.pallas_call(
        kernel,
        grid=(m // bm,),
        in_specs=[row(k), pl.BlockSpec((1, 1), lambda i: (0, 0))],
        out_specs=out_specs,
        out_shape=out_shape,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps),
        interpret=interpret,
        name=f"quantize_with_hint_{f.name}",
    )(x, g_in)
    codes, sbytes, gs = outs[:3]
    scales = jax.lax.bitcast_convert_type(sbytes, f.scale_dtype)
    if not f.has_global_scale:
        gs = jnp.ones((1, 1), jnp.float32)
    elif not row_scope:
        gs = g_in
    q = QTensor(codes, scales, gs, f.name, -1)
    hint = Hint(outs[3], scales, gs, f.name, -1, "mantissa") if with_hint else None
    return q, hint


def quantize_with_hint(x, fmt="nvfp4", *, global_scope="row", with_hint=True, backend="auto",
                       **kw):
    """See the module docstring. x [M, K] bf16/f32; extra keywords tune the triton kernel."""
    on_cpu = jax.default_backend() == "cpu"
    if backend == "auto":
        backend = "reference" if on_cpu else "triton"
    if backend == "reference":
        return quantize_with_hint_reference(x, fmt, global_scope=global_scope,
                                            with_hint=with_hint)
    if backend == "triton":
        return quantize_with_hint_triton(x, fmt, global_scope=global_scope, with_hint=with_hint,
                                         interpret=on_cpu, **kw)
    raise ValueError(f"unknown backend {backend!r}; expected auto, reference or triton")
