"""FP4 weight layout for the v2 kernels: 16 E2M1 codes per two 32-bit words, decoded by bit ops.

One *unit* is one K block of 16 codes of one output column (one NVFP4 block) stored in two u32
words (A, B). The in-kernel decode turns a unit into 8 bf16x2 registers with 16 bit operations and
8 ``mul.bf16x2`` by the block scale (~1.5 integer/float ops per element):

* a bf16 pattern with the 3 E2M1 magnitude bits at bits 8..6 (exponent low 2 bits + mantissa
  msb) and the sign at bit 15 has the value ``E2M1 * 2**-126`` (code 0.5 is a bf16 subnormal,
  which ``mul.rn.bf16x2`` handles exactly: PTX half-precision arithmetic has no FTZ by default);
  one multiply by ``S = scale * 2**126 * 2**-shift`` gives ``code * scale * 2**-shift`` exactly
  (<= 6 significant bits), and ``2**shift`` moves to the f32 epilogue (``FP4Weights.kscale``).
* a bf16x2 pair wants the bits ``P = 0x81C081C0``. Its 8 source bits are placed at prepare time so
  that one funnel-shift rotation (or none) and one AND extract a pair. 3 disjoint rotations of P
  fit in one word (bits 16-periodic: translates of {0,1,2,9} in Z16 tile at most 12 of 16 bits),
  so each word gives 3 pairs; the 8 leftover bits of A and B are merged by one ``lop3`` bit-select
  into a word C that gives the last 2 pairs (layout found by exhaustive search, see NOTES).

Everything here is derived from :data:`PROGRAM`: the packing (prepare time), its inverse, a
bit-exact pure-JAX emulation of the asm (CPU tests, interpret mode) and the PTX text.
Plane ``o`` (0..15) of a unit holds the code of K index ``16 * kb + o``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

P_MASK = 0x81C081C0  # bf16x2: magnitude bits 8..6 and sign bit 15 of each half
RA, RB = 2, 4  # rotations of A and B before the bit-select into C
# Pairs q = 0..7: (source word, left rotation). Word 'C' = select(rotl(A,RA), rotl(B,RB), MASK_A).
# Translates t of the pattern in Z16: A/B pairs t = 6, 0, 10 (rotations 0, 6, 12); C: t = 6, 0.
PROGRAM = (("A", 0), ("A", 6), ("A", 12), ("B", 0), ("B", 6), ("B", 12), ("C", 0), ("C", 6))
OUT_BIT = (6, 7, 8, 15)  # nibble bit j (mantissa, e0, e1, sign) -> bf16 bit in the low half


def _z16_set(ts):
    return {(x + t) % 16 for t in ts for x in (0, 1, 2, 9)}


HOLES = sorted(set(range(16)) - _z16_set((6, 0, 10)))  # per 16-bit half, unused by A/B pairs
MASK_A = sum(1 << ((h + RA) % 16 + 16 * half) for h in HOLES for half in (0, 1))


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF if r else x


@functools.lru_cache(maxsize=None)
def source_table() -> np.ndarray:
    """int array [16 planes, 4 nibble bits, 2] -> (word 0=A / 1=B, bit position)."""
    tab = np.full((16, 4, 2), -1, np.int64)
    for q, (word, r) in enumerate(PROGRAM):
        for h in (0, 1):
            for j, ob in enumerate(OUT_BIT):
                ob += 16 * h
                c = (ob - r) % 32  # bit of the (unrotated) source word
                if word == "A":
                    src = (0, c)
                elif word == "B":
                    src = (1, c)
                elif (MASK_A >> c) & 1:
                    src = (0, (c - RA) % 32)
                else:
                    src = (1, (c - RB) % 32)
                tab[2 * q + h, j] = src
    flat = [tuple(s) for s in tab.reshape(-1, 2)]
    assert len(set(flat)) == 64, "layout must use every bit of A and B exactly once"
    return tab


# --------------------------------------------------------------------------------------------
# Packing (prepare time) and its inverse


def pack_units(nib: jax.Array, axis: int = -2) -> jax.Array:
    """Nibbles uint8 [..., 16, ...] (the unit's 16 codes along ``axis``) -> uint32 [2, ...]."""
    nib = jnp.moveaxis(nib, axis, 0).astype(jnp.uint32)
    tab = source_table()
    words = []
    for w in (0, 1):
        acc = jnp.zeros(nib.shape[1:], jnp.uint32)
        for o in range(16):
            for j in range(4):
                if tab[o, j, 0] == w:
                    acc = acc | (((nib[o] >> j) & 1) << int(tab[o, j, 1]))
        words.append(acc)
    return jnp.stack(words)


def unpack_units(words: jax.Array) -> jax.Array:
    """Inverse of :func:`pack_units`: uint32 [2, ...] -> nibbles uint8 [16, ...]."""
    tab = source_table()
    planes = []
    for o in range(16):
        v = jnp.zeros(words.shape[1:], jnp.uint32)
        for j in range(4):
            w, b = int(tab[o, j, 0]), int(tab[o, j, 1])
            v = v | (((words[w] >> b) & 1) << j)
        planes.append(v.astype(jnp.uint8))
    return jnp.stack(planes)


# --------------------------------------------------------------------------------------------
# Decode: emulation of the asm (bit-exact) and the asm itself


def _rotl_j(x, r):
    if r == 0:
        return x
    return (x << r) | (x >> (32 - r))


def emulate_pairs(a: jax.Array, b: jax.Array) -> list[jax.Array]:
    """The asm's integer part on uint32 arrays: 8 bf16x2 bit patterns (uint32), PROGRAM order."""
    c = (_rotl_j(a, RA) & jnp.uint32(MASK_A)) | (_rotl_j(b, RB) & jnp.uint32(~MASK_A & 0xFFFFFFFF))
    src = {"A": a, "B": b, "C": c}
    return [_rotl_j(src[w], r) & jnp.uint32(P_MASK) for w, r in PROGRAM]


_E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def pattern_to_code(p16: jax.Array) -> jax.Array:
    """bf16 decode pattern (uint32 holding 16 bits) -> E2M1 code 0..15."""
    return (((p16 >> 6) & 7) | ((p16 >> 12) & 8)).astype(jnp.int32)


def emulate_planes(a, b, s_eff, dtype=jnp.bfloat16) -> list[jax.Array]:
    """16 bf16 planes ``code * s_eff`` (s_eff: f32, the block scale times 2**-shift, broadcast
    against a/b), through the bit-exact pattern emulation (value from the code table, so no
    subnormal float arithmetic is involved on the CPU)."""
    out = []
    for pr in emulate_pairs(a, b):
        for half in (0, 1):
            out.append((code_value(pattern_to_code(pr >> (16 * half) & 0xFFFF)) * s_eff)
                       .astype(dtype))
    return out


def code_value(code: jax.Array) -> jax.Array:
    """E2M1 code (int32 0..15) -> f32 value by arithmetic (no table constant in kernels)."""
    m = (code & 1).astype(jnp.float32)
    e = (code >> 1) & 3
    mag = jnp.where(e == 0, 0.5 * m,
                    jax.lax.bitcast_convert_type((e + 126) << 23, jnp.float32) * (1.0 + 0.5 * m))
    return jnp.where((code & 8) != 0, -mag, mag)


def asm_text() -> str:
    """PTX for one unit: inputs $16 = A, $17 = B (u32), $18 = S (bf16 bits, u16);
    outputs $0..$15 = the 16 planes (bf16 bits, u16), PROGRAM order, low half first."""
    lines = ["{", ".reg .b32 s2, c, ta, tb, t;", "mov.b32 s2, {$18, $18};"]
    src = {"A": "$16", "B": "$17", "C": "c"}
    lines += [f"shf.l.wrap.b32 ta, $16, $16, {RA};", f"shf.l.wrap.b32 tb, $17, $17, {RB};",
              f"lop3.b32 c, ta, tb, {MASK_A:#010x}, 0xE4;"]
    for q, (w, r) in enumerate(PROGRAM):
        s = src[w]
        if r:
            lines.append(f"shf.l.wrap.b32 t, {s}, {s}, {r};")
            lines.append(f"and.b32 t, t, {P_MASK:#010x};")
        else:
            lines.append(f"and.b32 t, {s}, {P_MASK:#010x};")
        lines.append("mul.rn.bf16x2 t, t, s2;")
        lines.append(f"mov.b32 {{${2 * q}, ${2 * q + 1}}}, t;")
    lines.append("}")
    return "\n".join(lines)


ASM_CONSTRAINTS = ",".join(["=h"] * 16 + ["r", "r", "h"])
