"""The E2M1 (FP4) element codec: rounding, candidate selection, nibble and bit packing.

A 4-bit code is ``sign << 3 | exponent << 1 | mantissa``; its low three bits are the *magnitude
index* ``m`` in 0..7 for the magnitudes ``MAGNITUDES[m]`` = 0, 0.5, 1, 1.5, 2, 3, 4, 6. The
mantissa bit is ``m & 1``, so two neighbouring magnitudes always differ in it: that is what the
TRACE hint records.

Everything here works on already-scaled values ``z`` (``x / scale``) in float32 and is pure
``jnp`` so it runs unchanged inside jit, vmap, grad and Pallas kernels' references.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

MAGNITUDES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], np.float32)
MAX = 6.0
# The 16 signed values by code; code 8 is negative zero.
VALUES = np.concatenate([MAGNITUDES, -MAGNITUDES]).astype(np.float32)


def round_magnitude(a: jax.Array) -> jax.Array:
    """Round-to-nearest-even magnitude index of ``a >= 0`` (float32), saturating at 6.

    Identical to ``astype(jnp.float4_e2m1fn)``: ties go to the even index
    (0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4); anything >= 5 beyond the tie
    saturates to 6. NaN gives index 0.
    """
    # Boundary k sits between index k and k+1; a tie rounds up only when k+1 is even (k odd).
    idx = (
        (a > 0.25).astype(jnp.uint8)
        + (a >= 0.75)
        + (a > 1.25)
        + (a >= 1.75)
        + (a > 2.5)
        + (a >= 3.5)
        + (a > 5.0)
    )
    return idx.astype(jnp.uint8)


def floor_magnitude(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """For ``0 <= a <= 6``: the index of the largest magnitude <= ``a``, and whether ``a`` equals it."""
    lo = (
        (a >= 0.5).astype(jnp.uint8)
        + (a >= 1.0)
        + (a >= 1.5)
        + (a >= 2.0)
        + (a >= 3.0)
        + (a >= 4.0)
        + (a >= 6.0)
    ).astype(jnp.uint8)
    exact = a == jnp.asarray(MAGNITUDES)[lo]
    return lo, exact


def encode(z: jax.Array) -> jax.Array:
    """RNE E2M1 codes (uint8 in 0..15, one per element) of scaled float32 values ``z``."""
    mag = round_magnitude(jnp.abs(z))
    return _with_sign(mag, z)


def encode_stochastic(z: jax.Array, key: jax.Array) -> jax.Array:
    """Stochastically rounded codes: the upper neighbour with probability equal to the distance
    from the lower one over the gap, so ``E[decode(code)] = clip(z, +-6)``."""
    a = jnp.minimum(jnp.abs(z), MAX)
    lo, exact = floor_magnitude(a)
    hi = jnp.minimum(lo + 1, 7).astype(jnp.uint8)
    mags = jnp.asarray(MAGNITUDES)
    g_lo, g_hi = mags[lo], mags[hi]
    frac = jnp.where(exact, 0.0, (a - g_lo) / jnp.where(exact, 1.0, g_hi - g_lo))
    u = jax.random.uniform(key, z.shape, jnp.float32)
    mag = jnp.where(u < frac, hi, lo).astype(jnp.uint8)
    return _with_sign(mag, z)


def encode_guided(z: jax.Array, mantissa_bit: jax.Array) -> jax.Array:
    """Codes on the same grid chosen by a mantissa-bit hint.

    ``|z|`` is clipped to 6. If it equals a magnitude, that magnitude is kept; otherwise of the
    two bracketing magnitudes the one whose mantissa bit equals ``mantissa_bit`` is taken.
    Guarantees: (1) if the hint came from a code that is one of the two candidates, that code is
    reproduced; (2) wherever round-to-nearest would reproduce it, so does this.
    """
    a = jnp.minimum(jnp.abs(z), MAX)
    lo, exact = floor_magnitude(a)
    hi = jnp.minimum(lo + 1, 7).astype(jnp.uint8)
    take_lo = exact | ((lo & 1) == mantissa_bit.astype(jnp.uint8))
    mag = jnp.where(take_lo, lo, hi).astype(jnp.uint8)
    return _with_sign(mag, z)


def _with_sign(mag: jax.Array, z: jax.Array) -> jax.Array:
    """``mag`` with the sign of ``z``; NaN ``z`` (index 0) gives code 0, +0: IEEE leaves the sign
    of an arithmetic NaN (``x * NaN``) to the compiler and hardware, so it is not used."""
    neg = jnp.signbit(z) & ~jnp.isnan(z)
    return (mag | (neg.astype(jnp.uint8) << 3)).astype(jnp.uint8)


def decode(codes: jax.Array) -> jax.Array:
    """Float32 value of each 4-bit code (uint8 in 0..15)."""
    return jnp.asarray(VALUES)[codes.astype(jnp.int32)]


def signed_index(codes: jax.Array) -> jax.Array:
    """Position of each code on the signed ladder -7..7 (both zeros are 0): code-step distances
    between two codes are differences of this."""
    mag = (codes & 7).astype(jnp.int32)
    return jnp.where((codes & 8) != 0, -mag, mag)


def pack_nibbles(codes: jax.Array) -> jax.Array:
    """Pack codes two per byte along the last axis: element 2i in the low nibble."""
    if codes.shape[-1] % 2:
        raise ValueError(f"cannot pack an odd last axis of {codes.shape} two codes per byte")
    lo, hi = codes[..., 0::2], codes[..., 1::2]
    return (lo | (hi << 4)).astype(jnp.uint8)


def unpack_nibbles(packed: jax.Array) -> jax.Array:
    """Inverse of :func:`pack_nibbles`."""
    lo, hi = packed & 0xF, packed >> 4
    return jnp.stack([lo, hi], axis=-1).reshape(*packed.shape[:-1], 2 * packed.shape[-1])


def pack_bits(bits: jax.Array) -> jax.Array:
    """Pack 0/1 values eight per byte along the last axis: element 8i+j in bit j of byte i."""
    if bits.shape[-1] % 8:
        raise ValueError(f"cannot pack a last axis of {bits.shape} eight bits per byte")
    b = bits.astype(jnp.uint8).reshape(*bits.shape[:-1], bits.shape[-1] // 8, 8)
    shifts = jnp.arange(8, dtype=jnp.uint8).reshape((1,) * (b.ndim - 1) + (8,))
    return jnp.sum(b << shifts, axis=-1, dtype=jnp.uint8)


def unpack_bits(packed: jax.Array) -> jax.Array:
    """Inverse of :func:`pack_bits` (uint8 0/1 values)."""
    shifts = jnp.arange(8, dtype=jnp.uint8).reshape((1,) * packed.ndim + (8,))
    bits = (packed[..., None] >> shifts) & 1
    return bits.reshape(*packed.shape[:-1], 8 * packed.shape[-1]).astype(jnp.uint8)
