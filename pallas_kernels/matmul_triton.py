"""Pallas (Triton backend) FP4-weight matmul kernels, v2: one kernel body for dense and grouped.

Work is a list of *items*: (expert e, rows [r0, r1)) with r1 - r0 <= BM, built in plain JAX from
the group sizes (dense = one group of M rows). Grid = (items, N/BN, split-K), or, with
``Config.programs`` (the grouped default), that many persistent programs sharing out the active
(item, N tile) pairs in one pipelined loop. Each program streams
its expert's packed units (two u32 words per 16 K-codes of one column, ``matmul_layout``) and one
scale byte per unit, decodes a unit with inline PTX into 16 exact bf16 planes
(``code * block_scale * 2**-shift``; ~1.5 ops per element) and runs 16 small bf16 MMAs per K step,
plane p against the x columns ``16 kb + p`` (the wrapper pre-permutes x so each is one contiguous
slice). The f32 epilogue multiplies the per-row scale (activation global scale x expert global
scale x 2**shift).

Two weight orientations (``FP4Weights.layout``): "kn" (units [K/16, N], dot(x_p, plane_p)) and
"nk" (units [N, K/16], dot(plane_p, x_p^T): the decoded weight is the MMA's A operand, which
Triton may keep in registers).

In interpret mode (CPU tests) the asm is replaced by its bit-exact emulation.
Shapes: M rows, K contraction, N output columns, E experts, S split-K factor.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels import matmul_layout as L
from trace_jax.quant import QTensor

NV_S_FOLD = 2.0 ** 118


def _fix_multi_result_inline_asm():
    """jax 0.11.2's Triton lowering of ``elementwise_inline_asm`` wraps the op's results in one
    more list, so asm with several outputs fails ("16 outvars do not match 1 outvals"). Re-register
    the rule to return the results flat; single-result calls (approx_tanh) keep the original."""
    from jax._src.lib.triton import dialect as tt_dialect
    from jax._src.pallas.triton import lowering as tlow
    from jax._src.pallas.triton import primitives as tprim
    from jax._src.interpreters import mlir

    prim = tprim.elementwise_inline_asm_p
    orig = tlow.triton_lowering_rules[prim]
    if getattr(orig, "_fp4_fixed", False):
        return

    def rule(ctx, *args, asm, constraints, pack, result_shape_dtypes):
        if len(ctx.avals_out) == 1:
            return orig(ctx, *args, asm=asm, constraints=constraints, pack=pack,
                        result_shape_dtypes=result_shape_dtypes)
        res = tt_dialect.elementwise_inline_asm(
            [mlir.aval_to_ir_type(ctx.context.mlir_ctx, a) for a in ctx.avals_out], asm,
            constraints=constraints, pure=True, packed_element=pack, args=args)
        return list(res)

    rule._fp4_fixed = True
    tlow.triton_lowering_rules[prim] = rule


_fix_multi_result_inline_asm()  # nvfp4: S = e4m3 * 2**118 = scale * 2**126 * 2**-8


@dataclasses.dataclass(frozen=True)
class Config:
    bm: int = 16  # rows per item (>= 16 for the MMA)
    bn: int = 64
    bk: int = 256  # K elements per step (multiple of 256: each plane dot has K >= 16)
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3
    # 0: one program per (item, N tile). > 0 (grouped, split_k 1): that many persistent programs,
    # each streaming its share of the active tiles as one software-pipelined loop over
    # (tile, K step), so weight loads stay in flight across tiles and empty experts cost nothing.
    # Dense: stream-K over that many programs (``stream_k_plan``: equal work per program)
    programs: int = 0


def _interpret() -> bool:
    return jax.default_backend() != "gpu" and not os.environ.get("FP4_FORCE_COMPILE")


# --------------------------------------------------------------------------------------------
# Decode


def scale_bf16(s_u8: jax.Array, fmt: str) -> jax.Array:
    """Unit scale bytes -> S (bf16) for the asm: nvfp4 e4m3 * 2**118, mxfp4 2**(b - 127)."""
    if fmt == "nvfp4":
        f8 = jax.lax.bitcast_convert_type(s_u8, jnp.float8_e4m3fn)
        return (f8.astype(jnp.float32) * NV_S_FOLD).astype(jnp.bfloat16)
    b = s_u8.astype(jnp.int32)
    val = jax.lax.bitcast_convert_type(b << 23, jnp.float32)
    return jnp.where(b == 255, jnp.nan, val).astype(jnp.bfloat16)


def scale_eff(s_u8: jax.Array, fmt: str) -> jax.Array:
    """What the asm's S means after the pattern's 2**-126: code multiplier (f32), emulation."""
    if fmt == "nvfp4":
        f8 = jax.lax.bitcast_convert_type(s_u8, jnp.float8_e4m3fn)
        return f8.astype(jnp.float32) * (2.0 ** -8)
    b = s_u8.astype(jnp.int32)
    val = jax.lax.bitcast_convert_type(jnp.maximum(b - 126, 0) << 23, jnp.float32)
    return jnp.where(b == 255, jnp.nan, jnp.where(b >= 127, val, 0.0))


def decode_planes(a, b, s_u8, fmt: str, emulate: bool):
    """Units (u32 words a, b; scale bytes) -> 16 bf16 planes of the same shape."""
    if emulate:
        return L.emulate_planes(a, b, scale_eff(s_u8, fmt))
    s16 = jax.lax.bitcast_convert_type(scale_bf16(s_u8, fmt), jnp.int16)
    outs = plgpu.elementwise_inline_asm(
        L.asm_text(), args=[a, b, s16], constraints=L.ASM_CONSTRAINTS, pack=1,
        result_shape_dtypes=[jax.ShapeDtypeStruct(a.shape, jnp.int16)] * 16)
    return [jax.lax.bitcast_convert_type(o, jnp.bfloat16) for o in outs]


# --------------------------------------------------------------------------------------------
# Kernels


def _rows_mask(r0, r1, bm, cols, axis):
    io = r0 + jax.lax.broadcasted_iota(jnp.int32, (bm, cols) if axis == 0 else (cols, bm), axis)
    return io < r1


def _fp4_kstep(acc, x_ref, wc_ref, ws_ref, ec, r0, r1, n0, kk, *, cfg: Config, fmt: str,
               nk: bool, emulate: bool):
    """acc + x[r0:r1, kk:kk+BK] @ w[ec, kk:kk+BK, n0:n0+BN] (acc transposed for "nk")."""
    bm, bn, bkb = cfg.bm, cfg.bn, cfg.bk // 16
    kb = pl.multiple_of(kk // 16, bkb)
    xmask = _rows_mask(r0, r1, bm, bkb, 1 if nk else 0)
    if nk:  # x^T [K, Mp]
        a = wc_ref[ec, 0, pl.ds(n0, bn), pl.ds(kb, bkb)]
        b = wc_ref[ec, 1, pl.ds(n0, bn), pl.ds(kb, bkb)]
        sc = ws_ref[ec, pl.ds(n0, bn), pl.ds(kb, bkb)]
    else:  # x [Mp, K]
        a = wc_ref[ec, 0, pl.ds(kb, bkb), pl.ds(n0, bn)]
        b = wc_ref[ec, 1, pl.ds(kb, bkb), pl.ds(n0, bn)]
        sc = ws_ref[ec, pl.ds(kb, bkb), pl.ds(n0, bn)]
    planes = decode_planes(a, b, sc, fmt, emulate)
    for p in range(16):
        if nk:
            xp = plgpu.load(x_ref.at[pl.ds(kk + p * bkb, bkb), pl.ds(r0, bm)], mask=xmask,
                            other=0.0)
            acc = acc + jnp.dot(planes[p], xp, preferred_element_type=jnp.float32)
        else:
            xp = plgpu.load(x_ref.at[pl.ds(r0, bm), pl.ds(kk + p * bkb, bkb)], mask=xmask,
                            other=0.0)
            acc = acc + jnp.dot(xp, planes[p], preferred_element_type=jnp.float32)
    return acc


def _out_tile(o_ref, s, r0, r1, n0, cfg: Config, nk: bool):
    """(output ref slice, row mask, accumulator shape) of one (item, N tile)."""
    bm, bn = cfg.bm, cfg.bn
    lead = () if s is None else (s,)  # None: an output without the split-K axis
    if nk:  # out^T [S, N, Mp]
        return (o_ref.at[(*lead, pl.ds(n0, bn), pl.ds(r0, bm))], _rows_mask(r0, r1, bm, bn, 1),
                (bn, bm))
    return (o_ref.at[(*lead, pl.ds(r0, bm), pl.ds(n0, bn))], _rows_mask(r0, r1, bm, bn, 0),
            (bm, bn))


def _row_scale(rs_ref, r0, r1, bm: int, nk: bool):
    if nk:
        return plgpu.load(rs_ref.at[:, pl.ds(r0, bm)], mask=_rows_mask(r0, r1, bm, 1, 1),
                          other=0.0)  # [1, BM]
    return plgpu.load(rs_ref.at[pl.ds(r0, bm), :], mask=_rows_mask(r0, r1, bm, 1, 0),
                      other=0.0)  # [BM, 1]


def _fp4_kernel(ie_ref, r0_ref, r1_ref, x_ref, wc_ref, ws_ref, rs_ref, o_ref, *,
                cfg: Config, fmt: str, k: int, nk: bool, emulate: bool):
    i, j, s = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    e, r0, r1 = ie_ref[i], r0_ref[i], r1_ref[i]
    bk = cfg.bk
    ks = k // cfg.split_k
    n0 = pl.multiple_of(j * cfg.bn, cfg.bn)
    ec = jnp.maximum(e, 0)
    o_at, omask, acc_shape = _out_tile(o_ref, s, r0, r1, n0, cfg, nk)

    def body(t, acc):
        kk = pl.multiple_of(s * ks + t * bk, bk)
        return _fp4_kstep(acc, x_ref, wc_ref, ws_ref, ec, r0, r1, n0, kk, cfg=cfg, fmt=fmt,
                          nk=nk, emulate=emulate)

    _epilogue(body, ks // bk, acc_shape, e, r0, r1, rs_ref, o_at, omask, cfg, nk)


def _persistent_loop(nt_ref, ie_ref, r0_ref, r1_ref, *, k: int, n: int, cfg: Config, acc_shape,
                     kstep, store):
    """Program p of P runs tiles p, p + P, ... of the ``nt_ref[0]`` active (item, N tile) pairs
    (item-major) as one flat loop over (tile, K step): ``acc = kstep(acc, e, r0, r1, n0, kk)``,
    then ``store(acc, e, r0, r1, n0)`` after a tile's last K step. One loop lets Triton keep the
    next tile's weight loads in flight while the current tile finishes."""
    p, n_prog = pl.program_id(0), pl.num_programs(0)
    steps, tiles_n = jnp.int32(k // cfg.bk), jnp.int32(n // cfg.bn)
    # lax.div / lax.rem (operands >= 0): jnp's floor-mod select lowers to an i1 in Pallas Triton
    mine = jax.lax.div(nt_ref[0] - p + n_prog - 1, n_prog)

    def body(t, acc):
        tile = p + jax.lax.div(t, steps) * n_prog
        item, j = jax.lax.div(tile, tiles_n), jax.lax.rem(tile, tiles_n)
        e, r0, r1 = ie_ref[item], r0_ref[item], r1_ref[item]
        n0 = pl.multiple_of(j * cfg.bn, cfg.bn)
        ks = jax.lax.rem(t, steps)
        acc = kstep(acc, jnp.maximum(e, 0), r0, r1, n0, pl.multiple_of(ks * cfg.bk, cfg.bk))
        last = ks == steps - 1

        @pl.when(last)
        def _():
            store(acc, e, r0, r1, n0)

        return jnp.where(last, jnp.zeros_like(acc), acc)

    jax.lax.fori_loop(0, mine * steps, body, jnp.zeros(acc_shape, jnp.float32))


def _fp4_persistent_kernel(nt_ref, ie_ref, r0_ref, r1_ref, x_ref, wc_ref, ws_ref, rs_ref, o_ref,
                           *, cfg: Config, fmt: str, k: int, n: int, nk: bool, emulate: bool):
    def kstep(acc, ec, r0, r1, n0, kk):
        return _fp4_kstep(acc, x_ref, wc_ref, ws_ref, ec, r0, r1, n0, kk, cfg=cfg, fmt=fmt,
                          nk=nk, emulate=emulate)

    def store(acc, e, r0, r1, n0):
        o_at, omask, _ = _out_tile(o_ref, None, r0, r1, n0, cfg, nk)
        acc = acc * _row_scale(rs_ref, r0, r1, cfg.bm, nk)
        plgpu.store(o_at, acc.astype(o_at.dtype), mask=omask)

    acc_shape = (cfg.bn, cfg.bm) if nk else (cfg.bm, cfg.bn)
    _persistent_loop(nt_ref, ie_ref, r0_ref, r1_ref, k=k, n=n, cfg=cfg, acc_shape=acc_shape,
                     kstep=kstep, store=store)


def stream_k_plan(tiles: int, steps: int, programs: int):
    """Dense stream-K split of ``tiles x steps`` K-step iterations over ``programs`` programs:
    program p runs iterations [p T / P, (p + 1) T / P) (T = tiles x steps, floor division), so
    every program gets the same work whatever the tile count (no partial last wave). A tile's
    iterations are shared by consecutive programs; the i-th of them writes its partial sum to
    slot i. Returns (P, S slots, written [S, tiles] bool): the slots the kernel writes, with the
    in-kernel formulas (a slot not written holds garbage and is masked out of the sum)."""
    t_total = tiles * steps
    p_n = max(1, min(programs, t_total))
    first = [((t * steps + 1) * p_n - 1) // t_total for t in range(tiles)]  # program of iteration
    last = [(((t + 1) * steps) * p_n - 1) // t_total for t in range(tiles)]  # t*steps (and end)
    s_n = max(b - a + 1 for a, b in zip(first, last))
    written = np.zeros((s_n, tiles), bool)
    for t, (a, b) in enumerate(zip(first, last)):
        written[: b - a + 1, t] = True
    return p_n, s_n, written


def _fp4_stream_kernel(r0_ref, r1_ref, x_ref, wc_ref, ws_ref, o_ref, *, cfg: Config,
                       fmt: str, k: int, n: int, tiles: int, nk: bool, emulate: bool):
    """Stream-K dense matmul (``stream_k_plan``): f32 partial sums, one slot per program that
    touches a tile; the wrapper sums the slots in a fixed order (deterministic)."""
    p, p_n = pl.program_id(0), pl.num_programs(0)
    steps, tiles_n = k // cfg.bk, n // cfg.bn
    t_total = tiles * steps
    lo, hi = jax.lax.div(p * t_total, p_n), jax.lax.div((p + 1) * t_total, p_n)
    acc_shape = (cfg.bn, cfg.bm) if nk else (cfg.bm, cfg.bn)

    def body(t, acc):
        tile, ks = jax.lax.div(t, steps), jax.lax.rem(t, steps)
        item, j = jax.lax.div(tile, tiles_n), jax.lax.rem(tile, tiles_n)
        r0, r1 = r0_ref[item], r1_ref[item]
        n0 = pl.multiple_of(j * cfg.bn, cfg.bn)
        acc = _fp4_kstep(acc, x_ref, wc_ref, ws_ref, 0, r0, r1, n0,
                         pl.multiple_of(ks * cfg.bk, cfg.bk), cfg=cfg, fmt=fmt, nk=nk,
                         emulate=emulate)
        flush = (ks == steps - 1) | (t == hi - 1)

        @pl.when(flush)
        def _():
            slot = p - jax.lax.div((tile * steps + 1) * p_n - 1, t_total)
            o_at, omask, _ = _out_tile(o_ref, slot, r0, r1, n0, cfg, nk)
            plgpu.store(o_at, acc, mask=omask)

        return jnp.where(flush, jnp.zeros_like(acc), acc)

    jax.lax.fori_loop(lo, hi, body, jnp.zeros(acc_shape, jnp.float32))


def _epilogue(body, steps, acc_shape, e, r0, r1, rs_ref, o_at, omask, cfg, nk):
    bm = cfg.bm

    @pl.when((e >= 0) & (r1 > r0))
    def _compute():
        acc = jax.lax.fori_loop(0, steps, body, jnp.zeros(acc_shape, jnp.float32))
        if cfg.split_k == 1:
            acc = acc * _row_scale(rs_ref, r0, r1, bm, nk)
        plgpu.store(o_at, acc.astype(o_at.dtype), mask=omask)

    @pl.when((e < 0) & (r1 > r0))
    def _zeros():  # rows past sum(group_sizes)
        plgpu.store(o_at, jnp.zeros(acc_shape, o_at.dtype), mask=omask)


def _bf16_kstep(acc, x_ref, w_ref, ec, r0, r1, n0, kk, *, cfg: Config, w_nk: bool):
    """acc += x[r0:r1, kk:kk+BK] @ w[ec][kk:kk+BK, n0:n0+BN]; ``w_nk``: w is stored [E, N, K]
    (the transposed weight of the backward pass, read in place)."""
    bm, bn, bk = cfg.bm, cfg.bn, cfg.bk
    xt = plgpu.load(x_ref.at[pl.ds(r0, bm), pl.ds(kk, bk)], mask=_rows_mask(r0, r1, bm, bk, 0),
                    other=0.0)
    if w_nk:
        wt = w_ref[ec, pl.ds(n0, bn), pl.ds(kk, bk)]
        return acc + jax.lax.dot_general(xt, wt, (((1,), (1,)), ((), ())),
                                         preferred_element_type=jnp.float32)
    wt = w_ref[ec, pl.ds(kk, bk), pl.ds(n0, bn)]
    return acc + jnp.dot(xt, wt, preferred_element_type=jnp.float32)


def _bf16_kernel(ie_ref, r0_ref, r1_ref, x_ref, w_ref, *refs, cfg: Config, k: int,
                 w_nk: bool):
    """Grouped bf16-weight matmul (no decode): the same item structure, for the BF16 engine.
    ``refs``: (o_ref,) or, with a per-expert f32 scale of the accumulator, (es_ref, o_ref)."""
    es_ref, o_ref = refs if len(refs) == 2 else (None, refs[0])
    i, j = pl.program_id(0), pl.program_id(1)
    e, r0, r1 = ie_ref[i], r0_ref[i], r1_ref[i]
    bm, bn, bk = cfg.bm, cfg.bn, cfg.bk
    n0 = pl.multiple_of(j * bn, bn)
    ec = jnp.maximum(e, 0)
    omask = _rows_mask(r0, r1, bm, bn, 0)
    o_at = o_ref.at[pl.ds(r0, bm), pl.ds(n0, bn)]

    def body(t, acc):
        kk = pl.multiple_of(t * bk, bk)
        return _bf16_kstep(acc, x_ref, w_ref, ec, r0, r1, n0, kk, cfg=cfg, w_nk=w_nk)

    @pl.when((e >= 0) & (r1 > r0))
    def _compute():
        acc = jax.lax.fori_loop(0, k // bk, body, jnp.zeros((bm, bn), jnp.float32))
        if es_ref is not None:
            acc = acc * es_ref[ec]
        plgpu.store(o_at, acc.astype(o_at.dtype), mask=omask)

    @pl.when((e < 0) & (r1 > r0))
    def _zeros():
        plgpu.store(o_at, jnp.zeros((bm, bn), o_at.dtype), mask=omask)


def _bf16_persistent_kernel(nt_ref, ie_ref, r0_ref, r1_ref, x_ref, w_ref, *refs, cfg: Config,
                            k: int, n: int, w_nk: bool):
    es_ref, o_ref = refs if len(refs) == 2 else (None, refs[0])
    bm, bn = cfg.bm, cfg.bn

    def kstep(acc, ec, r0, r1, n0, kk):
        return _bf16_kstep(acc, x_ref, w_ref, ec, r0, r1, n0, kk, cfg=cfg, w_nk=w_nk)

    def store(acc, e, r0, r1, n0):
        if es_ref is not None:
            acc = acc * es_ref[jnp.maximum(e, 0)]
        plgpu.store(o_ref.at[pl.ds(r0, bm), pl.ds(n0, bn)], acc.astype(o_ref.dtype),
                    mask=_rows_mask(r0, r1, bm, bn, 0))

    _persistent_loop(nt_ref, ie_ref, r0_ref, r1_ref, k=k, n=n, cfg=cfg, acc_shape=(bm, bn),
                     kstep=kstep, store=store)


def _bf16_wgrad_kernel(start_ref, end_ref, x_ref, dy_ref, o_ref, *, cfg: Config):
    """dw[e, K tile, N tile] = x[rows of e, K tile]^T @ dy[rows of e, N tile], f32: one program
    per (expert, K tile, N tile), looping over its expert's rows BM at a time (an empty expert
    stores zeros)."""
    e, i, j = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    bm, bk, bn = cfg.bm, cfg.bk, cfg.bn
    r0, r1 = start_ref[e], end_ref[e]
    k0, n0 = pl.multiple_of(i * bk, bk), pl.multiple_of(j * bn, bn)

    def body(t, acc):
        rs = r0 + t * bm
        xt = plgpu.load(x_ref.at[pl.ds(rs, bm), pl.ds(k0, bk)],
                        mask=_rows_mask(rs, r1, bm, bk, 0), other=0.0)
        gt = plgpu.load(dy_ref.at[pl.ds(rs, bm), pl.ds(n0, bn)],
                        mask=_rows_mask(rs, r1, bm, bn, 0), other=0.0)
        return acc + jax.lax.dot_general(xt, gt, (((0,), (0,)), ((), ())),
                                         preferred_element_type=jnp.float32)

    steps = jax.lax.div(jnp.maximum(r1 - r0, 0) + bm - 1, jnp.int32(bm))
    acc = jax.lax.fori_loop(0, steps, body, jnp.zeros((bk, bn), jnp.float32))
    plgpu.store(o_ref.at[e, pl.ds(k0, bk), pl.ds(n0, bn)], acc)


# --------------------------------------------------------------------------------------------
# Wrappers


def _searchsorted_right(sorted_a, v):
    """``jnp.searchsorted(sorted_a, v, side="right")`` without a loop: it compares every pair
    (E experts x items or rows: small). The default binary search is a lax loop of log2(E) steps,
    which XLA runs on the GPU as a while loop of small kernels; two of them sat in every grouped
    matmul call of the decode step."""
    return jnp.searchsorted(sorted_a, v, side="right", method="compare_all")


def _items_for_groups(group_sizes, m: int, bm: int):
    """Static-size item list (expert, r0, r1) covering every row: group tiles, then zero tiles for
    rows past sum(group_sizes), then no-op items (r0 = r1 = m). Empty groups get no item."""
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
    eg = jnp.clip(_searchsorted_right(t_end, idx), 0, n_e - 1).astype(jnp.int32)
    g_r0 = starts[eg] + (idx - t_start[eg]) * bm
    g_r1 = jnp.minimum(g_r0 + bm, ends[eg])
    z_r0 = total + (idx - n_real) * bm
    z_r1 = jnp.minimum(z_r0 + bm, m)
    is_g = idx < n_real
    is_z = (~is_g) & (z_r0 < m)
    ie = jnp.where(is_g, eg, -1)
    r0 = jnp.where(is_g, g_r0, jnp.where(is_z, z_r0, m))
    r1 = jnp.where(is_g, g_r1, jnp.where(is_z, z_r1, m))
    r0 = jnp.minimum(r0, m)  # group rows beyond m (sum(group_sizes) > m) are clipped
    r1 = jnp.minimum(r1, m)
    return ie.astype(jnp.int32), r0.astype(jnp.int32), r1.astype(jnp.int32)


def _active_tiles(items, n: int, bn: int):
    """[1] int32: the (item, N tile) pairs with rows to compute (group tiles come first)."""
    ie, r0, r1 = items
    return (jnp.sum((ie >= 0) & (r1 > r0)).astype(jnp.int32) * (n // bn)).reshape(1)


def _zero_rows_past(out, group_sizes, m: int):
    """Rows >= sum(group_sizes) -> 0 (the persistent kernels never write them)."""
    total = jnp.sum(group_sizes.astype(jnp.int32))
    return jnp.where((jnp.arange(m) < total)[:, None], out, jnp.zeros((), out.dtype))


def _row_expert(group_sizes, m: int):
    ends = jnp.cumsum(group_sizes.astype(jnp.int32))
    rows = jnp.arange(m, dtype=jnp.int32)
    e = _searchsorted_right(ends, rows)
    return jnp.clip(e, 0, group_sizes.shape[0] - 1), rows < ends[-1]


def x_bf16(x):
    """x bf16 [M,K] or activation QTensor -> (bf16 [M,K], per-row scale [M,1] f32).

    For a QTensor, ``code * block_scale`` is exact in bf16; its global scale goes to the row
    scale applied to the f32 accumulator (emulated W4A4, identical numerics to the reference)."""
    if isinstance(x, QTensor):
        from trace_jax import quant

        if x.axis != -1:
            raise ValueError(f"activation QTensor must be quantized along K (axis -1), got {x.axis}")
        m = x.codes.shape[0]
        g = jnp.broadcast_to(x.global_scale.astype(jnp.float32), (m, 1))
        unit = dataclasses.replace(x, global_scale=jnp.ones_like(x.global_scale, jnp.float32))
        return quant.dequantize(unit, jnp.bfloat16), g
    return x.astype(jnp.bfloat16), jnp.ones((x.shape[0], 1), jnp.float32)


def permute_x(xb, bk: int):
    """x [M,K] -> x with each BK tile plane-major: column p*BK/16 + i holds x[:, 16 i + p]."""
    m, k = xb.shape
    return xb.reshape(m, k // bk, bk // 16, 16).transpose(0, 1, 3, 2).reshape(m, k)


def _check_tiles(k: int, n: int, cfg: Config):
    if k % (cfg.bk * cfg.split_k) or n % cfg.bn or cfg.bk % 256:
        raise ValueError(f"K={k}, N={n} do not tile with {cfg}")
    if cfg.programs and cfg.split_k != 1:
        raise ValueError(f"persistent programs need split_k=1, got {cfg}")


def _run(x, w, items, row_gw, cfg: Config, group_sizes):
    xb, g = x_bf16(x)
    m, k = xb.shape
    m_pad = m + cfg.bm  # items may start anywhere below m and read BM rows
    nk = w.layout == "nk"
    n = w.shape[-1]
    _check_tiles(k, n, cfg)
    rs = jnp.pad(g * row_gw, ((0, m_pad - m), (0, 0)))  # [Mp,1]
    xp = jnp.pad(permute_x(xb, cfg.bk), ((0, m_pad - m), (0, 0)))
    if nk:
        xp, rs = xp.T, rs.T
    wc = w.codes.reshape(-1, *w.codes.shape[-3:])
    ws = w.scales.reshape(-1, *w.scales.shape[-2:])
    ie, r0, r1 = items
    out_dtype = jnp.bfloat16 if cfg.split_k == 1 else jnp.float32
    oshape = (n, m_pad) if nk else (m_pad, n)
    if not cfg.programs:
        oshape = (cfg.split_k, *oshape)
    emulate = _interpret()
    if cfg.programs:
        kernel = functools.partial(_fp4_persistent_kernel, cfg=cfg, fmt=w.fmt, k=k, n=n, nk=nk,
                                   emulate=emulate)
        grid, args = (cfg.programs,), (_active_tiles(items, n, cfg.bn), ie, r0, r1)
    else:
        kernel = functools.partial(_fp4_kernel, cfg=cfg, fmt=w.fmt, k=k, nk=nk, emulate=emulate)
        grid, args = (ie.shape[0], n // cfg.bn, cfg.split_k), (ie, r0, r1)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(oshape, out_dtype),
        grid=grid,
        compiler_params=plgpu.CompilerParams(num_warps=cfg.num_warps, num_stages=cfg.num_stages),
        interpret=emulate,
        name=f"fp4_matmul_{w.fmt}_{w.layout}",
        debug=bool(os.environ.get("FP4_PALLAS_DEBUG")),
    )(*args, xp, wc, ws, rs)
    if cfg.programs:
        return _zero_rows_past((out.T if nk else out)[:m], group_sizes, m)
    if nk:
        out = jnp.swapaxes(out, 1, 2)
    if cfg.split_k == 1:
        return out[0, :m]
    rs = rs.T if nk else rs
    return (jnp.sum(out[:, :m], axis=0) * rs[:m]).astype(jnp.bfloat16)


def _run_stream_k(x, w, r0, r1, row_gw, cfg: Config):
    """Dense ``Config.programs`` > 0: the stream-K kernel over the row tiles [r0, r1), then the
    slot sum and row scale."""
    xb, g = x_bf16(x)
    m, k = xb.shape
    n = w.shape[-1]
    _check_tiles(k, n, cfg)
    nk = w.layout == "nk"
    n_items = r0.shape[0]
    m_pad = (n_items + 1) * cfg.bm
    tiles = n_items * (n // cfg.bn)
    p_n, s_n, written = stream_k_plan(tiles, k // cfg.bk, cfg.programs)
    rs = jnp.pad(g * row_gw, ((0, m_pad - m), (0, 0)))
    xp = jnp.pad(permute_x(xb, cfg.bk), ((0, m_pad - m), (0, 0)))
    if nk:
        xp = xp.T
    emulate = _interpret()
    out = pl.pallas_call(
        functools.partial(_fp4_stream_kernel, cfg=cfg, fmt=w.fmt, k=k, n=n, tiles=tiles, nk=nk,
                          emulate=emulate),
        out_shape=jax.ShapeDtypeStruct((s_n, n, m_pad) if nk else (s_n, m_pad, n), jnp.float32),
        grid=(p_n,),
        compiler_params=plgpu.CompilerParams(num_warps=cfg.num_warps, num_stages=cfg.num_stages),
        interpret=emulate,
        name=f"fp4_matmul_{w.fmt}_{w.layout}_streamk",
        debug=bool(os.environ.get("FP4_PALLAS_DEBUG")),
    )(r0, r1, xp, w.codes.reshape(-1, *w.codes.shape[-3:]),
      w.scales.reshape(-1, *w.scales.shape[-2:]))
    if nk:
        out = jnp.swapaxes(out, 1, 2)
    mask = np.repeat(np.repeat(written.reshape(s_n, n_items, n // cfg.bn), cfg.bm, 1), cfg.bn, 2)
    out = jnp.where(mask[:, :m], out[:, :m], 0.0)  # slots a tile's programs did not write
    return (jnp.sum(out, axis=0) * rs[:m]).astype(jnp.bfloat16)


@functools.cache
def _sm_count() -> int:
    """Streaming multiprocessors of this process's first device (132 on an H200; 132 off the
    GPU). A local device: under jax.distributed, devices()[0] may belong to another process."""
    return int(getattr(jax.local_devices()[0], "core_count", 0) or 132)


def default_config(m: int, k: int, n: int, grouped: bool, layout: str = "kn") -> Config:
    """Heuristic tile choice (see NOTES_matmul.md for the measurements behind it). Dense
    (``pallas_kernels/sweep_dense.py``, session 11, device time at 8192 x 28672): M <= 16
    split-K up to >= 4 programs per SM; larger M stream-K over 3 programs per SM. Grouped:
    persistent programs, 3 per SM, 5 pipeline stages (2 weight buffers): session 8's device-time
    sweep (``pallas_kernels/sweep_grouped.py``) measured it 1.02-1.08x the previous 2 per SM / 7
    stages at all six 30B decode shapes (216-3528 rows x top-8 of 128 experts)."""
    bm = 16 if m <= 16 else 32  # M=64: two BM=32 mma.sync tiles beat one wgmma tile (GPU run 4)
    if n % 32:
        raise ValueError(f"the FP4 Triton kernels tile N in 32, 64 or 128 columns; N = {n} is not "
                         f"a multiple of 32")
    if grouped:
        bm = 16 if m <= 2048 else 32  # mean group size m/E for 128 experts
        bn = next(b for b in (128, 64, 32) if n % b == 0)
        return Config(bm=bm, bn=bn, bk=256, num_warps=4, num_stages=5, programs=3 * _sm_count())
    bn = next(b for b in (128, 64, 32) if n % b == 0)
    bk = 256
    if m > 16:  # session 11 sweep: stream-K, 3 programs per SM, 4 stages (1.11-1.16x split-K)
        return Config(bm=bm, bn=bn, bk=bk, num_warps=4, num_stages=4, programs=3 * _sm_count())
    split = 1
    tiles = (-(-m // bm)) * (n // bn)
    while tiles * split < 4 * _sm_count() and (k // bk) % (split * 2) == 0:
        split *= 2  # session 11 sweep: >= 4 programs per SM (split 4 at 8192 x 28672: 1.08x)
    return Config(bm=bm, bn=bn, bk=bk, split_k=split, num_warps=4, num_stages=3)


TRAIN_TILES = Config(bm=128, bn=128, bk=64, num_warps=8, num_stages=3)  # see default_bf16_config


def default_bf16_config(m: int, n: int, e: int | None = None) -> Config:
    """BF16 grouped kernel. Decode-sized calls (or ``e`` not given): persistent programs, 2 per
    SM, 3 weight buffers (session 5: 1.1-1.23x the one-program-per-tile kernel at 32-512 tokens
    x top-8 of 128 experts). At least 64 rows per expert (prefill, the trainer's forward and
    backward): compute-bound tiles, one program per (item, N tile) (``TRAIN_TILES``, picked by
    ``pallas_kernels/bench_grouped_train.py``; BN halves where N needs it)."""
    if e is not None and m >= 64 * e:
        bn = next(b for b in (TRAIN_TILES.bn, 64, 32) if n % b == 0)
        return dataclasses.replace(TRAIN_TILES, bn=bn)
    return Config(bm=16 if m <= 2048 else 32, bn=64 if n % 64 == 0 else 32, bk=64, num_warps=4,
                  num_stages=7, programs=2 * _sm_count())


def dense(x, w, cfg: Config | None = None):
    k, n = w.shape[-2:]
    m = x.codes.shape[0] if isinstance(x, QTensor) else x.shape[0]
    cfg = cfg or default_config(m, k, n, grouped=False, layout=w.layout)
    # one item per BM rows: the grouped item list's zero and no-op items would be empty
    # programs here (2 of 3 at M <= 16: 1,792 empty blocks at 8192 x 28672, session 11 ncu)
    r0 = jnp.arange(-(-m // cfg.bm), dtype=jnp.int32) * cfg.bm
    r1 = jnp.minimum(r0 + cfg.bm, m)
    gw = (w.global_scale * w.kscale).reshape(1, 1)
    row_gw = jnp.broadcast_to(gw, (m, 1))
    if cfg.programs:
        return _run_stream_k(x, w, r0, r1, row_gw, cfg)
    return _run(x, w, (jnp.zeros_like(r0), r0, r1), row_gw, cfg, jnp.array([m], jnp.int32))


PLANES_BK = 256  # K rows per dequantize_planes tile (16 planes of 16 rows)


def planes_fit(w) -> bool:
    """Whether :func:`dequantize_planes` tiles these weights (dense "kn", K % 256, N % 16)."""
    k, n = w.shape[-2:]
    return w.codes.ndim == 3 and w.layout == "kn" and k % PLANES_BK == 0 and n % 16 == 0


def _dequant_planes_kernel(wc_ref, ws_ref, ks_ref, o_ref, *, fmt: str, bkb: int, emulate: bool):
    planes = decode_planes(wc_ref[0], wc_ref[1], ws_ref[...], fmt, emulate)
    ks = ks_ref[...]  # [1, 1] f32: 2**shift, exact
    for p in range(16):
        o_ref[pl.ds(p * bkb, bkb), :] = (planes[p].astype(jnp.float32) * ks).astype(jnp.bfloat16)


def dequantize_planes(w) -> jax.Array:
    """Dense "kn" FP4 weights [K, N] -> bf16 ``code * block_scale`` (the global scale is *not*
    applied), exact, with the rows of each 256-row K tile in plane-major order: row
    ``p * 16 + i`` of a tile holds K index ``16 i + p``, so ``permute_x(x, 256) @ out`` is
    ``x @ W`` (up to f32 summation order). One pass over the packed units (the prefill path's
    weight round trip; ``fp4_matmul.dequantize_bf16`` goes through the unpacked QTensor)."""
    if not planes_fit(w):
        raise ValueError(f"dequantize_planes wants dense 'kn' weights with K % {PLANES_BK} == 0 "
                         f"and N % 16 == 0, got {w.shape} ({w.layout})")
    k, n = w.shape
    bkb = PLANES_BK // 16
    bn = next(b for b in (128, 64, 32, 16) if n % b == 0)
    emulate = _interpret()
    return pl.pallas_call(
        functools.partial(_dequant_planes_kernel, fmt=w.fmt, bkb=bkb, emulate=emulate),
        out_shape=jax.ShapeDtypeStruct((k, n), jnp.bfloat16),
        grid=(k // PLANES_BK, n // bn),
        in_specs=[pl.BlockSpec((2, bkb, bn), lambda i, j: (0, i, j)),
                  pl.BlockSpec((bkb, bn), lambda i, j: (i, j)),
                  pl.BlockSpec((1, 1), lambda i, j: (0, 0))],
        out_specs=pl.BlockSpec((PLANES_BK, bn), lambda i, j: (i, j)),
        compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=2),
        interpret=emulate,
        name=f"fp4_dequant_planes_{w.fmt}",
    )(w.codes, w.scales, w.kscale.reshape(1, 1).astype(jnp.float32))


def grouped(x, w, group_sizes, cfg: Config | None = None):
    e, k, n = w.shape
    m = x.codes.shape[0] if isinstance(x, QTensor) else x.shape[0]
    cfg = cfg or default_config(m, k, n, grouped=True, layout=w.layout)
    items = _items_for_groups(group_sizes, m, cfg.bm)
    re, valid = _row_expert(group_sizes, m)
    gw = (w.global_scale * w.kscale).reshape(e)
    row_gw = jnp.where(valid, gw[re], 0.0)[:, None]
    return _run(x, w, items, row_gw, cfg, group_sizes)


def grouped_bf16(x, w, group_sizes, cfg: Config | None = None, *, w_layout: str = "kn",
                 expert_scale=None):
    """x[M,K] bf16 sorted by expert, w[E,K,N] bf16 (``w_layout="nk"``: w[E,N,K], e.g. the forward
    weight read transposed by the backward pass) -> bf16 [M,N] (rows past the groups: 0).
    ``expert_scale`` (f32 [E]) multiplies each expert's f32 accumulator before the bf16
    rounding, as the FP4 kernels apply an expert's global scale."""
    if w_layout not in ("kn", "nk"):
        raise ValueError(f"w_layout must be 'kn' or 'nk', got {w_layout!r}")
    w_nk = w_layout == "nk"
    k, n = (w.shape[2], w.shape[1]) if w_nk else (w.shape[1], w.shape[2])
    m = x.shape[0]
    if x.shape[1] != k:
        raise ValueError(f"x has K={x.shape[1]}, the {w_layout} weight {w.shape} has K={k}")
    cfg = cfg or default_bf16_config(m, n, w.shape[0])
    if k % cfg.bk or n % cfg.bn:
        raise ValueError(f"K={k}, N={n} do not tile with {cfg}")
    items = _items_for_groups(group_sizes, m, cfg.bm)
    ie, r0, r1 = items
    xp = jnp.pad(x.astype(jnp.bfloat16), ((0, cfg.bm), (0, 0)))
    if cfg.programs:
        kernel = functools.partial(_bf16_persistent_kernel, cfg=cfg, k=k, n=n, w_nk=w_nk)
        grid, args = (cfg.programs,), (_active_tiles(items, n, cfg.bn), ie, r0, r1)
    else:
        kernel = functools.partial(_bf16_kernel, cfg=cfg, k=k, w_nk=w_nk)
        grid, args = (ie.shape[0], n // cfg.bn), (ie, r0, r1)
    scale = () if expert_scale is None else (
        jnp.asarray(expert_scale, jnp.float32).reshape(w.shape[0]),)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m + cfg.bm, n), jnp.bfloat16),
        grid=grid,
        compiler_params=plgpu.CompilerParams(num_warps=cfg.num_warps, num_stages=cfg.num_stages),
        interpret=_interpret(),
        name="bf16_grouped_matmul",
    )(*args, xp, w.astype(jnp.bfloat16), *scale)
    out = out[:m]
    return _zero_rows_past(out, group_sizes, m) if cfg.programs else out


def default_wgrad_config(k: int, n: int) -> Config:
    """Weight-gradient tiles: 64 rows per step into a 128 x 128 f32 accumulator where K and N
    allow (the largest of 128/64/32/16 dividing each)."""
    bk = next((b for b in (128, 64, 32, 16) if k % b == 0), None)
    bn = next((b for b in (128, 64, 32, 16) if n % b == 0), None)
    if bk is None or bn is None:
        raise ValueError(f"weight gradient: K={k} and N={n} must be multiples of 16")
    return Config(bm=64, bn=bn, bk=bk, num_warps=8 if bk * bn >= 128 * 128 else 4, num_stages=3)


def grouped_bf16_wgrad(x, dy, group_sizes, cfg: Config | None = None):
    """The grouped matmul's weight gradient: x[M,K], dy[M,N] (rows sorted by expert) ->
    f32 [E,K,N] with ``dw[e] = x[rows of e]^T @ dy[rows of e]`` (bf16 inputs, f32 accumulation;
    rows past sum(group_sizes) are ignored, an empty expert gets zeros)."""
    m, k = x.shape
    if dy.shape[0] != m:
        raise ValueError(f"x has {m} rows, dy {dy.shape[0]}")
    n = dy.shape[1]
    e = group_sizes.shape[0]
    cfg = cfg or default_wgrad_config(k, n)
    if k % cfg.bk or n % cfg.bn:
        raise ValueError(f"K={k}, N={n} do not tile with {cfg}")
    ends = jnp.minimum(jnp.cumsum(group_sizes.astype(jnp.int32)), m)
    starts = jnp.concatenate([jnp.zeros((1,), jnp.int32), ends[:-1]])
    pad = ((0, cfg.bm), (0, 0))
    return pl.pallas_call(
        functools.partial(_bf16_wgrad_kernel, cfg=cfg),
        out_shape=jax.ShapeDtypeStruct((e, k, n), jnp.float32),
        grid=(e, k // cfg.bk, n // cfg.bn),
        compiler_params=plgpu.CompilerParams(num_warps=cfg.num_warps, num_stages=cfg.num_stages),
        interpret=_interpret(),
        name="bf16_grouped_matmul_wgrad",
    )(starts, ends, jnp.pad(x.astype(jnp.bfloat16), pad), jnp.pad(dy.astype(jnp.bfloat16), pad))
