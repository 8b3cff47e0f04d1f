"""Pallas (Triton backend) FP4-weight matmul kernels: one kernel body serves dense and grouped.

Work is a list of *items*: (expert e, rows [r0, r1)) with r1 - r0 <= BM, built in plain JAX from
the group sizes (dense = one group of M rows). Grid = (items, N/BN, split-K). Each program streams
its expert's packed codes [BK/2, BN] + block scales per K step, decodes them in registers to exact
bf16 (``code * block_scale``; the E2M1 magnitude is shifted into an f16 subnormal pattern, so one
int->float reinterpretation decodes it, and the 2**14 bias is folded into the block scale), and
runs two bf16 MMAs (even-K columns of x against the low nibbles, odd-K against the high nibbles)
into an f32 accumulator. The epilogue multiplies the per-row scale (activation global scale times
the row's expert global scale) and writes bf16 (or f32 partials when split-K > 1).

Shapes: M rows, K contraction, N output columns, E experts, I items, S split-K factor.
"""

from __future__ import annotations

import dataclasses
import os
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from trace_jax import quant
from trace_jax.quant import QTensor

F16_BIAS_FOLD = 16384.0  # 2**14: f16 subnormal pattern (code & 7) << 9 is E2M1 magnitude * 2**-14


@dataclasses.dataclass(frozen=True)
class Config:
    bm: int = 16  # rows per item (>= 16 for the MMA)
    bn: int = 128
    bk: int = 128  # K elements per step (multiple of 2 * block)
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3


def _interpret() -> bool:
    return jax.default_backend() != "gpu"


# --------------------------------------------------------------------------------------------
# Decode (shared by the kernel and, through interpret mode, the CPU tests)


def decode_scales(s_u8: jax.Array, fmt: str) -> jax.Array:
    """Raw scale bytes -> f32 block scale times 2**14 (the f16-subnormal decode bias)."""
    if fmt == "nvfp4":
        f8 = jax.lax.bitcast_convert_type(s_u8, jnp.float8_e4m3fn)
        return f8.astype(jnp.float32) * F16_BIAS_FOLD
    sb = s_u8.astype(jnp.int32)
    val = jax.lax.bitcast_convert_type((sb + 14) << 23, jnp.float32)
    return jnp.where(sb == 0, 0.0, val)


def _nibble_f32(n: jax.Array) -> jax.Array:
    """4-bit code (int32) -> its E2M1 value times 2**-14, via an f16 subnormal/normal pattern."""
    bits = ((n & 7) << 9) | ((n & 8) << 12)
    return jax.lax.bitcast_convert_type(bits.astype(jnp.uint16), jnp.float16).astype(jnp.float32)


