"""Fused activation quantize + mantissa-hint capture: one pass over x [M, K] (block axis -1).

    quantize_with_hint(x, fmt="nvfp4", *, global_scope="row", with_hint=True, backend="auto")
        -> (QTensor, Hint | None)
    quantize_with_hint(x, ..., values=jnp.bfloat16) -> (QTensor, Hint | None, [M, K] values)

``values``: the kernel also writes ``quant.dequantize(q, values)`` (what the rollout's next
matmul reads) from the codes and scales it holds, so no XLA pass unpacks the codes again.

Bit-identical to ``q = trace_jax.quant.quantize(x, fmt, axis=-1, global_scope=global_scope)`` and
``extract_hint(q)`` (codes, block scales, global scale and packed mantissa bits), NaN/Inf
behaviour included. The kernel follows quant.py's multiply-by-reciprocal spec step by step:

* nvfp4 ``g = amax * GLOBAL_FACTOR`` (f32(1/2688), a multiply), 1 where that is below f32's
  normal range (an all-zero row, or amax < ~3e-35: flushed to 0 on some devices), NaN when
  the row (per-tensor: the tensor) holds a NaN/Inf; ``inv = 1 / (6 g)`` once per row;
  ``scale = e4m3(min(amax_b * inv, 448))``, NaN for a block holding a NaN/Inf;
* ``r = 1 / (scale * g)`` once per block (0 where that is 0, NaN where NaN) and ``z = x * r``;
  the code is RNE E2M1 of ``z`` (sign bit from ``z``: ``x * 0`` keeps the sign of ``x``);
* every reciprocal is the IEEE correctly rounded ``div.rn.f32`` (inline PTX): Triton's own f32
  ``/`` lowers to the approximate ``div.full.f32``; no step is an add, so no FMA contraction;
* maxima are taken on the integer bit patterns of ``|x|`` (exact), and non-finite input is
  flagged from the same bits (``max |x| bits >= 0x7f800000``) -- never through a float max,
  which may drop NaN (Triton's float max ignores it);
* ``min(raw, 448)`` is written as a select that keeps NaN; E4M3 rounding is the hardware
  round-to-nearest-even convert; the E8M0 exponent is read from the float's exponent field.

Backends: ``"reference"`` (trace_jax.quant; the CPU fallback), ``"triton"`` (Pallas Triton,
``interpret=True`` on CPU), ``"auto"``: reference on CPU, triton on GPU.

Kernel: grid over row blocks of BM rows; the row is walked in power-of-two chunks of KC columns
(a static loop) that write codes (two per byte), scales and hint bits (eight per byte). For
``global_scope="row"`` nvfp4 all chunks of the row block are loaded, and their block maxima
taken, before any code (the row amax is the max of the block maxima); they stay in registers, so
x is read once (v3; v2 read it twice, ``single_walk=False``). ``global_scope="tensor"`` computes
the one global scale in XLA first (``quant._default_global_scale``, the reference's own code).

``variant="v4"`` (session 12) keeps the integer ALU pipe, which bounds this kernel on the H200,
for what only it can do: E2M1 rounding by one f32 add of a magic constant (:func:`_round_code`),
a block whose reciprocal is NaN zeroed by per-block limits instead of a per-element NaN test,
codes written as uint32 words of 8, the hint byte from a word by one multiply
(:func:`_hint_bytes`). ``variant="v5"`` (the default; session 13) is v4's arithmetic with a
layout in which one thread holds a whole block: x is viewed as [M, K / bs, bs / 8, 8] and each
eight-element part is its own [block_m, chunk / bs, 8] load, so the per-block steps (block max,
E4M3 scale, IEEE reciprocal) run once per block instead of in each of the 2 (NVFP4) or 4
(MXFP4) threads that v4's contiguous 8-element loads spread a block over (H200: 1.15-1.19x v4,
``experiments/gpu_sessions/gpu_session13q.sh``). ``variant="v3"`` is session 10's
compare-and-select rounding and byte packing. v3 and v4 are kept for side-by-side runs
(``sweep_quantize.py``).
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


def _recip(v, interpret):
    """Correctly rounded f32 reciprocal ``1 / v`` (quant._recip)."""
    return _div(jnp.ones_like(v), v, interpret)


def _bits(a):
    return jax.lax.bitcast_convert_type(a, jnp.uint32)


def _abs_bits2(a):
    """2 x the bit pattern of |a| (the sign shifted out by a multiply, on the FMA pipe, rather
    than masked by an ALU op): integer maxima of these are exact maxima of |a|."""
    return _bits(a) * jnp.uint32(2)


def _absmax_bits_last(a):
    """Bit pattern of max |a| over the last axis (integer max: exact, and >= 0x7f800000 iff a
    NaN or Inf is present)."""
    return jnp.max(_abs_bits2(a), axis=-1) >> 1


def _round_magnitude(a):
    """RNE E2M1 magnitude index of ``a >= 0`` (f32; NaN -> 0, >= 5+ saturates to 7), bit-identical
    to trace_jax.e2m1.round_magnitude's compare chain, in ~12 integer/float ops instead of 7
    compares + 7 selects (``variant="v3"``; v4 uses :func:`_round_code`):

    * ``a < 1``: index = round-half-even(2a) (0, 1, 2), read from the low bits of
      ``2a + 2**23`` (the f32 add rounds at the units bit, ties to even);
    * ``a >= 1``: E2M1 keeps one mantissa bit, so round the f32 bit pattern at bit 22 (RNE:
      add ``0x1FFFFF + bit22``), then ``(bits >> 22) - 252`` is the index (1.0 -> 2, 6.0 -> 7),
      clamped to 7 (also for Inf);
    * NaN (bits > 0x7f800000) -> 0.
    """
    b = _bits(a)
    small = _bits(a * jnp.float32(2.0) + jnp.float32(8388608.0)) - jnp.uint32(0x4B000000)
    big = ((b + jnp.uint32(0x1FFFFF) + ((b >> 22) & 1)) >> 22) - jnp.uint32(252)
    idx = jnp.where(b < jnp.uint32(0x3F800000), small, jnp.minimum(big, jnp.uint32(7)))
    return jnp.where(b > jnp.uint32(0x7F800000), jnp.uint32(0), idx)


def _round_code(z, lim, sign_mask):
    """RNE E2M1 code ``sign << 3 | magnitude index`` of f32 ``z`` with ``|z| < 2**100`` (the
    kernel's ``|x * r| <= ~9``), in ~11 ops of which ~6 on the integer ALU pipe (v3's
    :func:`_round_magnitude` + sign: ~16, ~12 on the ALU pipe, which the H200 profile found 86%
    busy, ``experiments/gpu_sessions/gpu_session12d.sh``). The rounding is one f32 add of a magic
    constant: with ``e = max(exponent(|z|), 0)``, ``|z| + 2**(e + 22)`` lands in the binade
    whose spacing is E2M1's step there (``2**(e - 1)``; 0.5 below 1), so the add rounds ``|z|``
    to the E2M1 grid, ties to even, and its low bits count the steps ``k``; the index is
    ``k + 2 e``, clamped to ``lim``. The integer bookkeeping is two multiply-adds (the FMA pipe).

    ``lim`` (7, or 0 for a block whose reciprocal is NaN) and ``sign_mask`` (8, or 0) broadcast
    to ``z``: such a block's codes are 0 whatever its ``z`` (NaN there; the reference's NaN -> 0
    with the sign of the canonical NaN, +), with no per-element NaN test."""
    zb = _bits(z)
    a = jnp.abs(z)
    e = jnp.maximum(_bits(a) >> 23, jnp.uint32(127))  # biased exponent of max(|z|, 1)
    magic = e * jnp.uint32(1 << 23) + jnp.uint32(22 << 23)  # bits of 2**(e - 127 + 22)
    s = _bits(a + jax.lax.bitcast_convert_type(magic, jnp.float32))  # = magic + k
    # index = k + 2 (e - 127) = s - (magic - 2 e + 254)
    off = e * jnp.uint32((1 << 23) - 2) + jnp.uint32((22 << 23) + 254)
    return jnp.minimum(s - off, lim) | ((zb >> 28) & sign_mask)


def _pair_split(v):
    """[..., 2n] -> (even columns, odd columns) [..., n] (tt.split: free when the pair is held by
    one thread, unlike a shifted sum over a reshaped group axis)."""
    *lead, n = v.shape
    a, b = jnp.unstack(v.reshape(*lead, n // 2, 2), axis=-1)
    return a, b


def _pack_last(v_u32, group, width, dtype=jnp.uint8):
    """Sum of v << (width * j) over consecutive groups of ``group`` (a power of two) along the
    last axis -> ``dtype``, built by log2(group) pair splits."""
    w = 0
    shift = width
    while (1 << w) < group:
        a, b = _pair_split(v_u32)
        v_u32 = a | (b << jnp.uint32(shift))
        shift *= 2
        w += 1
    return v_u32.astype(dtype)


def _hint_bytes(words):
    """Mantissa bits (bit 0 of each nibble) of uint32 words of 8 codes -> one byte per word,
    code j in bit j, with 4 integer ops and one multiply per 8 codes (v3: ~12 per 8). The
    multiply by 0x1248 = 2**12 + 2**9 + 2**6 + 2**3 moves bit 4i of each 16-bit half to bit
    12 + i of that half and every other product term to a distinct position (no carries), so
    bits 12..15 and 28..31 hold the half-words' four mantissa bits each."""
    x = ((words & jnp.uint32(0x11111111)) * jnp.uint32(0x1248)) & jnp.uint32(0xF000F000)
    return ((x >> 12) | (x >> 24)).astype(jnp.uint8)


