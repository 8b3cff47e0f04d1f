"""FP4 KV-cache word layout for the v5 / v6 decode attention: 8 E2M1 codes per 32-bit word,
bit-permuted so that the kernel decodes a word into its 4 bf16x2 MMA operand pairs with 8
integer ops.

A *word* is 4 consecutive code bytes of one cache row (head dims 8j .. 8j + 7; always inside one
NVFP4 / MXFP4 block). In the natural (``QTensor``) layout byte i holds dims 2i (low nibble) and
2i + 1 (high nibble); the v2-v4 decode spreads bytes with ``prmt`` and builds each pair with
``and, mul, and`` (14 integer ops per word). Here the 32 bits are placed at append time so that

* a bf16 pattern with the 3 E2M1 magnitude bits at bits 8..6 and the sign at bit 15 (each half)
  is ``E2M1 * 2**-126`` (``attention_triton``'s v2 decode: one ``mul.bf16x2`` by the block scale
  then gives ``code * scale`` exactly, 2**KSHIFT folded);
* pairs 0..2 are ``rotl(w, r) & 0x81C081C0`` for r = 0, 13, 10 (three disjoint translates of the
  pattern's bits {6, 7, 8, 15} in Z16: 5 ops);
* pair 3 takes the 4 leftover bits per half (``HOLES``) with one multiply that shifts each to its
  place and every other partial product onto a distinct non-pattern bit (no carries):
  ``((w & HOLE_MASK) * MUL) & 0x81C081C0`` (3 ops). Found by exhaustive search (session 13).

The pairs hold (dims 8j, 8j + 2), (8j + 4, 8j + 6), (8j + 1, 8j + 3), (8j + 5, 8j + 7), low half
first: the decode's "lo" / "hi" planes are the even / odd dims exactly as in the natural layout,
so the kernel's Q split and output interleave do not change. :func:`to_words` (append time) and
:func:`from_words` convert between the layouts; :func:`emulate_pairs` is the asm's integer part
in plain JAX (CPU tests); :func:`asm_text` is the PTX.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from trace_jax.quant import QTensor

LAYOUT = "kv_words"  # QTensor.layout of a cache whose codes are in this layout

P_MASK = 0x81C081C0
OUT_BIT = (6, 7, 8, 15)  # code bit j (mantissa, e0, e1, sign) -> bf16 bit in the low half
ROTATIONS = (0, 13, 10)  # pairs 0..2: left rotations of the word
HOLES = (0, 1, 3, 4)  # per 16-bit half: the bits no rotation uses (pair 3's sources)
MUL_SHIFTS = (3, 8, 14)  # pair 3: (w & HOLE_MASK) * sum(2**k)
HOLE_MASK = sum(1 << (h + 16 * half) for h in HOLES for half in (0, 1))
MUL = sum(1 << k for k in MUL_SHIFTS)
# code (0..7 = dims 8j + code) in the (low, high) half of each pair
PAIR_CODES = ((0, 2), (4, 6), (1, 3), (5, 7))


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF if r else x


@functools.lru_cache(maxsize=None)
def source_bits() -> np.ndarray:
    """int [8 codes, 4 code bits] -> the bit of the v5 word that holds it."""
    tab = np.full((8, 4), -1, np.int64)
    for q, codes in enumerate(PAIR_CODES):
        for half, c in enumerate(codes):
            for j, ob in enumerate(OUT_BIT):
                ob += 16 * half
                if q < 3:
                    tab[c, j] = (ob - ROTATIONS[q]) % 32
                else:  # the hole bit whose partial product lands on ob
                    (src,) = [h + 16 * hh for h in HOLES for hh in (0, 1)
                              if ob - (h + 16 * hh) in MUL_SHIFTS]
                    tab[c, j] = src
    assert sorted(tab.ravel()) == list(range(32)), "layout must use every bit exactly once"
    return tab


def _check_no_carries():
    """Pair 3's partial products land on distinct bits, and on pattern bits only as intended."""
    prods = [h + 16 * hh + k for h in HOLES for hh in (0, 1) for k in MUL_SHIFTS
             if h + 16 * hh + k < 32]
    assert len(prods) == len(set(prods))


_check_no_carries()


