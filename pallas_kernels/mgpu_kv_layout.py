"""NVFP4 KV-cache layout of the Mosaic GPU FP4-KV decode attention kernel
(:mod:`pallas_kernels.attention_mgpu`; design in NOTES_attention, sessions 16-18), which the model
uses with ``trace_jax.attention.FP4_CACHE_LAYOUT = "mgpu"``. The cache rows decode straight into
the registers of wgmma's A operand, as the FP4 matmul's weights do
(:mod:`pallas_kernels.mgpu_layout`), in both products of the kernel:

* **K**, for S^T [64 cache rows, Gq] = K [64, D] Q^T (cache rows on wgmma's M side, head_dim the
  contraction): per (sequence, kv head) the matmul's weight layout with N = cache rows and
  K = head_dim. Codes uint32 [B, H, S, D / 8] (``mgpu_layout.pack_codes`` of the [S, D]
  nibbles), scale codes uint32 [B, H, D / 64, S] (``mgpu_layout.pack_scales``).
* **V**, for O^T [D, Gq] += V^T [D, 64 cache rows] P^T (head_dim on M, the cache rows the
  contraction): V^T in the matmul's layout, so *token-major*: codes uint32 [B, H, D, S / 8]
  (``pack_codes`` of the [D, S] nibbles: a word holds 8 cache rows of one d). V's block scales
  run along d (one per 16 dims of a row), so the two codes of a register, (d, t) and
  (d, t + 1), have two different scales. They are stored as scale codes (``mgpu_layout``'s
  re-encoding, multiplier ``S = (c << 4) + 0x7600`` per bf16 half) uint8 [B, H, D / 16, S],
  with the rows of each 64-row span permuted so that the 8 multipliers a thread needs for one
  word are 8 consecutive bytes: byte ``8 (2 q + e) + 2 p + h`` of a span holds the scale of row
  ``32 e + 8 p + 2 q + h`` (word ``8 s + 2 q + e``, pair p, half h, as ``mgpu_layout`` places
  the codes). Two 32-bit loads and two ``prmt`` + ``mad`` (the matmul's ``_SCALE_ASM``) then
  give the word's 4 bf16x2 multipliers, one ``mul.bf16x2`` per pair.
* The NVFP4 per-row global scales stay f32 [B, H, S] (the kernel folds K's into the scores and
  V's into P, as the Triton kernel does).

S must be a multiple of 64 and D of 64. :func:`to_mgpu_kv` / :func:`from_mgpu_kv` convert from /
to natural ``QTensor`` caches (exact), :func:`empty_mgpu_kv` makes an empty cache,
:func:`append_row` writes one new row per sequence in place (the decode step's cache update),
:func:`write_rows` T rows (a prefill), and :func:`emulate_v_transposed` is the
kernel's V^T decode register by register in plain JAX (CPU tests of the layout).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import kv_layout as KL
from pallas_kernels import mgpu_layout as MG
from trace_jax import e2m1 as E2
from trace_jax.checks import check_per_sequence
from trace_jax.quant import QTensor

SPAN = MG.SPAN  # cache rows per 8-word chunk of V's codes and per permuted run of V's scales


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["k_codes", "k_scales", "k_gscale", "v_codes", "v_scales",
                                "v_gscale"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class MgpuKV:
    k_codes: jax.Array  # uint32 [B, H, S, D / 8]
    k_scales: jax.Array  # uint32 [B, H, D / 64, S]: 4 scale codes (16-dim blocks) per word
    k_gscale: jax.Array  # f32 [B, H, S]
    v_codes: jax.Array  # uint32 [B, H, D, S / 8]: token-major
    v_scales: jax.Array  # uint8 [B, H, D / 16, S]: scale codes, rows permuted per 64-row span
    v_gscale: jax.Array  # f32 [B, H, S]

    @property
    def shape(self) -> tuple[int, int, int, int]:
        b, h, s, d8 = self.k_codes.shape
        return b, h, s, 8 * d8


@functools.lru_cache(maxsize=None)
def v_scale_rows() -> np.ndarray:
    """[64] int: the cache row (within its span) whose V scale byte j of a span holds."""
    rows = np.zeros(SPAN, np.int64)
    for q in range(4):
        for e in range(2):
            for p in range(4):
                for h in range(2):
                    rows[8 * (2 * q + e) + 2 * p + h] = 32 * e + 8 * p + 2 * q + h
    if sorted(rows.tolist()) != list(range(SPAN)):
        raise AssertionError("the V scale order is not a permutation of the span")
    return rows


@functools.lru_cache(maxsize=None)
def _code_slot() -> tuple[np.ndarray, np.ndarray]:
    """For each row c of a 64-row span: (word w in the span's 8 words, natural code position of
    the word 0..7) that ``mgpu_layout.pack_codes`` puts it at."""
    g = MG.gather_table()  # [word, position] -> column
    w_of, pos_of = np.zeros(SPAN, np.int64), np.zeros(SPAN, np.int64)
    for w in range(8):
        for pos in range(8):
            w_of[g[w, pos]], pos_of[g[w, pos]] = w, pos
    return w_of, pos_of


def _check(q: QTensor, name: str):
    if q.fmt != "nvfp4" or q.axis != -1 or q.codes.ndim != 4:
        raise ValueError(f"{name}: an NVFP4 [B, H, S, D] cache quantized along D is needed, got "
                         f"{q.fmt} {q.shape} axis {q.axis}")
    if q.layout != "natural":
        raise ValueError(f"{name}: natural code layout needed, got {q.layout!r} "
                         "(kv_layout.to_natural)")
    _, _, s, d = q.shape
    if s % SPAN or d % SPAN:
        raise ValueError(f"{name}: cache rows S={s} and head_dim D={d} must be multiples of "
                         f"{SPAN}")


def _row_gscale(q: QTensor) -> jax.Array:
    b, h, s, _ = q.shape
    return jnp.broadcast_to(q.global_scale.astype(jnp.float32), (b, h, s, 1)).reshape(b, h, s)


_map2 = lambda f: jax.vmap(jax.vmap(f))  # noqa: E731  (over B and H)


def to_mgpu_kv(k: QTensor, v: QTensor) -> MgpuKV:
    """Natural NVFP4 K / V caches [B, H, S, D] -> :class:`MgpuKV` (exact; module docstring)."""
    _check(k, "K")
    _check(v, "V")
    if k.shape != v.shape:
        raise ValueError(f"K {k.shape} and V {v.shape} caches differ in shape")
    u8 = lambda a: jax.lax.bitcast_convert_type(a, jnp.uint8)  # noqa: E731
    k_codes = _map2(MG.pack_codes)(E2.unpack_nibbles(k.codes))
    k_scales = _map2(MG.pack_scales)(u8(k.scales))
    v_codes = _map2(MG.pack_codes)(jnp.swapaxes(E2.unpack_nibbles(v.codes), -1, -2))
    b, h, s, d = v.shape
    vs = MG.scale_codes(jnp.swapaxes(u8(v.scales), -1, -2))  # [B, H, D / 16, S]
    vs = vs.reshape(b, h, d // 16, s // SPAN, SPAN)[..., jnp.asarray(v_scale_rows())]
    return MgpuKV(k_codes=k_codes, k_scales=k_scales, k_gscale=_row_gscale(k), v_codes=v_codes,
                  v_scales=vs.reshape(b, h, d // 16, s), v_gscale=_row_gscale(v))


def from_mgpu_kv(c: MgpuKV) -> tuple[QTensor, QTensor]:
    """Inverse of :func:`to_mgpu_kv`: natural (K, V) QTensors, per-row global scales
    [B, H, S, 1] (NaN or negative scales come back as 0x7F, ``mgpu_layout.scale_bytes``)."""
    b, h, s, d = c.shape
    e4m3 = lambda a: jax.lax.bitcast_convert_type(a, jnp.float8_e4m3fn)  # noqa: E731
    k_nib = _map2(MG.unpack_codes)(c.k_codes)  # [B, H, S, D]
    k_sc = _map2(MG.unpack_scales)(c.k_scales)  # [B, H, S, D / 16]
    v_nib = jnp.swapaxes(_map2(MG.unpack_codes)(c.v_codes), -1, -2)
    inv = np.argsort(v_scale_rows())
    vs = c.v_scales.reshape(b, h, d // 16, s // SPAN, SPAN)[..., jnp.asarray(inv)]
    v_sc = jnp.swapaxes(MG.scale_bytes(vs.reshape(b, h, d // 16, s)), -1, -2)
    mk = lambda nib, sc, g: QTensor(codes=E2.pack_nibbles(nib), scales=e4m3(sc),  # noqa: E731
                                    global_scale=g[..., None], fmt="nvfp4", axis=-1)
    return mk(k_nib, k_sc, c.k_gscale), mk(v_nib, v_sc, c.v_gscale)


def append_row(c: MgpuKV, k_row: QTensor, v_row: QTensor, pos: jax.Array) -> MgpuKV:
    """Write one new cache row per sequence: ``k_row`` / ``v_row`` natural NVFP4 QTensors
    [B, H, 1, D] (per-row global scale) at rows ``pos`` [B] int32. K's row is its own D / 8
    words and D / 64 scale words; V's row is one nibble of D words (read, masked, written back)
    and D / 16 scale bytes at their permuted positions. Equals :func:`to_mgpu_kv` of the
    natural caches with the rows written (tested)."""
    b, h, s, d = c.shape
    for name, row in (("K", k_row), ("V", v_row)):
        if row.shape != (b, h, 1, d) or row.fmt != "nvfp4" or row.layout != "natural":
            raise ValueError(f"{name} row: natural NVFP4 [{b}, {h}, 1, {d}] expected, got "
                             f"{row.fmt} {row.shape} {row.layout!r}")
    check_per_sequence("pos", pos, b, 0, s - 1, "the cache's rows")
    # (traced: clamped to the last row for K and V alike, as a natural cache's write is; V's
    # word index would otherwise run past the cache and land on other rows)
    pos = jnp.clip(jnp.asarray(pos, jnp.int32).reshape(b), 0, s - 1)
    u8 = lambda a: jax.lax.bitcast_convert_type(a, jnp.uint8)  # noqa: E731
    kw = _map2(MG.pack_codes)(E2.unpack_nibbles(k_row.codes))  # [B, H, 1, D / 8]
    ks = _map2(MG.pack_scales)(u8(k_row.scales))  # [B, H, D / 64, 1]

    def put(dst, src, p, axis):  # one sequence (no B axis): src's length-1 axis at row p
        start = [0] * dst.ndim
        start[axis] = p
        return jax.lax.dynamic_update_slice(dst, src.astype(dst.dtype), start)

    seq = jax.vmap(put, in_axes=(0, 0, 0, None))
    k_codes = seq(c.k_codes, kw, pos, 1)
    k_scales = seq(c.k_scales, ks, pos, 2)
    k_gs = seq(c.k_gscale, _row_gscale(k_row), pos, 1)
    v_gs = seq(c.v_gscale, _row_gscale(v_row), pos, 1)
    # V codes: the row's nibble for every d goes into word 8 (pos // 64) + w at its 4 bits
    w_of, pos_of = (jnp.asarray(a, jnp.int32) for a in _code_slot())
    bits = jnp.asarray(KL.source_bits(), jnp.uint32)  # [code position, code bit] -> word bit
    r = pos % SPAN
    wi = (pos // SPAN) * 8 + w_of[r]  # [B]
    shifts = bits[pos_of[r]]  # [B, 4]
    mask = jnp.sum(jnp.uint32(1) << shifts, axis=-1, dtype=jnp.uint32)  # [B]
    nib = E2.unpack_nibbles(v_row.codes)[:, :, 0, :].astype(jnp.uint32)  # [B, H, D]
    new = jnp.zeros_like(nib)
    for j in range(4):
        new = new | (((nib >> j) & 1) << shifts[:, j, None, None])
    old = jnp.take_along_axis(c.v_codes, wi[:, None, None, None], axis=3)[..., 0]  # [B, H, D]
    word = (old & ~mask[:, None, None]) | new
    v_codes = seq(c.v_codes, word[..., None], wi, 2)
    # V scales: byte j of the row's span, j = the position of row pos % 64 in the permutation
    slot = jnp.asarray(np.argsort(v_scale_rows()), jnp.int32)[r]
    vsc = MG.scale_codes(jnp.swapaxes(u8(v_row.scales), -1, -2))  # [B, H, D / 16, 1]
    v_scales = seq(c.v_scales, vsc, (pos // SPAN) * SPAN + slot, 2)
    return MgpuKV(k_codes=k_codes, k_scales=k_scales, k_gscale=k_gs, v_codes=v_codes,
                  v_scales=v_scales, v_gscale=v_gs)


def empty_mgpu_kv(b: int, h: int, s: int, d: int) -> MgpuKV:
    """An all-zero NVFP4 cache [B, H, S, D] in this layout (zero codes, zero scales, global
    scales 1): :func:`to_mgpu_kv` of two ``attention.empty_fp4`` caches, without the pass."""
    if s % SPAN or d % SPAN:
        raise ValueError(f"cache rows S={s} and head_dim D={d} must be multiples of {SPAN}")
    zero_scale = MG.scale_codes(jnp.zeros((), jnp.uint8))  # the code of an E4M3 zero
    u32 = jnp.uint32
    k_scales = jnp.zeros((b, h, d // 64, s), u32) + jnp.sum(
        zero_scale.astype(u32) << (8 * jnp.arange(4, dtype=u32)), dtype=u32)
    return MgpuKV(k_codes=jnp.zeros((b, h, s, d // 8), u32), k_scales=k_scales,
                  k_gscale=jnp.ones((b, h, s), jnp.float32),
                  v_codes=jnp.zeros((b, h, d, s // 8), u32),
                  v_scales=jnp.full((b, h, d // 16, s), zero_scale, jnp.uint8),
                  v_gscale=jnp.ones((b, h, s), jnp.float32))


def write_rows(c: MgpuKV, k_rows: QTensor, v_rows: QTensor, start: jax.Array) -> MgpuKV:
    """Write T new rows per sequence, natural NVFP4 QTensors [B, H, T, D] (per-row global
    scales), at rows ``start[b] .. start[b] + T - 1`` (in the cache). T = 1 is
    :func:`append_row` (the decode step). T > 1 (a prefill) costs a fixed number of ops: K's rows
    are whole words; V's codes and scales are rewritten over the few 64-row spans the rows
    touch (unpacked to natural order, updated, packed again). Equals :func:`to_mgpu_kv` of the
    natural caches with the rows written (tested)."""
    b, h, s, d = c.shape
    t = k_rows.shape[2]
    for name, rows in (("K", k_rows), ("V", v_rows)):
        if rows.shape != (b, h, t, d) or rows.fmt != "nvfp4" or rows.layout != "natural":
            raise ValueError(f"{name} rows: natural NVFP4 [{b}, {h}, {t}, {d}] expected, got "
                             f"{rows.fmt} {rows.shape} {rows.layout!r}")
    if t > s:
        raise ValueError(f"{t} rows do not fit a cache of {s} rows")
    if t == 1:
        return append_row(c, k_rows, v_rows, start)
    check_per_sequence("start", start, b, 0, s - t, f"the last start of {t} rows")
    start = jnp.clip(jnp.asarray(start, jnp.int32).reshape(b), 0, s - t)
    u8 = lambda a: jax.lax.bitcast_convert_type(a, jnp.uint8)  # noqa: E731
    put = jax.vmap(lambda dst, src, p, axis: jax.lax.dynamic_update_slice_in_dim(
        dst, src.astype(dst.dtype), p, axis), in_axes=(0, 0, 0, None))
    take = jax.vmap(lambda a, p, n, axis: jax.lax.dynamic_slice_in_dim(a, p, n, axis),
                    in_axes=(0, 0, None, None))
    k_codes = put(c.k_codes, _map2(MG.pack_codes)(E2.unpack_nibbles(k_rows.codes)), start, 1)
    k_scales = put(c.k_scales, _map2(MG.pack_scales)(u8(k_rows.scales)), start, 2)
    k_gs = put(c.k_gscale, _row_gscale(k_rows), start, 1)
    v_gs = put(c.v_gscale, _row_gscale(v_rows), start, 1)
    # V: the window of whole spans holding rows start .. start + T - 1 (clamped into the cache)
    n = min(s, (-(-t // SPAN) + 1) * SPAN)
    w0 = jnp.minimum((start // SPAN) * SPAN, s - n)
    off = start - w0
    nib = _map2(MG.unpack_codes)(take(c.v_codes, w0 // 8, n // 8, 2))  # [B, H, D, n]
    nib = put(nib, jnp.swapaxes(E2.unpack_nibbles(v_rows.codes), -1, -2), off, 2)
    v_codes = put(c.v_codes, _map2(MG.pack_codes)(nib), w0 // 8, 2)
    rows_of = jnp.asarray(v_scale_rows())
    win = take(c.v_scales, w0, n, 2).reshape(b, h, d // 16, n // SPAN, SPAN)
    win = win[..., jnp.asarray(np.argsort(v_scale_rows()))].reshape(b, h, d // 16, n)
    win = put(win, MG.scale_codes(jnp.swapaxes(u8(v_rows.scales), -1, -2)), off, 2)
    win = win.reshape(b, h, d // 16, n // SPAN, SPAN)[..., rows_of].reshape(b, h, d // 16, n)
    return MgpuKV(k_codes=k_codes, k_scales=k_scales, k_gscale=k_gs, v_codes=v_codes,
                  v_scales=put(c.v_scales, win, w0, 2), v_gscale=v_gs)


def emulate_v_transposed(v_codes_DxS8: jax.Array, v_scales_DbxS: jax.Array) -> jax.Array:
    """The kernel's V^T decode for one (sequence, kv head), register by register, in plain JAX:
    f32 [D, S] = code * block scale * 2**-8 (the matmul's ``SHIFT``; no global scale) at
    (d, cache row). Thread q of the warp that holds row d decodes word 8 s + 2 q + e of row d
    into its 4 pairs (``mgpu_layout.emulate_registers``: rows 64 s + 32 e + 8 p + 2 q + h) and
    multiplies pair p, half h by the scale code at byte 8 (2 q + e) + 2 p + h of span s in its
    16-dim block's row of ``v_scales`` (bf16 multiplier ``(c << 4) + 0x7600``), exactly."""
    d, s8 = v_codes_DxS8.shape
    s = 8 * s8
    pat = MG.emulate_registers(v_codes_DxS8)  # [D, S] bf16 patterns, natural row order
    byte = jnp.zeros((s,), jnp.int32)  # the scale byte each cache row's multiplier is read from
    for q in range(4):
        for e in range(2):
            for p in range(4):
                for h in range(2):
                    rows = np.arange(0, s, SPAN) + 32 * e + 8 * p + 2 * q + h
                    byte = byte.at[rows].set(
                        jnp.asarray(np.arange(0, s, SPAN) + 8 * (2 * q + e) + 2 * p + h))
    codes = jnp.repeat(v_scales_DbxS, 16, axis=0)[:, byte]  # [D, S] scale codes
    mult = jax.lax.bitcast_convert_type(MG.multiplier_bits(codes), jnp.bfloat16)
    # pattern (E2M1 * 2**-126) * S (scale * 2**118), evaluated without f32 subnormals: the
    # pattern's E2M1 value times S * 2**-126 (= scale * 2**-8, a normal f32)
    pat = pat.astype(jnp.int32)
    e2m1 = jnp.asarray([0, 0.5, 1, 1.5, 2, 3, 4, 6], jnp.float32)[(pat >> 6) & 7]
    e2m1 = jnp.where(pat >> 15, -e2m1, e2m1)
    return e2m1 * (mult.astype(jnp.float32) * 2.0 ** -126)