def _code_values(code, s):
    """``e2m1.VALUES[code] * s`` in f32 for uint32 codes ``sign << 3 | magnitude index`` and
    block factors ``s`` (>= 0 or NaN; broadcast by the caller): the magnitude (index i < 4 is
    i / 2, 4..6 are i - 2, 7 is 6; exact, no table) times ``s``, then the code's sign bit
    OR-ed in, so code 8 gives -0 as the reference's -0.0 * s does (a float negation is
    ``0 - v`` on the GPU, +0). A NaN ``s`` only meets code 0 (NaN blocks store 0)."""
    i = (code & jnp.uint32(7)).astype(jnp.int32).astype(jnp.float32)
    v = jnp.where(i < 4.0, i * 0.5, jnp.where(i == 7.0, 6.0, i - 2.0))
    sign = (code & jnp.uint32(8)) << jnp.uint32(28)
    return jax.lax.bitcast_convert_type(_bits(v * s) | sign, jnp.float32)


def _qh_kernel(x_ref, g_ref, codes_ref, scales_ref, gs_ref, *out_refs, fmt, bs, kc, nk,
               row_scope, e4m3, single_walk, variant, interpret, with_hint, values):
    bits_ref = out_refs[:1] if with_hint else ()
    y_ref = out_refs[-1] if values is not None else None
    bm = x_ref.shape[0]
    nvfp4 = fmt == "nvfp4"
    inf_bits = jnp.uint32(0x7F800000)
    nbc = kc // bs
    parts = bs // 8 if variant == "v5" else 0  # v5: x_ref is [bm, K / bs, bs / 8, 8]

    def blocks(c):
        """Chunk c as f32 parts [bm, nbc, w] (v5: the bs / 8 eight-element parts of each block,
        one load each; else one part, w = bs) and its block maxima of |x| (bit patterns)."""
        if parts:
            xs = [x_ref[:, pl.ds(c * nbc, nbc), p, :].astype(jnp.float32) for p in range(parts)]
            amax2 = functools.reduce(jnp.maximum, [jnp.max(_abs_bits2(a), -1) for a in xs])
            return xs, amax2 >> 1
        xb = x_ref[:, pl.ds(c * kc, kc)].astype(jnp.float32).reshape(bm, nbc, bs)
        return [xb], _absmax_bits_last(xb)

    # single walk: with a row-scope global scale every chunk is loaded (and its block maxima
    # taken) before the codes, and stays in registers for them (``block_m * K`` elements per
    # program); the row amax is the max of the block maxima, in the blocks' own layout
    walked = [blocks(c) for c in range(nk)] if nvfp4 and row_scope and single_walk else None
    if nvfp4:
        if row_scope:  # elementwise maxima over the chunks, then one cross-thread reduction
            # (a reduction per chunk cost ~1.4 shuffle / max instructions per element)
            if walked:
                amax_bits = jnp.max(functools.reduce(jnp.maximum, [w[1] for w in walked]), -1)
            else:  # v2 (single_walk=False): a first walk for the amax only
                acc = None
                for c in range(nk):
                    b2 = (_abs_bits2(x_ref[:, pl.ds(c * kc, kc)].astype(jnp.float32)) if not parts
                          else blocks(c)[1])  # v5: block maxima (bits, not doubled)
                    acc = b2 if acc is None else jnp.maximum(acc, b2)
                amax_bits = jnp.max(acc, axis=-1) >> (0 if parts else 1)
            amax = jax.lax.bitcast_convert_type(amax_bits, jnp.float32)
            g = amax * jnp.float32(quant.GLOBAL_FACTOR)
            g = jnp.where(g < jnp.float32(quant.MIN_GLOBAL_SCALE), 1.0, g)  # (as quant's)
            g = jnp.where(amax_bits >= inf_bits, jnp.nan, g)  # NaN/Inf in the row
            gs_ref[...] = g[:, None]
        else:
            g = jnp.broadcast_to(g_ref[...].reshape(1), (bm,))
        inv6g = _recip(jnp.float32(6.0) * g, interpret)  # once per row
    for c in range(nk):
        xb, amax_b_bits = walked[c] if walked else blocks(c)  # [bm, nbc, bs], [bm, nbc]
        amax_b = jax.lax.bitcast_convert_type(amax_b_bits, jnp.float32)
        bad_b = amax_b_bits >= inf_bits
        if nvfp4:
            g2 = jnp.broadcast_to(g[:, None], (bm, nbc))
            raw = amax_b * jnp.broadcast_to(inv6g[:, None], (bm, nbc))
            raw = jnp.where(bad_b, jnp.nan, raw)
            raw = jnp.where(raw > 448.0, 448.0, raw)  # min(raw, 448), NaN kept
            if e4m3 == "via_f16":  # what XLA's GPU convert does (f32 -> f16 -> e4m3)
                s8 = raw.astype(jnp.float16).astype(jnp.float8_e4m3fn)
            else:  # one RNE rounding of the f32 value (numpy / XLA CPU semantics)
                s8 = raw.astype(jnp.float8_e4m3fn)
            sbyte = jax.lax.bitcast_convert_type(s8, jnp.uint8)
            s = s8.astype(jnp.float32) * g2
        else:
            e = (amax_b_bits >> 23).astype(jnp.int32) - 129  # floor(log2 amax) - 2 (normal)
            e = jnp.where(amax_b_bits > 0, e, -127)
            e = jnp.clip(e, -127, 127)
            b32 = jnp.where(bad_b, 255, e + 127).astype(jnp.uint32)
            sbyte = b32.astype(jnp.uint8)
            sf = jax.lax.bitcast_convert_type(b32 << 23, jnp.float32)
            s = jnp.where(b32 == 255, jnp.nan, sf) * 1.0  # e8m0_to_f32(scale) * g (g = 1)
        pos = s > 0
        r = jnp.where(pos, _recip(jnp.where(pos, s, 1.0), interpret),
                      jnp.where(s != s, jnp.nan, 0.0))  # once per block
        zs = [a * jnp.broadcast_to(r[:, :, None], a.shape) for a in xb]
        scales_ref[:, pl.ds(c * nbc, nbc)] = sbyte
        if variant in ("v4", "v5"):  # NaN blocks (r NaN: z NaN) get code 0 via the limits
            nan_b = r != r
            lim = jnp.where(nan_b, jnp.uint32(0), jnp.uint32(7))[:, :, None]
            sign_mask = jnp.where(nan_b, jnp.uint32(0), jnp.uint32(8))[:, :, None]
            for p, z in enumerate(zs):  # codes as uint32 words of 8 (no byte assembly)
                code = _round_code(z, jnp.broadcast_to(lim, z.shape),
                                   jnp.broadcast_to(sign_mask, z.shape))
                if y_ref is not None:  # dequantize(q): code value x (scale x g), in f32
                    y = _code_values(code, jnp.broadcast_to(s[:, :, None], code.shape))
                    if parts:
                        y_ref[:, pl.ds(c * nbc, nbc), p, :] = y.astype(values)
                    else:
                        y_ref[:, pl.ds(c * kc, kc)] = y.reshape(bm, kc).astype(values)
                if parts:  # one word per part: [bm, nbc] of the [bm, K / bs, parts] outputs
                    words = _pack_last(code, 8, 4, jnp.uint32).reshape(bm, nbc)
                    codes_ref[:, pl.ds(c * nbc, nbc), p] = words
                    if bits_ref:
                        bits_ref[0][:, pl.ds(c * nbc, nbc), p] = _hint_bytes(words)
                else:
                    words = _pack_last(code.reshape(bm, kc), 8, 4, jnp.uint32)
                    codes_ref[:, pl.ds(c * (kc // 8), kc // 8)] = words
                    if bits_ref:
                        bits_ref[0][:, pl.ds(c * (kc // 8), kc // 8)] = _hint_bytes(words)
        else:  # v3
            zbits = _bits(zs[0])
            mag = _round_magnitude(jax.lax.bitcast_convert_type(zbits & _ABS, jnp.float32))
            code = mag | jnp.where((zbits & _ABS) > 0x7F800000, 0, (zbits >> 31) << 3)  # NaN: +0
            if y_ref is not None:
                y = _code_values(code, jnp.broadcast_to(s[:, :, None], code.shape))
                y_ref[:, pl.ds(c * kc, kc)] = y.reshape(bm, kc).astype(values)
            code = code.reshape(bm, kc)
            codes_ref[:, pl.ds(c * (kc // 2), kc // 2)] = _pack_last(code, 2, 4)
            if bits_ref:
                bits_ref[0][:, pl.ds(c * (kc // 8), kc // 8)] = _pack_last(code & 1, 8, 1)


KNOBS = ("block_m", "chunk_k", "num_warps")
DEFAULT_VARIANT = "v5"


def default_knobs(k: int, block_size: int = 16, variant: str = DEFAULT_VARIANT) -> dict:
    """The kernel's tile knobs for rows of K elements (``quantize_with_hint_triton``'s defaults
    when a knob is not given): 2 rows per program at K = 2048..4096 (1 above, up to 8 below),
    at most 8K elements per program, which the single walk keeps in registers, in chunks of
    ~2K elements (``block_m * chunk_k``). Session 12's device-time sweep of v4
    (``pallas_kernels/sweep_quantize.py``, H200, ``experiments/gpu_sessions/gpu_session12f.sh``):
    2 rows x 1024 best at 65536 x 4096 and 8192 x 2048, within 1% of the best at 32768 x 2048;
    1 row per program 1.5x slower (NOTES_attention.md). v5 loads a block's eight-element parts
    as [block_m, chunk_k / block_size, 8] tensors, which need >= 8 elements per thread (else
    Triton splits a part over threads and adds layout conversions): chunk_k >= 128 threads x
    block_size / block_m (MXFP4 at 2 rows: 2048)."""
    rows = max(1, min(8, 8192 // k, max(2, 4096 // k)))
    bm = 1 << (rows.bit_length() - 1)
    kc = max(256, 2048 // bm)
    if variant == "v5":
        kc = max(kc, 32 * 4 * block_size // bm)
    return dict(block_m=bm, chunk_k=kc, num_warps=4)


def _pow2_divisor(n, cap):
    p = 1
    while p * 2 <= cap and n % (p * 2) == 0:
        p *= 2
    return p


@functools.partial(jax.jit, static_argnames=("fmt", "global_scope", "with_hint", "values",
                                             "block_m", "chunk_k", "num_warps", "e4m3",
                                             "single_walk", "variant", "interpret"))
def quantize_with_hint_triton(x, fmt="nvfp4", *, global_scope="row", with_hint=True, values=None,
                              block_m=None, chunk_k=None, num_warps=None, e4m3="direct",
                              single_walk=True, variant=DEFAULT_VARIANT, interpret=False):
    f = quant.get_format(fmt)
    values = None if values is None else jnp.dtype(values)
    if x.ndim != 2:
        raise ValueError(f"x must be [M, K], got shape {x.shape}")
    m, k = x.shape
    bs = f.block_size
    if k % bs:
        raise ValueError(f"{fmt}: K={k} is not a multiple of the block size {bs}")
    knobs = default_knobs(k, bs, variant)
    block_m = block_m or knobs["block_m"]
    chunk_k = chunk_k or knobs["chunk_k"]
    num_warps = num_warps or knobs["num_warps"]
    kc = _pow2_divisor(k, chunk_k)
    if kc < bs:
        raise ValueError(f"K={k} has no power-of-two chunk >= the block size {bs}")
    nk = k // kc
    bm = _pow2_divisor(m, block_m)
    row_scope = global_scope == "row"
    if variant not in ("v5", "v4", "v3"):
        raise ValueError(f"variant must be 'v5', 'v4' or 'v3', got {variant!r}")
    if global_scope not in ("row", "tensor"):
        raise ValueError(f"global_scope must be 'row' or 'tensor', got {global_scope!r}")
    if f.has_global_scale and not row_scope:
        g_in = quant._default_global_scale(x.astype(jnp.float32), "tensor")  # (1, 1)
    else:
        g_in = jnp.ones((1, 1), jnp.float32)
    row = lambda w: pl.BlockSpec((bm, w), lambda i: (i, 0))  # noqa: E731
    words = variant in ("v4", "v5")  # v4, v5 write the codes as uint32 words of 8 codes
    if variant == "v5":  # blocks as bs / 8 parts of 8: [M, K / bs, parts, 8] in, [.., parts] out
        parts = bs // 8
        x_in, x_spec = x.reshape(m, k // bs, parts, 8), pl.BlockSpec(
            (bm, k // bs, parts, 8), lambda i: (i, 0, 0, 0))
        by_part = lambda dt: (jax.ShapeDtypeStruct((m, k // bs, parts), dt),  # noqa: E731
                              pl.BlockSpec((bm, k // bs, parts), lambda i: (i, 0, 0)))
    else:
        x_in, x_spec = x, row(k)
        by_part = lambda dt: (jax.ShapeDtypeStruct((m, k // 8), dt), row(k // 8))  # noqa: E731
    code_out = by_part(jnp.uint32) if words else (
        jax.ShapeDtypeStruct((m, k // 2), jnp.uint8), row(k // 2))
    outs_specs = [code_out, (jax.ShapeDtypeStruct((m, k // bs), jnp.uint8), row(k // bs)),
                  (jax.ShapeDtypeStruct((m, 1), jnp.float32), row(1))]
    if with_hint:
        outs_specs.append(by_part(jnp.uint8))
    if values is not None:  # the dequantized values, in x's layout
        outs_specs.append((jax.ShapeDtypeStruct(x_in.shape, values), x_spec))
    out_shape = [o for o, _ in outs_specs]
    out_specs = [sp for _, sp in outs_specs]
    kernel = functools.partial(_qh_kernel, fmt=f.name, bs=bs, kc=kc, nk=nk,
                               row_scope=row_scope and f.has_global_scale, e4m3=e4m3,
                               single_walk=single_walk, variant=variant, interpret=interpret,
                               with_hint=with_hint, values=values)
    outs = pl.pallas_call(
        kernel,
        grid=(m // bm,),
        in_specs=[x_spec, pl.BlockSpec((1, 1), lambda i: (0, 0))],
        out_specs=out_specs,
        out_shape=out_shape,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps),
        interpret=interpret,
        name=f"quantize_with_hint_{f.name}",
    )(x_in, g_in)
    codes, sbytes, gs = outs[:3]
    if words:  # little-endian: byte b of word w holds codes 8w + 2b (low nibble), 8w + 2b + 1
        codes = jax.lax.bitcast_convert_type(codes, jnp.uint8).reshape(m, k // 2)
    bits = outs[3].reshape(m, k // 8) if with_hint else None
    scales = jax.lax.bitcast_convert_type(sbytes, f.scale_dtype)
    if not f.has_global_scale:
        gs = jnp.ones((1, 1), jnp.float32)
    elif not row_scope:
        gs = g_in
    q = QTensor(codes, scales, gs, f.name, -1)
    hint = Hint(bits, scales, gs, f.name, -1, "mantissa") if with_hint else None
    if values is None:
        return q, hint
    return q, hint, outs[-1].reshape(m, k)


def quantize_with_hint(x, fmt="nvfp4", *, global_scope="row", with_hint=True, values=None,
                       backend="auto", **kw):
    """See the module docstring. x [M, K] bf16/f32; extra keywords tune the triton kernel.
    ``values`` (a dtype): also return ``quant.dequantize(q, values)`` [M, K], which the kernel
    writes from the codes it holds (bit-identical), as a third output."""
    on_cpu = jax.default_backend() == "cpu"
    if backend == "auto":
        backend = "reference" if on_cpu else "triton"
    if backend == "reference" or (backend == "triton" and x.ndim == 2 and x.shape[0] == 0):
        # (no rows: nothing for the kernel to tile; the reference's empty results)
        q, h = quantize_with_hint_reference(x, fmt, global_scope=global_scope,
                                            with_hint=with_hint)
        return (q, h) if values is None else (q, h, quant.dequantize(q, values))
    if backend == "triton":
        return quantize_with_hint_triton(x, fmt, global_scope=global_scope, with_hint=with_hint,
                                         values=values, interpret=on_cpu, **kw)
    raise ValueError(f"unknown backend {backend!r}; expected auto, reference or triton")
