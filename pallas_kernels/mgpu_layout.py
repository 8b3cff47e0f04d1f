"""FP4 weight layout for the Mosaic GPU matmul (``fp4_matmul_mgpu``): each 32-bit word holds the 8
E2M1 codes that one thread of a warpgroup needs for 4 registers of the wgmma A operand.

The kernel computes out^T [N, M] = W^T [N, K] x^T [K, M] with W^T as wgmma's A operand, taken from
registers in Mosaic GPU's ``WGMMA_LAYOUT``: for a [64, K] bf16 tile, thread ``q = lane % 4`` of row
``r`` holds, for every 8-column chunk ``c'``, the pair of columns ``8 c' + 2 q + {0, 1}``. The codes
are stored as uint32 ``[N, K / 8]`` and loaded into registers with the same ``WGMMA_LAYOUT`` (for a
32-bit array: thread ``q`` holds words ``8 s + 2 q + {0, 1}`` of each 8-word chunk ``s``), so word
``8 s + 2 q + e`` (span ``s`` = K columns 64 s .. 64 s + 63) carries the codes of the thread's
bf16 pairs ``c' = 8 s + 4 e + p`` for p = 0..3, i.e. columns ``64 s + 32 e + 8 p + 2 q + h``. Within
the word the codes sit in :mod:`kv_layout`'s bit order (pair p = ``kv_layout.PAIR_CODES[p]``), so
one word decodes into its 4 bf16x2 registers with 8 integer ops and 4 ``mul.bf16x2`` by the block
scales. Pairs 0, 1 of a word lie in NVFP4 block ``4 s + 2 e``, pairs 2, 3 in block ``4 s + 2 e + 1``.

NVFP4 block scales are stored as uint32 ``[K / 64, N]``: the 4 *scale codes* of blocks
4 s .. 4 s + 3 of row n in word (s, n) (little endian), so that a [64] row of a [K / 64, 64] tile
loads in ``WGMMA_ROW_LAYOUT`` (each thread: its rows' words). A scale code ``c`` is the E4M3 scale
re-encoded at prepare time so that the kernel's bf16 multiplier ``S = scale * 2**118`` is
``(c << 4) + 0x7600`` in each 16-bit half (one ``prmt`` to place c in both halves, one ``mad``):
every E4M3 value times 2**118 is a bf16 with exponent 236..253 and a 3-bit mantissa, i.e.
``c = (exponent - 236) << 3 | mantissa`` (0..143, subnormal scales included). NaN (and any
negative scale, which the quantizer never makes) gets c = 156 (S = NaN: the block's products are
NaN, not a silent wrong value); a zero scale gets c = 255 (S finite, so the zero codes give 0).

:func:`pack_codes` / :func:`unpack_codes` convert natural nibbles [N, K] to and from the words;
:func:`emulate_registers` is the kernel's decode in plain JAX, register by register (CPU tests).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import kv_layout as KL

SPAN = 64  # K columns per 8-word chunk of the uint32 [64, K / 8] tile


def gather_table() -> np.ndarray:
    """[8 words of a span, 8 natural code positions of the word] -> K column within the span."""
    where = {pos: (p, h) for p, pair in enumerate(KL.PAIR_CODES) for h, pos in enumerate(pair)}
    g = np.zeros((8, 8), np.int32)
    for w in range(8):
        q, e = divmod(w, 2)
        for pos in range(8):
            p, h = where[pos]
            g[w, pos] = 32 * e + 8 * p + 2 * q + h
    if sorted(g.ravel().tolist()) != list(range(SPAN)):
        raise AssertionError("the gather table is not a permutation of the span")
    return g


def _check_k(k: int):
    if k % SPAN:
        raise ValueError(f"K={k} must be a multiple of {SPAN} for the Mosaic GPU FP4 layout")


def pack_codes(nib_NxK: jax.Array) -> jax.Array:
    """Natural E2M1 codes (uint8 0..15, [N, K]) -> uint32 words [N, K / 8] (module docstring)."""
    n, k = nib_NxK.shape
    _check_k(k)
    g = jnp.asarray(gather_table().ravel())
    spans = nib_NxK.astype(jnp.uint8).reshape(n, k // SPAN, SPAN)[..., g]  # natural word order
    byt = (spans[..., 0::2] | (spans[..., 1::2] << 4)).reshape(n, k // 2)
    words = KL.to_words(byt).reshape(n, k // 8, 4)
    return jax.lax.bitcast_convert_type(words, jnp.uint32)


def unpack_codes(words_NxK8: jax.Array) -> jax.Array:
    """Inverse of :func:`pack_codes`."""
    n, k8 = words_NxK8.shape
    byt = KL.from_words(jax.lax.bitcast_convert_type(words_NxK8, jnp.uint8).reshape(n, 4 * k8))
    nat = jnp.stack([byt & 15, byt >> 4], axis=-1).reshape(n, k8 // 8, SPAN)
    inv = np.argsort(gather_table().ravel())
    return nat[..., jnp.asarray(inv)].reshape(n, 8 * k8)


S_BIAS = 0x7600  # bf16 bits of S = (code << 4) + S_BIAS (exponent 236 = code 0)
NAN_CODE, ZERO_CODE = 156, 255


def _code_tables() -> tuple[np.ndarray, np.ndarray]:
    """(E4M3 byte -> scale code, scale code -> E4M3 byte) lookup tables."""
    e4m3 = np.arange(256, dtype=np.uint8).view(jnp.float8_e4m3fn).astype(np.float32)
    fwd = np.full(256, NAN_CODE, np.uint8)
    for b, v in enumerate(e4m3):
        if v == 0:
            fwd[b] = ZERO_CODE
        elif np.isfinite(v) and v > 0:
            bits = int(np.array(v * 2.0 ** 118, np.float32).view(np.uint32)) >> 16  # exact bf16
            exp, man = (bits >> 7) & 0xFF, bits & 0x7F
            if man & 0xF or not 236 <= exp <= 253:
                raise AssertionError(f"E4M3 byte {b}: S is not a 3-bit-mantissa bf16")
            fwd[b] = ((exp - 236) << 3) | (man >> 4)
    inv = np.zeros(256, np.uint8)
    inv[NAN_CODE] = 0x7F
    for b in range(0x7F):  # the non-negative finite bytes (0 -> ZERO_CODE)
        inv[fwd[b]] = b
    return fwd, inv


_FWD, _INV = _code_tables()


def scale_codes(e4m3_u8: jax.Array) -> jax.Array:
    """E4M3 scale bytes (uint8) -> scale codes (uint8, same shape)."""
    return jnp.asarray(_FWD)[e4m3_u8.astype(jnp.int32)]


def scale_bytes(codes_u8: jax.Array) -> jax.Array:
    """Inverse of :func:`scale_codes` on its image (NaN and negative scales come back as 0x7F)."""
    return jnp.asarray(_INV)[codes_u8.astype(jnp.int32)]


def multiplier_bits(codes_u8: jax.Array) -> jax.Array:
    """bf16 bits (uint16) of the kernel's multiplier ``S`` for each scale code."""
    return ((codes_u8.astype(jnp.uint32) << 4) + S_BIAS).astype(jnp.uint16)


