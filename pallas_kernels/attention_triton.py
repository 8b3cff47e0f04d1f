"""Pallas (Triton backend) split-K decode attention over a bf16 or FP4 (NVFP4 / MXFP4) KV cache.

Shapes (letters): B batch, H kv heads, G query heads per kv head (padded to Gp >= 16 for the MMA
in the bf16 kernel; to max(8, G) in the FP4 kernel, which puts the heads on the MMA's N side: see
``_fp4_kernel_v3``),
S max cache length, D head_dim, D2 = D / 2 packed FP4 bytes, NB = D / block FP4 scales per row,
P number of KV splits (flash-decoding), C = S / P rows per split, BK rows per inner step.

Grid (B, H, P) (the v3+ kernels launch it as (P, H, B) by default, ``split_order="inner"``: a
head's splits together): one program per (sequence, kv head, split). It loads the G query heads
of its group once, streams its C cache rows in BK-row steps, decodes every K/V element once and
feeds all G heads from it through one MMA, keeping an online softmax in f32 (base 2). Partial
(acc, m, l) go to HBM; :func:`combine` merges the P splits in XLA (the default v3+ kernels:
:func:`combine_transposed_halves_pallas`, a second small Pallas kernel).

FP4 decode (inline PTX, "v2 decode" below). A code ``s e1 e0 m`` becomes the bf16 bit pattern
``s<<15 | (e1 e0 m)<<6``, whose value is exactly ``E2M1(code) * 2**-126``; one bf16 multiply by
the block scale (times ``2**KSHIFT``, folded back into the score scale and the output) rebuilds
``code * block_scale`` exactly (<= 6 significant bits). The NVFP4 per-row global scale ``g`` is
not applied per element: it scales the score column (``s[:, t] *= g_k[t]``) and the probability
column before P@V (``p[:, t] * g_v[t]``). The FP4 versions v3-v6 differ in the cache layouts they
read and in how they feed the MMAs; v1 (f16 decode) and v2 (heads padded to 16 MMA rows) were
removed in session 33 (NOTES_attention.md keeps their measurements; commit 1c719b4 their code).

Packed layout without a shuffle: byte i holds elements 2i (low nibble) and 2i+1 (high nibble),
so ``q.k = q_even . k_lo + q_odd . k_hi`` and ``o_even = p @ v_lo``, ``o_odd = p @ v_hi``; the
wrapper splits q into even/odd columns and interleaves the output. Both nibbles of byte i share
the block scale of element 2i, i.e. scale column ``i // (block/2)``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels import kv_layout as KL
from trace_jax.checks import check_per_sequence
from trace_jax.quant import QTensor

LOG2E = 1.4426950408889634
_NEG = -1e30  # finite "minus infinity" for the running max (keeps exp2(m_old - m_new) finite)


def _pick_splits(batch, kv_heads, n_blocks, target_programs=2048, min_blocks_per_split=2,
                 max_blocks_per_split=None):
    """A divisor P of n_blocks. Without ``max_blocks_per_split`` (the old rule): the smallest
    with B*H*P >= target, starting at most at n_blocks / min_blocks_per_split (a block count
    without a divisor there gets a larger P). With it (the FP4 rule): the smallest in [want,
    cap], want = max(B*H*P >= target, n_blocks / P <= max_blocks_per_split) and cap =
    n_blocks / min_blocks_per_split, else the largest divisor below want, so that a split
    never holds fewer than min_blocks_per_split blocks (unless n_blocks itself is fewer)."""
    want = max(1, -(-target_programs // (batch * kv_heads)))
    if max_blocks_per_split:
        want = max(want, -(-n_blocks // max_blocks_per_split))
    cap = max(1, n_blocks // min_blocks_per_split)
    want = min(want, cap)
    if max_blocks_per_split is None:
        return next(p for p in range(want, n_blocks + 1) if n_blocks % p == 0)
    above = [p for p in range(want, cap + 1) if n_blocks % p == 0]
    return above[0] if above else max(p for p in range(1, want) if n_blocks % p == 0)


def default_splits(b: int, h: int, n_blocks: int, step: int, decode: str | None,
                   num_warps: int) -> int:
    """The split count a call without ``num_splits`` gets (``SPLIT_TARGET`` None): the FP4
    rule for decode v6 (``FP4_SPLIT_TARGET``, ``FP4_SPLIT_ROWS``; ``step`` = cache rows per
    block), else the old rule of 8192 // num_warps programs (at least 2048)."""
    if SPLIT_TARGET is None and decode == "v6":
        lo = max(1, -(-FP4_SPLIT_ROWS[0] // step))
        hi = max(1, FP4_SPLIT_ROWS[1] // step)
        return _pick_splits(b, h, n_blocks, FP4_SPLIT_TARGET, min_blocks_per_split=lo,
                            max_blocks_per_split=hi)
    return _pick_splits(b, h, n_blocks, SPLIT_TARGET or max(2048, 8192 // num_warps))


# The split rule of the v6 FP4 kernel when a call names neither ``num_splits`` nor a split
# target (session 19, NVFP4 v6 on the H200, 19b, 8 shapes B 8..128 x 8K..128K,
# NOTES_attention.md): at least FP4_SPLIT_TARGET programs (B * H * P), at most
# FP4_SPLIT_ROWS[1] cache rows per split (one program), at least FP4_SPLIT_ROWS[0]. Best or within
# 3.6% of the best of 7 split choices at each shape; the old rule (8192 programs, >= 2 blocks per
# split) was up to 1.44x slower at small batch (8 x 8K: 30.7 us vs 21.3). MXFP4 v6 (19c): within
# 5.1% of its best except 8 x 32K (+11%). v3-v5 keep the old rule (their knobs were tuned on it).
FP4_SPLIT_TARGET = 4096
FP4_SPLIT_ROWS = (256, 1024)


# ---------------------------------------------------------------------------------------------
# Kernels


def _online_softmax_step(s, valid, m, l):
    s = jnp.where(valid[None, :], s, -jnp.inf)
    m_new = jnp.maximum(m, jnp.max(s, axis=1))
    alpha = jnp.exp2(m - m_new)
    p = jnp.exp2(s - m_new[:, None])
    l_new = l * alpha + jnp.sum(p, axis=1)
    return p, alpha, m_new, l_new


def _bf16_kernel(len_ref, q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, *, block_k, chunk, scale,
                 precision):
    j = pl.program_id(2)
    length = len_ref[0]
    start = j * chunk
    n = jnp.clip(length - start, 0, chunk)
    nblk = (n + block_k - 1) // block_k
    q = q_ref[...]
    gp, d = q.shape

    def body(i, carry):
        acc, m, l = carry
        off = i * block_k
        valid = (off + jax.lax.broadcasted_iota(jnp.int32, (block_k,), 0)) < n
        rows = pl.ds(pl.multiple_of(off, block_k), block_k)
        k = plgpu.load(k_ref.at[rows, :], mask=valid[:, None], other=0.0)
        s = jnp.dot(q, k.T, preferred_element_type=jnp.float32) * scale
        p, alpha, m, l = _online_softmax_step(s, valid, m, l)
        v = plgpu.load(v_ref.at[rows, :], mask=valid[:, None], other=0.0)
        acc = acc * alpha[:, None] + _pv_dot(p, v, precision)
        return acc, m, l

    init = (jnp.zeros((gp, d), jnp.float32), jnp.full((gp,), _NEG, jnp.float32),
            jnp.zeros((gp,), jnp.float32))
    acc, m, l = jax.lax.fori_loop(0, nblk, body, init)
    o_ref[...] = acc.astype(o_ref.dtype)
    m_ref[...] = m
    l_ref[...] = l


def _fp4_refs_and_rows(rest, fmt, len_ref, chunk, split_axis=2):
    """The FP4 kernels' trailing refs (NVFP4 adds the K/V per-row global scales; None for MXFP4)
    and the number of valid cache rows in this program's split (grid axis ``split_axis``)."""
    kg_ref, vg_ref = (rest[0], rest[1]) if fmt == "nvfp4" else (None, None)
    oe_ref, oo_ref, m_ref, l_ref = rest[-4:]
    n = jnp.clip(len_ref[0] - pl.program_id(split_axis) * chunk, 0, chunk)
    return kg_ref, vg_ref, oe_ref, oo_ref, m_ref, l_ref, n



# --- v2 decode: 2 codes per 32-bit op (inline PTX), block scale applied in bf16x2 -------------
#
# A nibble ``s e1 e0 m`` becomes the bf16 bit pattern ``s<<15 | (e1 e0 m)<<6``, whose value is
# exactly ``E2M1(code) * 2**-126`` (code 1 = 0.5 is the bf16 subnormal 2**-127; bf16 arithmetic
# on sm_90 keeps subnormals: there is no .ftz form of mul.bf16x2). Per 32-bit word of 4 code
# bytes: ``prmt`` spreads bytes (b0, b1) and (b2, b3) into 16-bit lanes; per lane pair
# ``((t & 0x000F000F) * 0x1040) & 0x81C081C0`` puts both low nibbles in place at once (one
# multiply = two shifts, sign to bit 15 and magnitude to bits 8..6), ``0x00F000F0 / 0x104`` the
# high nibbles; one ``mul.rn.bf16x2`` by the block scale ``S = scale * 2**KSHIFT`` (bf16, exact)
# gives ``code * scale * 2**(KSHIFT - 126)`` exactly (<= 6 significant bits, no rounding). The
# remaining ``2**(126 - KSHIFT)`` is folded into the f32 score scale (K) and the final
# accumulator (V). KSHIFT keeps S and the products normal: nvfp4 scales lie in [2**-9, 448];
# mxfp4 (power-of-two scales 2**e) is exact for e in [-96, 37] (|block amax| < 2**40), outside
# that window S overflows / products underflow.
KSHIFT = {"nvfp4": 118, "mxfp4": 90}


def _asm_half(nibble_mask, mul):
    return f"""{{
.reg .b32 t0, t1, a, z;
mov.b32 z, 0;
prmt.b32 t0, $2, z, 0x4140;
prmt.b32 t1, $2, z, 0x4342;
and.b32 a, t0, {nibble_mask}; mul.lo.u32 a, a, {mul}; and.b32 a, a, 0x81C081C0;
mul.rn.bf16x2 $0, a, $3;
and.b32 a, t1, {nibble_mask}; mul.lo.u32 a, a, {mul}; and.b32 a, a, 0x81C081C0;
mul.rn.bf16x2 $1, a, $4;
}}"""


_ASM_LO = _asm_half("0x000F000F", "0x1040")
_ASM_HI = _asm_half("0x00F000F0", "0x104")
def nibble_bits_bf16(n):
    """bf16 bit pattern (uint32, low 16 bits) that the kernel builds for nibble ``n`` (uint32
    0..15): ``(n * 0x1040) & 0x81C0``, whose value is ``E2M1(n) * 2**-126``."""
    return (n * jnp.uint32(0x1040)) & jnp.uint32(0x81C0)


def asm_word_emulation(w, s_pair0, s_pair1, nibble_mask, mul):
    """The inline-asm decode of one 32-bit word ``w`` (4 code bytes) in uint32 arithmetic:
    returns the two output words (bf16x2 bit patterns *before* the scale multiply) exactly as the
    PTX computes them; ``s_pair*`` are unused here (the multiply is exact, see
    :func:`emulate_decode`). For tests on CPU, where inline asm cannot run."""
    del s_pair0, s_pair1
    t0 = (w & 0xFF) | ((w & 0xFF00) << 8)  # prmt 0x4140: [b0, 0, b1, 0]
    t1 = ((w >> 16) & 0xFF) | ((w >> 24) << 16)  # prmt 0x4342: [b2, 0, b3, 0]
    out = []
    for t in (t0, t1):
        out.append((((t & nibble_mask) * mul) & 0xFFFFFFFF) & 0x81C081C0)
    return out


def emulate_decode(bits, s_bf16):
    """Value of ``mul.rn.bf16x2(bits, S)`` for the kernel's code patterns, without subnormal
    arithmetic (XLA on CPU flushes subnormals): reads sign / exponent / mantissa bit of ``bits``
    (exponent 0..3) back to ``E2M1 * 2**-126`` and multiplies by ``S * 2**-126`` instead."""
    e = (bits >> 7) & jnp.uint32(0xFF)
    m = (bits >> 6) & jnp.uint32(1)
    mf = m.astype(jnp.float32)
    pow2 = jnp.where(e == 1, 1.0, jnp.where(e == 2, 2.0, jnp.where(e == 3, 4.0, jnp.nan)))
    mag = jnp.where(e == 0, 0.5 * mf, (1.0 + 0.5 * mf) * pow2)
    val = jnp.where(((bits >> 15) & 1) == 1, -mag, mag)
    return (val * (s_bf16.astype(jnp.float32) * float(2.0 ** -126))).astype(jnp.bfloat16)


# How MXFP4's NaN scale byte (255) becomes NaN: None picks by tile rows (``mxfp4_nan_path``);
# "select" or "fadd" forces one path (experiments/ab_mxfp4_scale_path.py). Both give the same
# bf16 value for every byte.
MXFP4_NAN_PATH = None


def mxfp4_nan_path(block_k: int) -> str:
    """The MXFP4 NaN path the kernel uses with ``block_k``-row tiles (outputs identical): "fadd"
    (``f + (f - f)``, float pipe) at <= 32 rows (the defaults), where it was 1-8% faster than the
    compare and select on an H100 (session 36) and 6-9% on an H200 (session 38), f32 and bf16
    P; "select" at 64 rows, where fadd was 5-9% (H100) and 7-8% (H200) slower."""
    if MXFP4_NAN_PATH is not None:
        return MXFP4_NAN_PATH
    return "fadd" if block_k <= 32 else "select"


def _scale_bf16(s_u8, fmt, nan_path="fadd"):
    """[BK, NB] uint8 block scales -> bf16 ``scale * 2**KSHIFT`` (exact; NaN scale stays NaN).
    MXFP4 builds 2**(b - 127) in the f32 exponent (b = 255 gives inf), then ``nan_path`` turns
    that inf into NaN: "fadd" adds ``f - f`` (NaN exactly there, 0 elsewhere; two FADDs on the
    float pipe), "select" is ``where(b == 255, nan, f)`` (a compare and a select on the integer
    pipe)."""
    if fmt == "nvfp4":
        sf = jax.lax.bitcast_convert_type(s_u8, jnp.float8_e4m3fn).astype(jnp.float32)
    else:
        b = s_u8.astype(jnp.uint32)
        f = jax.lax.bitcast_convert_type(b << 23, jnp.float32)
        if nan_path == "fadd":
            sf = f + (f - f)
        elif nan_path == "select":
            sf = jnp.where(b == 255, jnp.nan, f)
        else:
            raise ValueError(f"nan_path must be 'fadd' or 'select', got {nan_path!r}")
    return (sf * float(2.0 ** KSHIFT[fmt])).astype(jnp.bfloat16)


def _expand_cols(a, d2):
    """[BK, NB] -> [BK, D2]: each block's value repeated over its D2 / NB packed bytes."""
    bk, nb = a.shape
    return jnp.broadcast_to(a[:, :, None], (bk, nb, d2 // nb)).reshape(bk, d2)


def _unpack_words(w, d2):
    """[BK, D2/4] uint32 words (4 code bytes each, little endian: byte k of word j = code byte
    4j + k) -> [BK, D2] uint8. Written as shifts, truncations and two-level joins so that Triton
    keeps the bytes in the 32-bit registers they were loaded in (v4: no per-byte repacking)."""
    p = [(w >> (8 * k)).astype(jnp.uint8) for k in range(4)]
    c = jnp.stack([jnp.stack([p[0], p[2]], -1), jnp.stack([p[1], p[3]], -1)], -1)
    return c.reshape(w.shape[0], d2)  # [BK, D2/4, 2, 2]: (i, j) -> byte 2i + j


def _decode_v2(codes, s_bf16, fmt, interpret):
    """codes [BK, D2] uint8, s_bf16 [BK, D2] bf16 -> (lo, hi) bf16 ``code * S * 2**-126``."""
    if interpret:  # the same arithmetic in plain JAX (inline asm cannot run in interpret mode)
        c = codes.astype(jnp.uint32)
        return (emulate_decode(nibble_bits_bf16(c & 0xF), s_bf16),
                emulate_decode(nibble_bits_bf16(c >> 4), s_bf16))
    shape = [jax.ShapeDtypeStruct(codes.shape, jnp.bfloat16)]
    [lo] = plgpu.elementwise_inline_asm(_ASM_LO, args=[codes, s_bf16], constraints="=r,=r,r,r,r",
                                        pack=4, result_shape_dtypes=shape)
    [hi] = plgpu.elementwise_inline_asm(_ASM_HI, args=[codes, s_bf16], constraints="=r,=r,r,r,r",
                                        pack=4, result_shape_dtypes=shape)
    return lo, hi


def _decode_kw(codes, s_bf16, interpret):
    """v5 / v6 decode: codes [BK, D2] uint8 in the :mod:`kv_layout` word layout (4 bytes = one
    word), s_bf16 [BK, D2] -> (lo, hi) bf16 ``code * S * 2**-126`` of the even / odd head dims,
    the same values :func:`_decode_v2` gives for the natural layout, in 8 integer ops per word."""
    if interpret:
        bk, d2 = codes.shape
        w = jax.lax.bitcast_convert_type(codes.reshape(bk, d2 // 4, 4), jnp.uint32)
        pairs = KL.emulate_pairs(w)
        halves = [[p & 0xFFFF, p >> 16] for p in pairs]
        lo = jnp.stack(halves[0] + halves[1], -1).reshape(bk, d2)
        hi = jnp.stack(halves[2] + halves[3], -1).reshape(bk, d2)
        return emulate_decode(lo, s_bf16), emulate_decode(hi, s_bf16)
    shape = [jax.ShapeDtypeStruct(codes.shape, jnp.bfloat16)]
    [lo] = plgpu.elementwise_inline_asm(KL.asm_text("lo"), args=[codes, s_bf16],
                                        constraints="=r,=r,r,r,r", pack=4,
                                        result_shape_dtypes=shape)
    [hi] = plgpu.elementwise_inline_asm(KL.asm_text("hi"), args=[codes, s_bf16],
                                        constraints="=r,=r,r,r,r", pack=4,
                                        result_shape_dtypes=shape)
    return lo, hi


def _pv_dot(p_f32, v, precision):
    """p [Gp, BK] f32 @ v [BK, X] bf16 -> f32. ``precision="bf16"`` rounds p to bf16 (one MMA);
    ``"f32"`` splits p = hi + lo into two bf16 terms (two MMAs, p kept to ~2**-17 relative)."""
    hi = p_f32.astype(jnp.bfloat16)
    out = jnp.dot(hi, v, preferred_element_type=jnp.float32)
    if precision == "f32":
        lo = (p_f32 - hi.astype(jnp.float32)).astype(jnp.bfloat16)
        out = out + jnp.dot(lo, v, preferred_element_type=jnp.float32)
    return out


# --- v3: transposed MMAs (K rows on the MMA's M side, the G query heads on N = 8) ---------------
#
# Why (NOTES_attention.md, v3): v2 computed with Q and acc padded to Gp = 16 rows for G = 8 real
# heads (half its MMAs on zero rows; 252 registers per thread at 1 warp). Here
# S^T [BK, Gq] = K [BK, D] @ Q^T [D, Gq] and O^T [D, Gq] += V^T [D, BK] @ P^T [BK, Gq] with
# Gq = max(8, G) (mma.sync m16n8k16 takes N = 8): no padded rows in q, acc, the MMAs, the
# softmax, or the partial outputs written to HBM. ``chains`` > 1 processes that many BK-row
# chunks per iteration with independent (acc, m, l), merged at the end (ILP for the scheduler).
# Measured on the H200: 1.07-1.25x v2 at 32K+ contexts, about its instruction cut per cache row
# (-20%); more resident warps (BK=16: 130 registers) or chains=2 did not add speed: the loop is
# bound by the (half-rate) integer work of the decode and its operand plumbing, not occupancy.
# v4 (decode="v4") is this kernel with the V codes passed as uint32 words (``_unpack_words``):
# with uint8 V tiles, Triton prefetched the codes into registers one byte per register across
# the loop back-edge and rebuilt 32-bit words for the asm (~6 PRMT/LOP3 per cache row); as
# words they go through cp.async / shared memory like K (NOTES_attention.md, v4).


def _fp4_kernel_v3(len_ref, qe_ref, qo_ref, kc_ref, ks_ref, vc_ref, vs_ref, *rest,
                   fmt, block_k, chunk, scale, precision, interpret, chains, k_words=False,
                   v_words=False, split_axis=2, late_vt=False):
    kg_ref, vg_ref, oe_ref, oo_ref, m_ref, l_ref, n = _fp4_refs_and_rows(rest, fmt, len_ref, chunk,
                                                                         split_axis)
    step = block_k * chains
    nblk = (n + step - 1) // step
    qe = qe_ref[...]  # [D2, Gq] bf16
    qo = qo_ref[...]
    d2, gq = qe.shape
    unit = float(2.0 ** (126 - KSHIFT[fmt]))
    nan_path = mxfp4_nan_path(block_k)

    def load_half(c_ref, s_ref, rows, valid):
        c = plgpu.load(c_ref.at[rows, :], mask=valid[:, None], other=0)
        sc = plgpu.load(s_ref.at[rows, :], mask=valid[:, None], other=0)
        sf = _expand_cols(_scale_bf16(sc, fmt, nan_path), d2)
        return _decode_kw(c, sf, interpret) if k_words else _decode_v2(c, sf, fmt, interpret)

    def load_half_t(c_ref, s_ref, rows, valid):
        """V codes transposed *before* the decode: [D2, BK] tiles, so that the MMA operand
        layout can be read from shared memory (transposed) with no bf16 round trip."""
        c = plgpu.load(c_ref.at[rows, :], mask=valid[:, None], other=0)
        if c.dtype == jnp.uint32:  # v4: V codes passed as 32-bit words
            c = _unpack_words(c, d2)
        sc = plgpu.load(s_ref.at[rows, :], mask=valid[:, None], other=0)
        sf = _expand_cols(_scale_bf16(sc, fmt, nan_path), d2)
        if v_words:  # V in the word layout too: decode [BK, D2], then transpose the bf16 planes
            lo, hi = _decode_kw(c, sf, interpret)
            return (lo, hi) if late_vt else (lo.T, hi.T)  # late_vt: each at its own MMA
        return _decode_v2(c.T, sf.T, fmt, interpret)

    as_vt = (lambda x: x.T) if v_words and late_vt else (lambda x: x)

    def pv(vt, p):  # vt [D2, BK] bf16, p [BK, Gq] f32 -> vt @ p [D2, Gq] f32
        hi = p.astype(jnp.bfloat16)
        out = jnp.dot(vt, hi, preferred_element_type=jnp.float32)
        if precision == "f32":
            lo = (p - hi.astype(jnp.float32)).astype(jnp.bfloat16)
            out = out + jnp.dot(vt, lo, preferred_element_type=jnp.float32)
        return out

    def chunk_step(off, acc_e, acc_o, m, l):
        valid = (off + jax.lax.broadcasted_iota(jnp.int32, (block_k,), 0)) < n
        rows = pl.ds(pl.multiple_of(off, block_k), block_k)
        k_lo, k_hi = load_half(kc_ref, ks_ref, rows, valid)
        s = jnp.dot(k_lo, qe, preferred_element_type=jnp.float32)
        s = s + jnp.dot(k_hi, qo, preferred_element_type=jnp.float32)  # [BK, Gq]
        if fmt == "nvfp4":
            kg = plgpu.load(kg_ref.at[rows], mask=valid, other=0.0)
            s = s * (kg * (scale * unit))[:, None]
        else:
            s = s * (scale * unit)
        s = jnp.where(valid[:, None], s, -jnp.inf)
        m_new = jnp.maximum(m, jnp.max(s, axis=0))
        alpha = jnp.exp2(m - m_new)
        p = jnp.exp2(s - m_new[None, :])
        l = l * alpha + jnp.sum(p, axis=0)
        v_lo, v_hi = load_half_t(vc_ref, vs_ref, rows, valid)
        if fmt == "nvfp4":
            vg = plgpu.load(vg_ref.at[rows], mask=valid, other=0.0)
            p = p * vg[:, None]
        acc_e = acc_e * alpha[None, :] + pv(as_vt(v_lo), p)
        acc_o = acc_o * alpha[None, :] + pv(as_vt(v_hi), p)
        return acc_e, acc_o, m_new, l

    def body(i, carry):
        out = []
        for c in range(chains):
            out.append(chunk_step(i * step + c * block_k, *carry[c]))
        return tuple(out)

    zero = (jnp.zeros((d2, gq), jnp.float32), jnp.zeros((d2, gq), jnp.float32),
            jnp.full((gq,), _NEG, jnp.float32), jnp.zeros((gq,), jnp.float32))
    res = jax.lax.fori_loop(0, nblk, body, tuple(zero for _ in range(chains)))
    acc_e, acc_o, m, l = res[0]
    for c in range(1, chains):  # merge the independent chains (same formula as combine)
        ae, ao, mc, lc = res[c]
        mx = jnp.maximum(m, mc)
        w0, w1 = jnp.exp2(m - mx), jnp.exp2(mc - mx)
        acc_e = acc_e * w0[None, :] + ae * w1[None, :]
        acc_o = acc_o * w0[None, :] + ao * w1[None, :]
        l = l * w0 + lc * w1
        m = mx
    oe_ref[...] = (acc_e * unit).astype(oe_ref.dtype)
    oo_ref[...] = (acc_o * unit).astype(oo_ref.dtype)
    m_ref[...] = m
    l_ref[...] = l


# ---------------------------------------------------------------------------------------------
# Wrapper


def combine(acc_BHPGD, m_BHPG, l_BHPG):
    """Merge split partials (unnormalised acc, base-2 running max m, sum l) -> [B, H, G, D] f32."""
    mx = jnp.max(m_BHPG, axis=2, keepdims=True)
    w = jnp.exp2(m_BHPG - mx)  # [B, H, P, G]
    num = jnp.sum(acc_BHPGD.astype(jnp.float32) * w[..., None], axis=2)
    den = jnp.sum(l_BHPG * w, axis=2)
    return num / den[..., None]


# Programs (B * H * splits) the split count aims for when neither ``num_splits`` nor
# ``split_target`` is given; None = the v6 FP4 kernel's rows-per-split rule (FP4_SPLIT_TARGET,
# FP4_SPLIT_ROWS), else 8192 // num_warps (at least 2048). A module default so that a
# benchmark can change it for a whole model step (``bench_rollout.py --attn_split_target``); read
# at trace time, so set it before the first call.
SPLIT_TARGET: int | None = None


# Session 6 profile (30B decode step, B=27 x 128K): XLA fused the split reduction into the
# interleaving transpose and spent 148 us per layer there (plus 41 us on the other half's reduce)
# beside a 770 us attention kernel. The barrier keeps the reductions (over P, large) apart from
# the interleave (over the small reduced result). False restores the fused form (benchmarks).
COMBINE_BARRIER = True


def combine_transposed_halves(acc_e, acc_o, m, l):
    """Merge v3/v4 split partials (the even / odd output columns, transposed: [B, H, P, D2, Gq],
    with base-2 running max m and sum l [B, H, P, Gq]) -> [B, H, Gq, D] f32, columns interleaved."""
    mx = jnp.max(m, axis=2, keepdims=True)
    w = jnp.exp2(m - mx)  # [B, H, P, Gq]
    den = jnp.sum(l * w, axis=2)  # [B, H, Gq]
    halves = [jnp.sum(a.astype(jnp.float32) * w[:, :, :, None, :], axis=2) / den[:, :, None, :]
              for a in (acc_e, acc_o)]  # [B, H, D2, Gq]
    if COMBINE_BARRIER:
        halves = jax.lax.optimization_barrier(halves)
    out = jnp.stack(halves, axis=-1)  # [B, H, D2, Gq, 2]
    b, h, d2, gq, _ = out.shape
    return jnp.swapaxes(out, 2, 3).reshape(b, h, gq, 2 * d2)


# How the v3+ split partials merge by default (``decode_attention_triton(split_combine=None)``,
# read at trace time): "kernel" (a second Pallas kernel, combine_transposed_halves_pallas) or
# "xla" (combine_transposed_halves). Session 15 profile (30B 4-layer step, B=111 x 32K): XLA's
# reduction read the 58 MB of partials per layer at 1.8 TB/s (32 us beside a 726 us attention
# kernel); the Pallas combine took 21 us. (Session 16 measured a third way, the last split of
# each head merging inside the attention kernel: 2-9% slower at three of four shapes, 0.5%
# faster at 128 x 32K; removed, NOTES_attention.)
SPLIT_COMBINE = "kernel"
# The split partials' dtype (``decode_attention_triton(partial_dtype=None)``, read at trace
# time; ``bench_rollout.py --attn_partial_dtype``): f32, or None = the output dtype. Session 17
# (17a, NVFP4 v6, device time): bf16 partials cut the combine (20.6 -> 15.4 us at 111 x 32K)
# but the attention kernel ran 2.5% slower at 111 x 32K and 128 x 32K (same SASS count in its
# loop, another register / pipe mix), faster only at 32 x 32K (-4.6%) and for MXFP4 (-1%): f32
# stays.
PARTIAL_DTYPE = jnp.float32
SPLIT_COMBINES = ("kernel", "xla")  # (the choices of SPLIT_COMBINE)
# v6: transpose each decoded V plane at its own P.V MMA (``decode_attention_triton(late_vt=
# None)``, read at trace time). Session 39, sm_90 compile (`attention_compilecheck`): NVFP4 f32
# P 16.0 instead of 20.0 KB of shared memory (the two transposes share one buffer) at 168
# instead of 136 registers: 12 instead of 10 warps per SM, 32.1 instead of 32.4 SASS per row;
# MXFP4 f32 P 167 instead of 136 registers, 12 warps either way. On an H100 (session 39d):
# NVFP4 f32 P -0.5%, MXFP4 f32 P +4-7%. On the H200 (session 48, gpu_session39d.sh, device
# time, side by side, maxdiff 0): NVFP4 f32 P 2.0% / 1.1% faster at 111 x 32K / 27 x 128K
# (69.3 -> 70.7% / 68.9 -> 69.6% of copy); NVFP4 bf16 P 1.0% / 0.6% slower; MXFP4 f32 P 5.7% /
# 7.4% slower, MXFP4 bf16 P 1.9% / 0.7% faster (NOTES_attention session 48). Hence
# :func:`default_late_vt`: on for NVFP4 with f32 P only. None: that rule; a bool forces it.
# Session 49 (H100, device time, side by side, maxdiff 0; NOTES_attention session 49): NVFP4
# f32 P with late_vt 0.9-1.7% faster where a split holds 1024 cache rows (111 x 32K, 27 x 128K,
# 32 x 32K / 128K, 128 x 8K / 32K; 8 x 128K 1.6% slower), but 2.7-7.7% slower where it holds
# 256 (8 x 8K / 32K, 32 x 8K). Hence LATE_VT_MIN_ROWS: the rule asks for that many cache rows
# a split (capacity rows; a rollout's shorter lengths were not measured). Both read at trace time.
LATE_VT: bool | None = None
LATE_VT_MIN_ROWS = 1024


def _late_vt(late_vt, fmt, precision, split_rows) -> bool:
    """The late_vt a call runs: its argument, else ``LATE_VT``, else :func:`default_late_vt`."""
    if late_vt is None:
        late_vt = LATE_VT
    return default_late_vt(fmt, precision, split_rows) if late_vt is None else bool(late_vt)


def default_late_vt(fmt: str, precision: str, split_rows: int) -> bool:
    """Whether v6 transposes each V plane at its own MMA when neither ``late_vt`` nor
    ``LATE_VT`` says: for NVFP4 with f32 P where a split (one program) holds at least
    ``LATE_VT_MIN_ROWS`` cache rows, the case measured faster on the H200 (session 48) and the
    H100 (session 49); short splits ran slower with it on the H100."""
    return fmt == "nvfp4" and precision == "f32" and split_rows >= LATE_VT_MIN_ROWS


COMBINE_TD = 16  # D2 columns per combine program
COMBINE_WARPS = 4  # warps per combine program
# Splits the combine kernel reads per loop step (session 19): with the whole [P, 16, Gq] block in
# one load the call took 330 us at 8 x 128K and P = 256 against 227 us chunked (19b; the cause is
# not known: compiled for sm_90 that kernel used 212 registers and no local memory).
COMBINE_P_CHUNK = 32


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def combine_kernel_fits(p: int, d2: int, gq: int, td: int | None = None,
                        p_chunk: int | None = None) -> bool:
    """Whether :func:`combine_transposed_halves_pallas` tiles these partials with these knobs
    (None: the module defaults; Triton blocks are powers of two)."""
    td, p_chunk = td or COMBINE_TD, min(p, p_chunk or COMBINE_P_CHUNK)
    return all(map(_pow2, (p, gq, td, p_chunk))) and d2 % td == 0


def _combine_kernel(acc_e_ref, acc_o_ref, m_ref, l_ref, o_ref, *, p_chunk):
    m = m_ref[...]  # [P, Gq]
    mx = jnp.max(m, axis=0, keepdims=True)
    den = jnp.sum(l_ref[...] * jnp.exp2(m - mx), axis=0)  # [Gq]
    p, (td, gq) = m.shape[0], acc_e_ref.shape[1:]
    for half, a_ref in enumerate((acc_e_ref, acc_o_ref)):

        def body(i, num, a_ref=a_ref):  # P_CHUNK splits' weighted partials added to [TD, Gq]
            rows = pl.ds(pl.multiple_of(i * p_chunk, p_chunk), p_chunk)
            w = jnp.exp2(m_ref[rows, :] - mx)
            return num + jnp.sum(a_ref[rows, :, :].astype(jnp.float32) * w[:, None, :], axis=0)

        num = jax.lax.fori_loop(0, p // p_chunk, body, jnp.zeros((td, gq), jnp.float32))
        o_ref[:, :, half] = (num / den[None, :]).T.astype(o_ref.dtype)  # [Gq, TD]: 2 c + half


def combine_transposed_halves_pallas(acc_e, acc_o, m, l, *, out_dtype=jnp.float32,
                                     p_chunk=None, td=None, num_warps=None, interpret=False):
    """:func:`combine_transposed_halves` as one Pallas kernel: a program per (b, h, ``td`` of the
    D2 columns; default ``COMBINE_TD``) reads its [P, td, Gq] partials of both halves once,
    ``p_chunk`` splits at a time (default ``COMBINE_P_CHUNK``, at most P), and writes the
    interleaved [Gq, 2 td] output columns (no separate interleave pass) in ``out_dtype`` (one
    rounding of the f32 result: no separate convert pass); ``num_warps`` per program (default
    ``COMBINE_WARPS``). Same f32 arithmetic, in another summation order."""
    b, h, p, d2, gq = acc_e.shape
    p_chunk = min(p, p_chunk or COMBINE_P_CHUNK)
    td = td or COMBINE_TD
    if not combine_kernel_fits(p, d2, gq, td, p_chunk):
        raise ValueError(f"combine kernel: P={p}, p_chunk={p_chunk}, td={td} and Gq={gq} must be "
                         f"powers of two and D2={d2} a multiple of td")
    a_spec = pl.BlockSpec((None, None, p, td, gq), lambda i, j, c: (i, j, 0, c, 0))
    ml_spec = pl.BlockSpec((None, None, p, gq), lambda i, j, c: (i, j, 0, 0))
    out = pl.pallas_call(
        functools.partial(_combine_kernel, p_chunk=p_chunk),
        grid=(b, h, d2 // td),
        in_specs=[a_spec, a_spec, ml_spec, ml_spec],
        out_specs=pl.BlockSpec((None, None, gq, td, 2), lambda i, j, c: (i, j, 0, c, 0)),
        out_shape=jax.ShapeDtypeStruct((b, h, gq, d2, 2), out_dtype),
        compiler_params=plgpu.CompilerParams(num_warps=num_warps or COMBINE_WARPS,
                                             num_stages=1),
        interpret=interpret,
        name="decode_attention_combine",
    )(acc_e, acc_o, m, l)
    return out.reshape(b, h, gq, 2 * d2)


def tuned_knobs(fmt: str, decode: str) -> tuple[int, int, int]:
    """Default (block_k, num_warps, num_stages) of a cache format ("bf16", "nvfp4", "mxfp4") and
    FP4 kernel version: the best configs measured on the H200 (NOTES_attention.md; v3: run 3's
    sweep, v4: session 5's sweep, both B=32 x 32K; configs within ~15% of each other are within
    run-to-run noise). v6 MXFP4 takes (32, 1, 2) at either P precision: with bf16 P since
    session 30b (687.6 us against 797.2 at (64, 1, 2), 111 x 32K), with f32 P since session 38
    (742.6 against 764.4 us at 111 x 32K, 704.3 against 724.8 at 27 x 128K, its NaN path then
    being fadd: :func:`mxfp4_nan_path`)."""
    if fmt == "bf16":
        return 128, 8, 2
    return {"v3": (128, 4, 2) if fmt == "nvfp4" else (16, 1, 2),
            "v4": (32, 1, 3) if fmt == "nvfp4" else (64, 2, 2),
            "v5": (32, 1, 3) if fmt == "nvfp4" else (64, 2, 2),
            "v6": (32, 1, 3) if fmt == "nvfp4" else (32, 1, 2)}.get(decode, (32, 1, 2))


def default_version(k_cache, v_cache) -> str | None:
    """The FP4 kernel version ``decode=None`` runs on these caches (None for bf16 caches): v6 for
    K and V in the ``kv_layout`` word layout, v5 for only K in it, else v4 (v3 when head_dim is
    not a multiple of 8)."""
    if not isinstance(k_cache, QTensor):
        return None
    layouts = (k_cache.layout, v_cache.layout)
    return {(KL.LAYOUT, KL.LAYOUT): "v6", (KL.LAYOUT, "natural"): "v5"}.get(
        layouts, "v4" if (2 * k_cache.codes.shape[-1]) % 8 == 0 else "v3")


@functools.partial(
    jax.jit,
    static_argnames=("sm_scale", "block_k", "num_splits", "split_target", "num_warps",
                     "num_stages", "precision", "decode", "chains", "late_vt", "out_dtype",
                     "split_combine",
                     "split_order", "partial_dtype", "interpret"))
def decode_attention_triton(q, k_cache, v_cache, lengths, *, sm_scale, block_k=None,
                            num_splits=None, split_target=None, num_warps=None, num_stages=None,
                            precision="f32", decode=None, chains=None, late_vt=None,
                            out_dtype=jnp.bfloat16, split_combine=None, split_order=None,
                            partial_dtype=None, interpret=False):
    """See :func:`pallas_kernels.decode_attention.decode_attention`. q [B, Hq, D] bf16.

    ``precision``: ``"f32"`` (default) multiplies P @ V with P split into two bf16 terms (f32
    accuracy of P, two MMAs); ``"bf16"`` rounds P to bf16 (13-15% faster for
    NVFP4 v6 at 32K+, session 29, and 10% for MXFP4 v6 at its bf16-P knobs, session 30b; the
    model passes its rollout ``Numerics.attention_p``).
    ``decode`` (FP4 caches;
    bf16 caches ignore it; None = the version that reads the caches' layouts: ``"v6"`` for K and
    V in the ``kv_layout`` word layout (what ``trace_jax.attention.init_cache`` makes), ``"v5"``
    for only K in it, else ``"v4"`` when head_dim % 8 == 0, else ``"v3"``): ``"v6"`` (K and V
    decoded from the bit-permuted words, 8 integer ops per 8 codes instead of 14, V transposed
    after its decode: -15% SASS per cache row vs v4), ``"v5"`` (K only: -7%), ``"v4"`` (v3
    with the V codes read as 32-bit words: no per-byte register repacking, -13% SASS per cache
    row on sm_90; 1.3-1.5x v3 on the H200 at 32K+, within 2.4e-8 of v3; head_dim a multiple of
    8), ``"v3"`` (v2's inline-PTX decode with transposed MMAs, K rows on M and the query heads on
    N = 8, no padded heads; ``chains`` independent row chunks per iteration, default 1), the
    older ones kept for side-by-side measurement. ``late_vt`` (v6; None = ``LATE_VT``, and when
    that is None too :func:`default_late_vt`: NVFP4 with f32 P, splits of >= 1024 rows): each
    decoded V plane is transposed right before its own P.V MMA instead of both before the first,
    so that the two transposes' shared-memory buffers can be one. ``out_dtype``:
    the output dtype (f32 exposes the kernel's accuracy before the final rounding).
    ``split_target``: programs (B * H * splits) to aim for when ``num_splits`` is None, with at
    least 2 blocks per split; None = :func:`default_splits`: the module default ``SPLIT_TARGET``
    the same way, or when that is None too, for decode v6 the measured rule of
    ``FP4_SPLIT_TARGET`` / ``FP4_SPLIT_ROWS`` (>= 4096 programs, 256..1024 cache rows per split)
    and otherwise 8192 // num_warps programs (at least 2048).
    ``split_combine`` (v3+): how the split partials merge, ``"kernel"`` (a second Pallas
    kernel, :func:`combine_transposed_halves_pallas`, where the shapes tile: powers of two; else
    XLA's) or ``"xla"``; None = the module default ``SPLIT_COMBINE`` on the GPU, ``"xla"`` in
    interpret mode (the CPU tests: a second interpreted kernel per call costs seconds;
    ``tests/test_kernels_attention.py`` checks the kernel against the XLA combine explicitly).
    ``split_order`` (v3+): the launch order of the programs, ``"inner"`` (default: grid
    (P, H, B), the P splits of a head launch together and read one contiguous stretch of its
    cache; 0.2-1.0% faster on the H200, bit-identical) or ``"outer"`` (grid (B, H, P), the
    first split of every head, then the second, ...). ``partial_dtype``: the dtype of the split
    partial outputs written to HBM and read back by the combine (the running max and sum stay
    f32); None = the module default ``PARTIAL_DTYPE`` (f32; its None = ``out_dtype``). bf16
    partials are one bf16 rounding of each split's f32 accumulator before the f32 merge (f32
    when there is one split): half the partial bytes (~2.7% of the KV bytes at P = 32 splits),
    at an error of the order of the output's own bf16 rounding (vLLM's paged attention v2 and
    FlashInfer keep theirs in the output dtype); measured slower at the large shapes (see
    ``PARTIAL_DTYPE``)."""
    if split_combine not in (None, *SPLIT_COMBINES):
        raise ValueError(f"split_combine must be one of {SPLIT_COMBINES} or None, got "
                         f"{split_combine!r}")
    if split_combine is None:
        split_combine = "xla" if interpret else SPLIT_COMBINE
    if precision not in ("f32", "bf16"):
        raise ValueError(f"precision must be 'f32' or 'bf16', got {precision!r}")
    partial_dtype = jnp.dtype(partial_dtype or PARTIAL_DTYPE or out_dtype)
    if partial_dtype not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)):
        raise ValueError(f"partial_dtype must be float32 or bfloat16, got {partial_dtype}")
    if split_order not in (None, "outer", "inner"):
        raise ValueError(f"split_order must be 'outer', 'inner' or None, got {split_order!r}")
    fp4 = isinstance(k_cache, QTensor)
    layouts = (k_cache.layout, v_cache.layout) if fp4 else None
    if decode is None:
        decode = default_version(k_cache, v_cache) or "v4"  # (bf16 caches ignore it)
    if decode not in ("v3", "v4", "v5", "v6"):
        raise ValueError(f"decode must be one of v3 .. v6 (v1 / v2 were removed in session 33), "
                         f"got {decode!r}")
    b, hq, d = q.shape
    if fp4:
        if k_cache.axis != -1 or v_cache.axis != -1 or k_cache.fmt != v_cache.fmt:
            raise ValueError("FP4 caches must be quantized along the last axis, same format")
        want = {"v5": (KL.LAYOUT, "natural"), "v6": (KL.LAYOUT, KL.LAYOUT)}.get(
            decode, ("natural", "natural"))
        if layouts != want:
            raise ValueError(
                f"decode={decode!r} reads (K, V) caches in the layouts {want}; got {layouts} "
                "(pallas_kernels.kv_layout.to_kv_words / to_natural)")
        fmt = k_cache.fmt
        _, h, s, d2 = k_cache.codes.shape
        if 2 * d2 != d:
            raise ValueError(f"head_dim mismatch: q {d}, cache {2 * d2}")
    else:
        fmt = "bf16"
        _, h, s, dk = k_cache.shape
        if dk != d:
            raise ValueError(f"head_dim mismatch: q {d}, cache {dk}")
    if hq % h:
        raise ValueError(f"{hq} query heads are not a multiple of {h} kv heads")
    if tuple(k_cache.shape) != tuple(v_cache.shape) or k_cache.shape[0] != b:
        raise ValueError(f"caches K {tuple(k_cache.shape)} / V {tuple(v_cache.shape)} do not fit "
                         f"q {tuple(q.shape)}: both need [B, KV heads, S, D] with B = {b}")
    check_per_sequence("lengths", lengths, b, 1, s, "the cache's rows")
    tuned = tuned_knobs(fmt, decode)
    block_k = tuned[0] if block_k is None else block_k
    num_warps = tuned[1] if num_warps is None else num_warps
    num_stages = tuned[2] if num_stages is None else num_stages
    # v4 = the v3 kernel with V codes as 32-bit words; v5 / v6 = v4 with K / K and V in the
    # kv_layout words
    if fp4 and decode in ("v4", "v5", "v6") and d % 8:
        raise ValueError(f"decode={decode!r} needs head_dim % 8 == 0, got {d}")
    chains = (chains or 1) if fp4 else 1
    g = hq // h
    gp = max(8 if fp4 else 16, 1 << (g - 1).bit_length())
    block_k = min(block_k, max(16, 1 << (s - 1).bit_length()))
    while s % block_k and block_k > 16:
        block_k //= 2
    step = block_k * chains  # rows per loop iteration; a split holds a multiple of it
    pad = (-s) % step
    if pad:  # rare (S not a multiple of the block): pad the cache rows, they are masked anyway

        def padrows(a):
            return jnp.pad(a, [(0, 0), (0, 0), (0, pad)] + [(0, 0)] * (a.ndim - 3))

        if fp4:
            k_cache, v_cache = (
                jax.tree.map(padrows, c) if c.global_scale.shape[2] > 1 else dataclasses.replace(
                    c, codes=padrows(c.codes), scales=padrows(c.scales)) for c in (k_cache, v_cache))
        else:
            k_cache, v_cache = padrows(k_cache), padrows(v_cache)
        s += pad
    n_blocks = s // step
    if num_splits:
        p = num_splits
    elif split_target:
        p = _pick_splits(b, h, n_blocks, target_programs=split_target)
    else:
        p = default_splits(b, h, n_blocks, step, decode if fp4 else None, num_warps)
    if n_blocks % p:
        raise ValueError(f"num_splits={p} must divide the {n_blocks} cache blocks")
    if p == 1:  # nothing to merge: the f32 accumulator goes straight to the output rounding
        partial_dtype = jnp.dtype(jnp.float32)
    chunk = s // p
    scale = float(sm_scale) * LOG2E

    qg = q.reshape(b, h, g, d)
    if gp != g:
        qg = jnp.pad(qg, [(0, 0), (0, 0), (0, gp - g), (0, 0)])
    qg = qg.astype(jnp.bfloat16)
    lengths = lengths.astype(jnp.int32)

    grid = (b, h, p)
    len_spec = pl.BlockSpec((1,), lambda i, j, k: (i,))
    ml_spec = pl.BlockSpec((None, None, None, gp), lambda i, j, k: (i, j, k, 0))
    ml_shape = jax.ShapeDtypeStruct((b, h, p, gp), jnp.float32)
    params = plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages)

    def row_spec(width):
        return pl.BlockSpec((None, None, chunk, width), lambda i, j, k: (i, j, k, 0))

    if not fp4:
        kernel = functools.partial(_bf16_kernel, block_k=block_k, chunk=chunk, scale=scale,
                                   precision=precision)
        acc, m, l = pl.pallas_call(
            kernel,
            grid=grid,
            in_specs=[len_spec, pl.BlockSpec((None, None, gp, d), lambda i, j, k: (i, j, 0, 0)),
                      row_spec(d), row_spec(d)],
            out_specs=[pl.BlockSpec((None, None, None, gp, d), lambda i, j, k: (i, j, k, 0, 0)),
                       ml_spec, ml_spec],
            out_shape=[jax.ShapeDtypeStruct((b, h, p, gp, d), partial_dtype), ml_shape,
                       ml_shape],
            compiler_params=params,
            interpret=interpret,
            name="decode_attention_bf16",
        )(lengths, qg, k_cache.astype(jnp.bfloat16), v_cache.astype(jnp.bfloat16))
        out = combine(acc, m, l)
    else:
        # even / odd head dims, transposed [B, H, D2, Gq]: the query heads on the MMA's N side
        qe, qo = jnp.swapaxes(qg[..., 0::2], 2, 3), jnp.swapaxes(qg[..., 1::2], 2, 3)
        nb = k_cache.scales.shape[-1]
        u8 = lambda a: jax.lax.bitcast_convert_type(a, jnp.uint8)  # noqa: E731
        args = [lengths, qe, qo, k_cache.codes, u8(k_cache.scales), v_cache.codes,
                u8(v_cache.scales)]
        q_spec = pl.BlockSpec((None, None, d2, gp), lambda i, j, k: (i, j, 0, 0))
        in_specs = [len_spec, q_spec, q_spec, row_spec(d2), row_spec(nb), row_spec(d2),
                    row_spec(nb)]
        if fmt == "nvfp4":
            for c in (k_cache, v_cache):
                gs = c.global_scale
                if gs.shape[2] != s:
                    gs = jnp.broadcast_to(gs, (b, h, s, 1))
                args.append(gs.reshape(b, h, s))
            g_spec = pl.BlockSpec((None, None, chunk), lambda i, j, k: (i, j, k))
            in_specs += [g_spec, g_spec]
        if decode in ("v4", "v5", "v6"):
            # V codes as uint32 words (4 code bytes; a bitcast of the contiguous cache, no copy)
            args[5] = jax.lax.bitcast_convert_type(
                args[5].reshape(b, h, s, d2 // 4, 4), jnp.uint32)
            in_specs[5] = row_spec(d2 // 4)
        kernel = functools.partial(_fp4_kernel_v3, fmt=fmt, block_k=block_k, chunk=chunk,
                                   scale=scale, precision=precision, interpret=interpret,
                                   chains=chains, k_words=decode in ("v5", "v6"),
                                   v_words=decode == "v6",
                                   late_vt=_late_vt(late_vt, fmt, precision, chunk))
        o_block = (d2, gp)  # transposed partial outputs
        o_spec = pl.BlockSpec((None, None, None, *o_block), lambda i, j, k: (i, j, k, 0, 0))
        o_shape = jax.ShapeDtypeStruct((b, h, p, *o_block), partial_dtype)
        out_specs = [o_spec, o_spec, ml_spec, ml_spec]
        out_shape = [o_shape, o_shape, ml_shape, ml_shape]
        if (split_order or "inner") == "inner":  # grid (P, H, B)

            def inner(spec):
                return dataclasses.replace(
                    spec, index_map=lambda k, j, i, f=spec.index_map: f(i, j, k))

            grid, in_specs, out_specs = (p, h, b), [inner(x) for x in in_specs], [
                inner(x) for x in out_specs]
            kernel = functools.partial(kernel, split_axis=0)
        acc_e, acc_o, m, l = pl.pallas_call(
            kernel,
            grid=grid,
            in_specs=in_specs,
            out_specs=out_specs,
            out_shape=out_shape,
            compiler_params=params,
            interpret=interpret,
            name=f"decode_attention_{fmt}_{decode}",
        )(*args)
        if split_combine == "kernel" and combine_kernel_fits(p, d2, gp):
            out = combine_transposed_halves_pallas(acc_e, acc_o, m, l, out_dtype=out_dtype,
                                                   interpret=interpret)
        else:
            out = combine_transposed_halves(acc_e, acc_o, m, l).reshape(b, h, gp, d)
    return out[:, :, :g, :].reshape(b, hq, d).astype(out_dtype)


def kv_bytes(b, h, length, d, fmt):
    """HBM bytes of K and V that a decode step must read for `length` valid rows."""
    if fmt == "bf16":
        per_row = 2 * d
    elif fmt == "nvfp4":
        per_row = d // 2 + d // 16 + 4
    else:
        per_row = d // 2 + d // 32
    return 2 * b * h * length * per_row