def _words(codes_u8: jax.Array) -> jax.Array:
    lead, d2 = codes_u8.shape[:-1], codes_u8.shape[-1]
    if d2 % 4:
        raise ValueError(f"the kv_words layout needs head_dim % 8 == 0, got {2 * d2}")
    return jax.lax.bitcast_convert_type(codes_u8.reshape(*lead, d2 // 4, 4), jnp.uint32)


def _bytes(words: jax.Array) -> jax.Array:
    b = jax.lax.bitcast_convert_type(words, jnp.uint8)  # [..., D2 / 4, 4]
    return b.reshape(*b.shape[:-2], b.shape[-2] * 4)


def _move_bits(codes_u8: jax.Array, to_layout: bool) -> jax.Array:
    """Natural bit 4c + j of each word <-> its place in the layout (``source_bits``)."""
    w = _words(codes_u8)
    frm, to = np.arange(32, dtype=np.uint32), source_bits().astype(np.uint32).reshape(32)
    if not to_layout:
        frm, to = to, frm
    shape = (1,) * w.ndim + (32,)  # one bit per entry of a new last axis
    bits = ((w[..., None] >> frm.reshape(shape)) & 1) << to.reshape(shape)
    out = jnp.sum(bits, axis=-1, dtype=jnp.uint32)  # 32 distinct bits: the sum is their OR
    return _bytes(out)


@jax.jit
def to_words(codes_u8: jax.Array) -> jax.Array:
    """Natural packed codes uint8 [..., D/2] -> the word layout (uint8, same shape). Jitted: op
    by op the bit permutation holds a [..., D/8, 32] uint32 intermediate (4x an f32 cache: 30 GB
    at 111 x 32K, which did not fit an 80 GB H100 in session 36); fused, nothing beyond the
    words."""
    return _move_bits(codes_u8, True)


@jax.jit
def from_words(codes_u8: jax.Array) -> jax.Array:
    """Inverse of :func:`to_words` (jitted likewise)."""
    return _move_bits(codes_u8, False)


def _rotl_j(x, r):
    return x if r == 0 else (x << r) | (x >> (32 - r))


def emulate_pairs(w: jax.Array) -> list[jax.Array]:
    """The asm's integer part on uint32 words: the 4 bf16x2 bit patterns, pair order."""
    pairs = [_rotl_j(w, r) & jnp.uint32(P_MASK) for r in ROTATIONS]
    pairs.append(((w & jnp.uint32(HOLE_MASK)) * jnp.uint32(MUL)) & jnp.uint32(P_MASK))
    return pairs


def asm_text(half: str) -> str:
    """PTX for one word: ``half="lo"`` -> pairs 0, 1 (even dims), ``"hi"`` -> pairs 2, 3 (odd
    dims), each times its block scale. Inputs $2 = the word, $3 / $4 = the scale pairs (bf16x2);
    outputs $0, $1 (bf16x2), as ``attention_triton._decode_v2``'s asm."""
    if half == "lo":
        body = [f"and.b32 a, $2, {P_MASK:#010x};", "mul.rn.bf16x2 $0, a, $3;",
                f"shf.l.wrap.b32 a, $2, $2, {ROTATIONS[1]};",
                f"and.b32 a, a, {P_MASK:#010x};", "mul.rn.bf16x2 $1, a, $4;"]
    else:
        body = [f"shf.l.wrap.b32 a, $2, $2, {ROTATIONS[2]};",
                f"and.b32 a, a, {P_MASK:#010x};", "mul.rn.bf16x2 $0, a, $3;",
                f"and.b32 a, $2, {HOLE_MASK:#010x};", f"mul.lo.u32 a, a, {MUL:#x};",
                f"and.b32 a, a, {P_MASK:#010x};", "mul.rn.bf16x2 $1, a, $4;"]
    return "\n".join(["{", ".reg .b32 a;", *body, "}"])


def to_kv_words(q: QTensor) -> QTensor:
    """A natural-layout cache QTensor (quantized along the last axis) in the word layout; a
    tensor already in it is returned as is."""
    if q.layout == LAYOUT:
        return q
    if q.layout != "natural" or q.axis != -1:
        raise ValueError(f"to_kv_words needs a natural QTensor along axis -1, got layout "
                         f"{q.layout!r}, axis {q.axis}")
    return dataclasses.replace(q, codes=to_words(q.codes), layout=LAYOUT)


def to_natural(q: QTensor) -> QTensor:
    """Inverse of :func:`to_kv_words` (natural tensors are returned as is)."""
    if q.layout == "natural":
        return q
    if q.layout != LAYOUT:
        raise ValueError(f"unknown QTensor layout {q.layout!r}")
    return dataclasses.replace(q, codes=from_words(q.codes), layout="natural")