def pack_scales(scales_u8_NxKb: jax.Array) -> jax.Array:
    """NVFP4 E4M3 scale bytes [N, K / 16] -> uint32 [K / 64, N] of scale codes (4 blocks of a
    span per word)."""
    n, kb = scales_u8_NxKb.shape
    if kb % 4:
        raise ValueError(f"{kb} scale blocks per row: K must be a multiple of {SPAN}")
    c = scale_codes(scales_u8_NxKb).reshape(n, kb // 4, 4)
    return jax.lax.bitcast_convert_type(c, jnp.uint32).T


def unpack_scales(words_KbxN: jax.Array) -> jax.Array:
    """Inverse of :func:`pack_scales`: E4M3 bytes [N, K / 16]."""
    kb4, n = words_KbxN.shape
    c = jax.lax.bitcast_convert_type(words_KbxN.T, jnp.uint8).reshape(n, 4 * kb4)
    return scale_bytes(c)


def emulate_registers(words_NxK8: jax.Array) -> jax.Array:
    """The kernel's decode of every word, in uint32 arithmetic: [N, K] bf16 bit patterns (uint16,
    before the scale multiply) placed at the column each register half holds in the WGMMA layout
    (word 8 s + 2 q + e, pair p, half h -> column 64 s + 32 e + 8 p + 2 q + h). A pattern has the
    code's sign at bit 15 and its 3 magnitude bits at bits 8..6 (``kv_layout``)."""
    n, k8 = words_NxK8.shape
    pairs = KL.emulate_pairs(words_NxK8.reshape(n, k8 // 8, 4, 2))  # 4 x [N, S, q, e] uint32
    out = jnp.zeros((n, k8 // 8, 2, 4, 4, 2), jnp.uint32)  # [N, S, e, p, q, h]
    for p, pr in enumerate(pairs):
        for h in range(2):
            half = (pr >> (16 * h)) & 0xFFFF  # [N, S, q, e]
            out = out.at[:, :, :, p, :, h].set(jnp.swapaxes(half, -1, -2))
    return out.reshape(n, 8 * k8).astype(jnp.uint16)