def decode_tile(c_u8: jax.Array, s_f32: jax.Array, block: int):
    """codes uint8 [R, BN] (row r = K elements 2r, 2r+1) and scales f32 [R*2/block, BN] ->
    exact bf16 values of the even-K (low nibble) and odd-K (high nibble) rows, each [R, BN]."""
    r, bn = c_u8.shape
    per = block // 2  # packed rows per scale row
    s = jnp.broadcast_to(s_f32[:, None, :], (r // per, per, bn)).reshape(r, bn)
    ci = c_u8.astype(jnp.int32)
    lo = (_nibble_f32(ci & 15) * s).astype(jnp.bfloat16)
    hi = (_nibble_f32(ci >> 4) * s).astype(jnp.bfloat16)
    return lo, hi


# --------------------------------------------------------------------------------------------
# Kernel


def _kernel(ie_ref, r0_ref, r1_ref, xlo_ref, xhi_ref, wc_ref, ws_ref, rs_ref, o_ref, *,
            cfg: Config, fmt: str, block: int, k: int):
    i = pl.program_id(0)
    j = pl.program_id(1)
    s = pl.program_id(2)
    e = ie_ref[i]
    r0 = r0_ref[i]
    r1 = r1_ref[i]
    bm, bn, bk = cfg.bm, cfg.bn, cfg.bk
    bk2, bkb = bk // 2, bk // block
    ks = k // cfg.split_k
    n0 = pl.multiple_of(j * bn, bn)
    rmask = (r0 + jax.lax.broadcasted_iota(jnp.int32, (bm, 1), 0)) < r1  # [BM,1]
    xmask = jnp.broadcast_to(rmask, (bm, bk2))
    ec = jnp.maximum(e, 0)
    omask = jnp.broadcast_to(rmask, (bm, bn))
    o_at = o_ref.at[s, pl.ds(r0, bm), pl.ds(n0, bn)]

    def body(t, acc):
        kk = s * ks + t * bk
        k2 = pl.multiple_of(kk // 2, bk2)
        kb = pl.multiple_of(kk // block, bkb)
        xl = plgpu.load(xlo_ref.at[pl.ds(r0, bm), pl.ds(k2, bk2)], mask=xmask, other=0.0)
        xh = plgpu.load(xhi_ref.at[pl.ds(r0, bm), pl.ds(k2, bk2)], mask=xmask, other=0.0)
        c = wc_ref[ec, pl.ds(k2, bk2), pl.ds(n0, bn)]
        sc = decode_scales(ws_ref[ec, pl.ds(kb, bkb), pl.ds(n0, bn)], fmt)
        lo, hi = decode_tile(c, sc, block)
        acc = acc + jnp.dot(xl, lo, preferred_element_type=jnp.float32)
        return acc + jnp.dot(xh, hi, preferred_element_type=jnp.float32)

    @pl.when((e >= 0) & (r1 > r0))
    def _compute():
        acc = jax.lax.fori_loop(0, ks // bk, body, jnp.zeros((bm, bn), jnp.float32))
        if cfg.split_k == 1:
            rs = plgpu.load(rs_ref.at[pl.ds(r0, bm), :], mask=rmask, other=0.0)  # [BM,1]
            acc = acc * rs
        plgpu.store(o_at, acc.astype(o_ref.dtype), mask=omask)

    @pl.when((e < 0) & (r1 > r0))
    def _zeros():  # rows past sum(group_sizes)
        plgpu.store(o_at, jnp.zeros((bm, bn), o_ref.dtype), mask=omask)


def _call(items, x_lo, x_hi, wc, ws, row_scale, *, cfg: Config, fmt: str, n_rows_out: int):
    ie, r0, r1 = items
    n_items = ie.shape[0]
    e, k2, n = wc.shape
    k = 2 * k2
    block = quant.get_format(fmt).block_size
    if k % (cfg.bk * cfg.split_k) or n % cfg.bn or cfg.bk % (2 * block):
        raise ValueError(f"K={k}, N={n} do not tile with {cfg}")
    out_dtype = jnp.bfloat16 if cfg.split_k == 1 else jnp.float32
    kernel = functools.partial(_kernel, cfg=cfg, fmt=fmt, block=block, k=k)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((cfg.split_k, n_rows_out, n), out_dtype),
        grid=(n_items, n // cfg.bn, cfg.split_k),
        compiler_params=plgpu.CompilerParams(num_warps=cfg.num_warps, num_stages=cfg.num_stages),
        interpret=_interpret(),
        name=f"fp4_matmul_{fmt}",
        debug=bool(os.environ.get("FP4_PALLAS_DEBUG")),
    )(ie, r0, r1, x_lo, x_hi, wc, ws, row_scale)


# --------------------------------------------------------------------------------------------
# Wrappers


def _split_x(x, m_pad: int):
    """x bf16 [M,K] or activation QTensor -> (x_even [Mp,K/2], x_odd [Mp,K/2] bf16, row scale [M,1]).

    For a QTensor, ``code * block_scale`` is exact in bf16; its global scale (per row or per
    tensor) goes to the row scale applied to the f32 accumulator."""
    if isinstance(x, QTensor):
        if x.axis != -1:
            raise ValueError(f"activation QTensor must be quantized along K (axis -1), got {x.axis}")
        m = x.codes.shape[0]
        g = jnp.broadcast_to(x.global_scale.astype(jnp.float32), (m, 1))
        unit = dataclasses.replace(x, global_scale=jnp.ones_like(x.global_scale, jnp.float32))
        xb = quant.dequantize(unit, jnp.bfloat16)
    else:
        m = x.shape[0]
        g = jnp.ones((m, 1), jnp.float32)
        xb = x.astype(jnp.bfloat16)
    xb = jnp.pad(xb, ((0, m_pad - m), (0, 0)))
    k = xb.shape[1]
    x3 = xb.reshape(m_pad, k // 2, 2)
    return x3[:, :, 0], x3[:, :, 1], g


def _items_for_groups(group_sizes, m: int, bm: int):
    """Static-size item list (expert, r0, r1) covering every row: group tiles, then zero tiles for
    rows past sum(group_sizes), then no-op items (r0 = r1 = m)."""
    gs = group_sizes.astype(jnp.int32)
    n_e = gs.shape[0]
    ends = jnp.cumsum(gs)
    starts = ends - gs
    total = jnp.minimum(ends[-1], m)
    tiles = (gs + bm - 1) // bm
    t_end = jnp.cumsum(tiles)
    t_start = t_end - tiles
    n_real = t_end[-1]
    n_items = -(-m // bm) + n_e + 1
    idx = jnp.arange(n_items, dtype=jnp.int32)
    eg = jnp.clip(jnp.searchsorted(t_end, idx, side="right"), 0, n_e - 1).astype(jnp.int32)
    g_r0 = starts[eg] + (idx - t_start[eg]) * bm
    g_r1 = jnp.minimum(g_r0 + bm, ends[eg])
    z_r0 = total + (idx - n_real) * bm
    z_r1 = jnp.minimum(z_r0 + bm, m)
    is_g = idx < n_real
    is_z = (~is_g) & (z_r0 < m)
    ie = jnp.where(is_g, eg, -1)
    r0 = jnp.where(is_g, g_r0, jnp.where(is_z, z_r0, m))
    r1 = jnp.where(is_g, g_r1, jnp.where(is_z, z_r1, m))
    # Group rows beyond m (sum(group_sizes) > m) are clipped.
    r0 = jnp.minimum(r0, m)
    r1 = jnp.minimum(r1, m)
    return ie.astype(jnp.int32), r0.astype(jnp.int32), r1.astype(jnp.int32)


def _row_expert(group_sizes, m: int):
    ends = jnp.cumsum(group_sizes.astype(jnp.int32))
    rows = jnp.arange(m, dtype=jnp.int32)
    e = jnp.searchsorted(ends, rows, side="right")
    return jnp.clip(e, 0, group_sizes.shape[0] - 1), rows < ends[-1]


def _run(x, w, items, row_gw, cfg: Config):
    m = x.codes.shape[0] if isinstance(x, QTensor) else x.shape[0]
    m_pad = m + cfg.bm  # items may start anywhere below m and read BM rows
    x_lo, x_hi, g = _split_x(x, m_pad)
    rs = g * row_gw  # [M,1]
    rs = jnp.pad(rs, ((0, m_pad - m), (0, 0)))
    wc = w.codes.reshape(-1, *w.codes.shape[-2:])
    ws = w.scales.reshape(-1, *w.scales.shape[-2:])
    out = _call(items, x_lo, x_hi, wc, ws, rs, cfg=cfg, fmt=w.fmt, n_rows_out=m_pad)
    if cfg.split_k == 1:
        return out[0, :m]
    return (jnp.sum(out[:, :m], axis=0) * rs[:m]).astype(jnp.bfloat16)


def default_config(m: int, k: int, n: int, grouped: bool) -> Config:
    """Heuristic tile choice (see NOTES_matmul.md for the measurements behind it)."""
    if m >= 256 and not grouped:
        return Config(bm=64 if m < 1024 else 128, bn=128, bk=128, split_k=1, num_warps=8,
                      num_stages=3)
    bm = 16 if m <= 16 or grouped else (32 if m <= 32 else 64)
    bn = 128 if n % 128 == 0 else 64
    split = 1
    if not grouped:
        tiles = (-(-m // bm)) * (n // bn)
        while tiles * split < 132 and (k // 128) % (split * 2) == 0:
            split *= 2
    return Config(bm=bm, bn=bn, bk=128, split_k=split, num_warps=4, num_stages=4)


def dense(x, w, cfg: Config | None = None):
    k, n = w.shape[-2:]
    m = x.codes.shape[0] if isinstance(x, QTensor) else x.shape[0]
    cfg = cfg or default_config(m, k, n, grouped=False)
    items = _items_for_groups(jnp.array([m], jnp.int32), m, cfg.bm)
    row_gw = jnp.broadcast_to(w.global_scale.reshape(1, 1), (m, 1))
    return _run(x, w, items, row_gw, cfg)


def grouped(x, w, group_sizes, cfg: Config | None = None):
    e, k, n = w.shape
    m = x.codes.shape[0] if isinstance(x, QTensor) else x.shape[0]
    cfg = cfg or default_config(m, k, n, grouped=True)
    items = _items_for_groups(group_sizes, m, cfg.bm)
    re, valid = _row_expert(group_sizes, m)
    row_gw = jnp.where(valid, w.global_scale.reshape(e)[re], 0.0)[:, None]
    return _run(x, w, items, row_gw, cfg)
