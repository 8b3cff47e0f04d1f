"""Block-scaled FP4 (NVFP4, MXFP4) quantization, TRACE hints and hint-guided fake-quant.

Public API (other modules and outside scripts rely on these names):

    quantize(x, fmt, *, axis, global_scale, ...) -> QTensor
    dequantize(q, dtype) -> array
    extract_hint(q, *, exact=False) -> Hint
    guided_quantize(x, hint) -> QTensor
    fake_quant(x, fmt, *, axis, hint=None, ...) -> array   (straight-through gradient)
    code_agreement(a, b), code_distance_histogram(a, b), unpacked_codes(q)

Formats (METHOD.md section 2). Blocks run along ``axis`` (the contraction axis).

* ``nvfp4``: 16-element blocks, an FP8 E4M3 block scale, an FP32 global scale ``g`` (the *decode*
  factor, the same convention as ``jax.nn.scaled_matmul``: value = code * block_scale * g).
  Default ``g = amax(x) * f32(1 / (6 * 448))`` per tensor, or per row with ``global_scope="row"``
  (one per token for activations). ``block_scale = e4m3(min(amax(block) * (1 / (6 g)), 448))``.
* ``mxfp4``: 32-element blocks, an E8M0 power-of-two scale ``2**(floor(log2(amax(block))) - 2)``
  (OCP MX v1.0); values above 6 after scaling saturate. ``global_scale`` is 1.

In both, ``z = x * r`` in float32 with ``r = 1 / (block_scale * g)`` computed once per block
(a correctly rounded reciprocal), and the code is E2M1 round-to-nearest-even of ``z`` with
saturation at +-6 -- bit-identical to ``(x * r).astype(jnp.float4_e2m1fn)``. Every step is a
multiply or a reciprocal, so XLA, kernels and numpy all produce the same bits (XLA rewrites
``x / broadcast(s)`` into a multiply by a reciprocal, so a division-based spec would not be
reproducible).

Layout. ``QTensor.codes`` has ``x``'s shape with ``axis`` halved: two codes per byte along
``axis``, element ``2i`` in the low nibble. ``scales`` has ``axis`` divided by the block size.
``global_scale`` is float32 with ``x``'s rank (size 1 on every axis for a per-tensor scale, size 1 on
``axis`` for per-row scales), so leading axes can be stacked (layers, vmap) without ambiguity.
``axis`` is stored negative for the same reason. ``layout`` is ``"natural"`` (the above) for
every tensor this module makes; a kernel may keep a tensor's code bytes in its own bit order
(``"kv_words"``: the FP4 KV caches, :mod:`pallas_kernels.kv_layout`), which the functions here refuse
rather than misread.

Non-finite input. E2M1 has no Inf or NaN. A NaN or Inf inside a block makes that block's scale
NaN, so :func:`dequantize` returns NaN for the whole block (with a per-tensor NVFP4 global scale,
for the whole tensor): never a finite wrong value. ``checked=True`` raises instead (eagerly with
a ``ValueError``; under ``jit`` through ``jax.experimental.checkify``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from trace_jax import e2m1

E4M3_MAX = 448.0
E8M0_MIN_EXP, E8M0_MAX_EXP = -127, 127


@dataclasses.dataclass(frozen=True)
class Format:
    """A block-scaled FP4 format."""

    name: str
    block_size: int
    scale_dtype: jnp.dtype
    has_global_scale: bool
    nan_scale_byte: int  # the scale byte that reads as NaN (E4M3 0x7F, E8M0 0xFF)

    @property
    def bits_per_element(self) -> float:
        return 4 + 8 / self.block_size


FORMATS: dict[str, Format] = {
    "nvfp4": Format("nvfp4", 16, jnp.dtype(jnp.float8_e4m3fn), True, 0x7F),
    "mxfp4": Format("mxfp4", 32, jnp.dtype(jnp.float8_e8m0fnu), False, 0xFF),
}


def get_format(fmt: str | Format) -> Format:
    if isinstance(fmt, Format):
        return fmt
    if fmt not in FORMATS:
        raise ValueError(f"unknown FP4 format {fmt!r}; expected one of {sorted(FORMATS)}")
    return FORMATS[fmt]


# --------------------------------------------------------------------------------------------
# Pytrees


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["codes", "scales", "global_scale"],
    meta_fields=["fmt", "axis", "layout"],
)
@dataclasses.dataclass(frozen=True)
class QTensor:
    """A packed FP4 tensor. See the module docstring for the layout."""

    codes: jax.Array  # uint8, x.shape with `axis` halved
    scales: jax.Array  # e4m3 / e8m0, x.shape with `axis` divided by the block size
    global_scale: jax.Array  # float32, x's rank, size 1 on `axis` (and everywhere if per tensor)
    fmt: str
    axis: int  # negative
    layout: str = "natural"  # bit order of `codes` (module docstring)

    @property
    def shape(self) -> tuple[int, ...]:
        return _expand_axis(self.codes.shape, self.axis, 2)

    @property
    def format(self) -> Format:
        return FORMATS[self.fmt]

    @property
    def nbytes(self) -> int:
        """Bytes a device holds for this tensor (codes + block scales + global scales)."""
        return int(self.codes.size + self.scales.size + 4 * self.global_scale.size)


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["bits", "scales", "global_scale"],
    meta_fields=["fmt", "axis", "kind"],
)
@dataclasses.dataclass(frozen=True)
class Hint:
    """What the rollout records at a quantization site so the trainer can rebuild its codes.

    ``kind="mantissa"`` (TRACE's 1-bit hint): ``bits`` holds the mantissa bit (LSB) of every code,
    eight per byte along ``axis`` (element 8i+j in bit j of byte i). ``kind="exact"``: ``bits``
    holds the full codes, packed like ``QTensor.codes`` (the upper bound a 1-bit hint is measured
    against). ``scales`` and ``global_scale`` are the rollout's grid, as in :class:`QTensor`.
    """

    bits: jax.Array
    scales: jax.Array
    global_scale: jax.Array
    fmt: str
    axis: int
    kind: Literal["mantissa", "exact"] = "mantissa"

    @property
    def shape(self) -> tuple[int, ...]:
        return _expand_axis(self.bits.shape, self.axis, 8 if self.kind == "mantissa" else 2)

    @property
    def nbytes(self) -> int:
        return int(self.bits.size + self.scales.size + 4 * self.global_scale.size)


def _expand_axis(shape, axis, factor):
    shape = list(shape)
    shape[axis] *= factor
    return tuple(shape)


# --------------------------------------------------------------------------------------------
# Scales


def e8m0_to_f32(scales: jax.Array) -> jax.Array:
    """Power-of-two value of E8M0 scales. Byte 0 (2**-127) reads as 0.0, byte 255 as NaN."""
    byte = jax.lax.bitcast_convert_type(scales, jnp.uint8).astype(jnp.uint32)
    val = jax.lax.bitcast_convert_type(byte << 23, jnp.float32)
    return jnp.where(byte == 255, jnp.nan, val)


# XLA's GPU backend rounds float32 division incorrectly (13.5% of quotients off on an H200,
# ``experiments/check_gpu_numerics.py``), and its E4M3 -> float32 conversion, exact alone, gave
# some blocks a neighbouring block's scale when fused into ``quantize`` (~5% of NVFP4 codes off,
# ``check_nvfp4_gpu.py``; jax 0.11.2). There the reciprocal and the E4M3 decode run as integer
# code (``_recip_int``, ``_e4m3_to_f32_int``), which gives the IEEE result on any backend. XLA's
# CPU division and conversion are exact already, and the integer forms made the 2-layer test
# model's rollout and QAT-gradient programs compile 1.5-1.6x slower on a 2-core CPU
# (``experiments/bench_cpu_compile.py``), so the CPU uses the native ops: the same bits either
# way (tests/test_quant.py checks both forms bit for bit). ``INTEGER_FORMS``: None = integer
# forms unless the default backend is the CPU; True / False force one (read at trace time).
INTEGER_FORMS: bool | None = None


def _integer_forms() -> bool:
    return jax.default_backend() != "cpu" if INTEGER_FORMS is None else INTEGER_FORMS


def e4m3_to_f32(scales: jax.Array) -> jax.Array:
    """Exact float32 value of E4M3 (fn) scales (``INTEGER_FORMS``)."""
    if _integer_forms():
        return _e4m3_to_f32_int(scales)
    return jnp.asarray(scales).astype(jnp.float32)


def _e4m3_to_f32_int(scales: jax.Array) -> jax.Array:
    """Value of E4M3 (fn) scales, decoded with integer ops."""
    b = jax.lax.bitcast_convert_type(scales, jnp.uint8).astype(jnp.uint32)
    sign, ex, man = b >> 7, (b >> 3) & 0xF, b & 7
    normal = jax.lax.bitcast_convert_type((sign << 31) | ((ex + 120) << 23) | (man << 20),
                                          jnp.float32)  # (8 + man) / 8 * 2**(ex - 7)
    sub = (man.astype(jnp.float32) * jnp.float32(2.0**-9)) * jnp.where(sign == 1, -1.0, 1.0)
    return jnp.where((b & 0x7F) == 0x7F, jnp.nan, jnp.where(ex == 0, sub, normal))


def scales_to_f32(scales: jax.Array, fmt: str | Format) -> jax.Array:
    """Block scales as float32."""
    if get_format(fmt).name == "mxfp4":
        return e8m0_to_f32(scales)
    return e4m3_to_f32(scales)


# The global scale is amax times this float32 constant (a multiply, never a division by a
# constant, which compilers may rewrite into a multiply by an inexact reciprocal).
GLOBAL_FACTOR = np.float32(1.0 / (e2m1.MAX * E4M3_MAX))
MIN_GLOBAL_SCALE = np.finfo(np.float32).tiny  # a smaller default global scale is taken as 1


def _recip(v):
    """Correctly rounded float32 reciprocal ``1 / v`` of positive finite ``v`` (IEEE, bit for
    bit on every backend: ``INTEGER_FORMS``)."""
    if _integer_forms():
        return _recip_int(v)
    return jnp.float32(1.0) / jnp.asarray(v, jnp.float32)


def _recip_int(v):
    """``1 / v`` by integer long division. Outside the normal range (``v`` subnormal or ``1 / v``
    subnormal) it falls back to ``1 / v``."""
    v = jnp.asarray(v, jnp.float32)
    bits = jax.lax.bitcast_convert_type(v, jnp.uint32)
    e = (bits >> 23) & 0xFF
    m = (bits & 0x7FFFFF) | 0x800000  # 24-bit significand, v = m * 2**(e - 150)
    d = jnp.where(m == 0x800000, 0x800001, m)  # (powers of two are exact, handled below)
    # q = floor(2**47 / d) in three base-2**8 steps of 32-bit unsigned division, rounded to
    # nearest (2**47 / d is never a tie: d would have to be a power of two)
    q1, r = jnp.uint32(1 << 31) // d, jnp.uint32(1 << 31) % d
    q2, r = (r << 8) // d, (r << 8) % d
    q3, r = (r << 8) // d, (r << 8) % d
    q = (q1 << 16) + (q2 << 8) + q3 + jnp.where(2 * r > d, 1, 0).astype(jnp.uint32)
    general = ((253 - e) << 23) | (q & 0x7FFFFF)  # 2**47 / m in (2**23, 2**24): exponent 253 - e
    power2 = (254 - e) << 23
    out = jax.lax.bitcast_convert_type(jnp.where(m == 0x800000, power2, general), jnp.float32)
    normal = (e >= 1) & ((e <= 252) | ((e == 253) & (m == 0x800000)))
    return jnp.where(normal, out, jnp.float32(1.0) / v)


def _nvfp4_block_scale(amax_b, bad_b, g, target):
    raw = amax_b * _recip(jnp.float32(target) * g)
    raw = jnp.where(bad_b, jnp.nan, raw)
    return jnp.minimum(raw, E4M3_MAX).astype(jnp.float8_e4m3fn)


def _mxfp4_block_scale(amax_b, bad_b):
    _, ex = jnp.frexp(amax_b)  # amax = m * 2**ex, m in [0.5, 1)  ->  floor(log2 amax) = ex - 1
    exp = jnp.where(amax_b > 0, ex - 1 - 2, E8M0_MIN_EXP)
    exp = jnp.clip(exp, E8M0_MIN_EXP, E8M0_MAX_EXP)
    byte = jnp.where(bad_b, FORMATS["mxfp4"].nan_scale_byte, exp + 127).astype(jnp.uint8)
    return jax.lax.bitcast_convert_type(byte, jnp.float8_e8m0fnu)


def _default_global_scale(xm, scope):
    """Per-tensor or per-row NVFP4 global scale of ``xm`` (blocked axis last), keepdims."""
    if scope == "tensor":
        axes = None
    elif scope == "row":
        axes = -1
    else:
        raise ValueError(f"global_scope must be 'tensor' or 'row', got {scope!r}")
    amax = jnp.max(jnp.abs(xm), axis=axes, keepdims=True, initial=0.0)  # (0 for no elements)
    # reductions may drop NaN (fused max); non-finite input is flagged explicitly
    bad = jnp.any(~jnp.isfinite(xm), axis=axes, keepdims=True)
    g = amax * GLOBAL_FACTOR
    # all-zero tensor/row: any finite scale. So is one whose g would be subnormal (amax below
    # ~3e-35): the CPU flushes such a g to 0, a GPU may keep it, and 1 / (6 g) = inf would make
    # its zero blocks' scales 0 * inf = NaN; with g = 1 every device gives zero codes
    g = jnp.where(g < MIN_GLOBAL_SCALE, 1.0, g)
    return jnp.where(bad, jnp.nan, g)


# --------------------------------------------------------------------------------------------
# Layout helpers: move the block axis last and split it into blocks


def _norm_axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} out of range for a rank-{ndim} tensor")
    return axis - ndim if axis >= 0 else axis


def _check_divisible(shape, axis, fmt: Format):
    if shape[axis] % fmt.block_size:
        raise ValueError(
            f"{fmt.name}: the block axis {axis} of shape {tuple(shape)} has length {shape[axis]}, "
            f"not divisible by the block size {fmt.block_size}"
        )


def _blocks(xm, block):
    return xm.reshape(*xm.shape[:-1], xm.shape[-1] // block, block)


def _merge_blocks(xb):
    """Inverse of :func:`_blocks` (no -1 in the shape: a tensor with no rows reshapes too)."""
    return xb.reshape(*xb.shape[:-2], xb.shape[-2] * xb.shape[-1])


def _keepdims_global(g, shape, axis):
    """Validate a user global scale and give it ``shape``'s rank with the moved layout."""
    g = jnp.asarray(g, jnp.float32)
    row = list(shape)
    row[axis] = 1
    if g.ndim == 0 or g.size == 1:
        return g.reshape((1,) * len(shape))
    if tuple(g.shape) == tuple(row):
        return g
    raise ValueError(
        f"global_scale of shape {tuple(g.shape)} does not fit x of shape {tuple(shape)}: "
        f"expected a scalar or shape {tuple(row)} (per row along axis {axis})"
    )


# --------------------------------------------------------------------------------------------
# Public API


def quantize(
    x: jax.Array,
    fmt: str = "nvfp4",
    *,
    axis: int = -1,
    global_scale: jax.Array | float | None = None,
    global_scope: Literal["tensor", "row"] = "tensor",
    rounding: Literal["rne", "stochastic"] = "rne",
    key: jax.Array | None = None,
    scale_rule: Literal["max", "four_over_six"] = "max",
    checked: bool = False,
) -> QTensor:
    """Quantize ``x`` to block-scaled FP4 along ``axis``.

    Args:
      global_scale: NVFP4 only: a fixed decode scale (scalar, or one per row with ``axis`` of
        size 1); default computed from ``amax`` per ``global_scope``.
      global_scope: ``"tensor"`` (one global scale) or ``"row"`` (one per slice along ``axis``,
        e.g. per token for activations).
      rounding: ``"rne"`` (default, bit-identical to ``astype(float4_e2m1fn)``) or ``"stochastic"``
        (needs ``key``; unbiased within the +-6 range).
      scale_rule: ``"max"`` maps each block's amax to 6; ``"four_over_six"`` (NVFP4) also tries
        mapping it to 4 and keeps, per block, the scale with the lower squared error.
      checked: raise on NaN/Inf input instead of poisoning the block scale.
    """
    f = get_format(fmt)
    x = jnp.asarray(x)
    ax = _norm_axis(axis, x.ndim)
    _check_divisible(x.shape, ax, f)
    if checked:
        _check_finite(x)
    if rounding == "stochastic" and key is None:
        raise ValueError("rounding='stochastic' needs a PRNG key")
    if rounding not in ("rne", "stochastic"):
        raise ValueError(f"rounding must be 'rne' or 'stochastic', got {rounding!r}")
    if scale_rule not in ("max", "four_over_six"):
        raise ValueError(f"scale_rule must be 'max' or 'four_over_six', got {scale_rule!r}")

    xm = jnp.moveaxis(x.astype(jnp.float32), ax, -1)
    xb = _blocks(xm, f.block_size)  # [..., nb, B]
    amax_b = jnp.max(jnp.abs(xb), axis=-1)  # [..., nb]
    bad_b = jnp.any(~jnp.isfinite(xb), axis=-1)

    if f.has_global_scale:
        if global_scale is None:
            g = _default_global_scale(xm, global_scope)  # [..., 1] keepdims (moved layout)
        else:
            if not isinstance(global_scale, jax.core.Tracer):  # a given scale must decode
                gv = np.asarray(global_scale, np.float64)
                bad = gv[~(np.isfinite(gv) & (gv > 0))]
                if bad.size:
                    raise ValueError(f"global_scale must be positive and finite; {bad.size} "
                                     f"value(s) are not, e.g. {bad.ravel()[:4].tolist()}")
            g = jnp.moveaxis(_keepdims_global(global_scale, x.shape, ax), ax, -1)
        scales = _nvfp4_block_scale(amax_b, bad_b, g, e2m1.MAX)
    else:
        if global_scale is not None:
            raise ValueError(f"{f.name} has no global scale; got global_scale={global_scale!r}")
        if scale_rule != "max":
            raise ValueError(f"scale_rule={scale_rule!r} is defined for nvfp4 only")
        g = jnp.ones((1,) * x.ndim, jnp.float32)
        scales = _mxfp4_block_scale(amax_b, bad_b)

    def codes_for(block_scales):
        z = _scaled(xb, block_scales, g, f)
        if rounding == "stochastic":
            return e2m1.encode_stochastic(z, key)
        return e2m1.encode(z)

    codes = codes_for(scales)
    if scale_rule == "four_over_six":
        scales4 = _nvfp4_block_scale(amax_b, bad_b, g, 4.0)
        codes4 = codes_for(scales4)
        err6 = _block_sq_err(xb, codes, scales, g, f)
        err4 = _block_sq_err(xb, codes4, scales4, g, f)
        use4 = err4 < err6
        codes = jnp.where(use4[..., None], codes4, codes)
        scales = jnp.where(use4, scales4, scales)

    return _assemble(codes, scales, g, f, ax)


def _scaled(xb, scales, g, f: Format):
    """z = x * r with r = 1 / (block_scale * g) rounded to float32 once per block; r = 0 where the
    scale is 0 and NaN where it is NaN."""
    s = scales_to_f32(scales, f) * g
    r = jnp.where(s > 0, _recip(jnp.where(s > 0, s, 1.0)), jnp.where(jnp.isnan(s), jnp.nan, 0.0))
    return xb * r[..., None]


def _block_sq_err(xb, codes, scales, g, f):
    deq = e2m1.decode(codes) * (scales_to_f32(scales, f) * g)[..., None]
    return jnp.sum(jnp.square(deq - xb), axis=-1)


def _assemble(codes_blocks, scales, g_moved, f: Format, ax: int) -> QTensor:
    codes = _merge_blocks(codes_blocks)
    packed = e2m1.pack_nibbles(codes)
    return QTensor(
        codes=jnp.moveaxis(packed, -1, ax),
        scales=jnp.moveaxis(scales, -1, ax),
        global_scale=jnp.moveaxis(g_moved, -1, ax),
        fmt=f.name,
        axis=ax,
    )


def _check_finite(x):
    ok = jnp.all(jnp.isfinite(x))
    if isinstance(ok, jax.core.Tracer):
        checkify.check(ok, "quantize(checked=True): input has NaN or Inf values")
    elif not bool(ok):
        n = int(np.sum(~np.isfinite(np.asarray(x, np.float32))))
        raise ValueError(f"quantize(checked=True): input of shape {x.shape} has {n} NaN/Inf values")


def _natural_codes(q: QTensor) -> jax.Array:
    if q.layout != "natural":
        raise ValueError(f"QTensor codes are in the {q.layout!r} layout; convert them to "
                         "'natural' first (pallas_kernels.kv_layout.to_natural)")
    return q.codes


def unpacked_codes(q: QTensor | Hint) -> jax.Array:
    """One uint8 code per element, in the tensor's own layout."""
    if isinstance(q, Hint):
        if q.kind != "exact":
            raise ValueError("a mantissa hint has no full codes; use extract_hint(q, exact=True)")
        packed = q.bits
    else:
        packed = _natural_codes(q)
    return jnp.moveaxis(e2m1.unpack_nibbles(jnp.moveaxis(packed, q.axis, -1)), -1, q.axis)


def dequantize(q: QTensor, dtype=jnp.float32) -> jax.Array:
    """Values ``code * block_scale * global_scale``, computed in float32, cast to ``dtype``."""
    f = q.format
    codes = e2m1.unpack_nibbles(jnp.moveaxis(_natural_codes(q), q.axis, -1))
    vals = _blocks(e2m1.decode(codes), f.block_size)
    scale = scales_to_f32(jnp.moveaxis(q.scales, q.axis, -1), f)
    g = jnp.moveaxis(q.global_scale, q.axis, -1)
    out = (vals * (scale * g)[..., None]).reshape(codes.shape)
    return jnp.moveaxis(out, -1, q.axis).astype(dtype)


def extract_hint(q: QTensor, *, exact: bool = False) -> Hint:
    """The rollout's hint for ``q``: packed mantissa bits (or, ``exact=True``, the full codes)
    plus the block and global scales."""
    if exact:
        bits = _natural_codes(q)
    else:
        codes = e2m1.unpack_nibbles(jnp.moveaxis(_natural_codes(q), q.axis, -1))
        bits = jnp.moveaxis(e2m1.pack_bits(codes & 1), -1, q.axis)
    return Hint(
        bits=bits,
        scales=q.scales,
        global_scale=q.global_scale,
        fmt=q.fmt,
        axis=q.axis,
        kind="exact" if exact else "mantissa",
    )


def _check_hint(x_shape, hint: Hint, fmt: str | None = None, axis: int | None = None):
    if not isinstance(hint, Hint):
        raise ValueError(f"expected a Hint, got {type(hint).__name__}")
    if tuple(x_shape) != tuple(hint.shape):
        raise ValueError(
            f"hint shape {tuple(hint.shape)} does not match the tensor's shape {tuple(x_shape)}"
        )
    ax, bs = _norm_axis(hint.axis, len(x_shape)) % len(x_shape), FORMATS[hint.fmt].block_size
    blocks = tuple(n // bs if i == ax else n for i, n in enumerate(x_shape))
    if tuple(hint.scales.shape) != blocks:
        raise ValueError(f"hint scales shape {tuple(hint.scales.shape)} != {blocks} (the "
                         f"tensor's blocks of {bs} along axis {ax})")
    g = tuple(hint.global_scale.shape)
    if len(g) != len(x_shape) or g[ax] != 1 or any(a not in (1, n) for a, n in zip(g, x_shape)):
        raise ValueError(f"hint global scale shape {g} does not broadcast to the tensor's "
                         f"{tuple(x_shape)} with size 1 on the block axis {ax}")
    if fmt is not None and get_format(fmt).name != hint.fmt:
        raise ValueError(f"hint format {hint.fmt!r} does not match the requested format {fmt!r}")
    if axis is not None and _norm_axis(axis, len(x_shape)) != hint.axis:
        raise ValueError(f"hint block axis {hint.axis} does not match the requested axis {axis}")


def guided_quantize(x: jax.Array, hint: Hint) -> QTensor:
    """Quantize ``x`` on the rollout's grid, with rounding steered by ``hint``.

    ``z = clip(x / s_hint, +-6)``; an exact codeword is kept, otherwise of the two bracketing
    codewords the one whose mantissa bit equals the hint bit is taken. Guarantees: the rollout's
    code is reproduced whenever it is one of the two candidates, and every element that
    round-to-nearest on this grid reproduces is reproduced too. (When the rollout's code is not a
    candidate -- x moved by more than a code step -- the result is at most one step farther from
    it than round-to-nearest.) An ``exact`` hint returns the rollout's codes unchanged. As in
    :func:`quantize`, a block of ``x`` holding a NaN or an infinity gets a NaN scale (it
    dequantizes to NaN, never to finite values the hint's scale would make of it).
    """
    x = jnp.asarray(x)
    _check_hint(x.shape, hint)
    f = FORMATS[hint.fmt]
    xm = jnp.moveaxis(x.astype(jnp.float32), hint.axis, -1)
    xb = _blocks(xm, f.block_size)
    scales = jnp.moveaxis(hint.scales, hint.axis, -1)
    bad_b = jnp.any(~jnp.isfinite(xb), axis=-1)
    nan_scale = jax.lax.bitcast_convert_type(jnp.uint8(f.nan_scale_byte),
                                             scales.dtype)
    scales = jnp.where(bad_b, nan_scale, scales)
    g = jnp.moveaxis(hint.global_scale, hint.axis, -1)
    if hint.kind == "exact":
        return QTensor(hint.bits, jnp.moveaxis(scales, -1, hint.axis), hint.global_scale,
                       hint.fmt, hint.axis)
    bits = e2m1.unpack_bits(jnp.moveaxis(hint.bits, hint.axis, -1))
    z = _scaled(xb, scales, g, f)
    codes = e2m1.encode_guided(z, _blocks(bits, f.block_size))
    return _assemble(codes, scales, g, f, hint.axis)


# --------------------------------------------------------------------------------------------
# Straight-through fake quantization


@jax.custom_vjp
def straight_through(x: jax.Array, y: jax.Array, keep: jax.Array | None = None) -> jax.Array:
    """Returns ``y`` exactly; the gradient flows to ``x`` unchanged (masked by ``keep`` if given)."""
    del x, keep
    return y


def _st_fwd(x, y, keep):
    return y, keep


def _st_bwd(keep, g):
    gx = g if keep is None else jnp.where(keep, g, jnp.zeros_like(g))
    return gx, None, None


straight_through.defvjp(_st_fwd, _st_bwd)


def fake_quant(
    x: jax.Array,
    fmt: str = "nvfp4",
    *,
    axis: int = -1,
    hint: Hint | None = None,
    global_scope: Literal["tensor", "row"] = "tensor",
    rounding: Literal["rne", "stochastic"] = "rne",
    key: jax.Array | None = None,
    scale_rule: Literal["max", "four_over_six"] = "max",
    ste: Literal["identity", "clipped"] = "identity",
) -> jax.Array:
    """Quantize-dequantize ``x`` (same dtype) with a straight-through gradient.

    With ``hint`` the codes follow :func:`guided_quantize` on the hint's grid, otherwise
    :func:`quantize` with local scales. ``ste="identity"`` passes the gradient through unchanged;
    ``"clipped"`` zeroes it where ``|x|`` lies beyond the grid's +-6 range (without a hint, a
    block's largest element never counts as beyond: its rounded scale was made for it).
    """
    q = quantize_for_training(
        x, fmt, axis=axis, hint=hint, global_scope=global_scope, rounding=rounding, key=key,
        scale_rule=scale_rule,
    )
    return straight_through_dequant(x, q, ste=ste, own_scales=hint is None)


def quantize_for_training(
    x, fmt="nvfp4", *, axis=-1, hint=None, global_scope="tensor", rounding="rne", key=None,
    scale_rule="max",
) -> QTensor:
    """The trainer's quantizer: hint-guided when ``hint`` is given, else :func:`quantize`.
    Gradients do not flow through it (pair it with :func:`straight_through_dequant`)."""
    x = jax.lax.stop_gradient(x)
    if hint is not None:
        _check_hint(x.shape, hint, fmt, axis)
        return guided_quantize(x, hint)
    return quantize(
        x, fmt, axis=axis, global_scope=global_scope, rounding=rounding, key=key,
        scale_rule=scale_rule,
    )


def straight_through_dequant(x, q: QTensor, *, ste="identity", own_scales: bool = False
                             ) -> jax.Array:
    """``dequantize(q)`` in ``x``'s dtype with the gradient of the identity w.r.t. ``x``
    (``ste="identity"``), or zero where ``|x|`` lies beyond ``q``'s +-6 grid (``"clipped"``).
    ``own_scales``: ``q``'s scales were computed from ``x`` itself, so a block's largest element
    is in range even where its E4M3 / E8M0 scale rounded below ``amax / 6`` (in about half the
    blocks), instead of losing its gradient."""
    y = dequantize(q, x.dtype)
    if ste == "identity":
        return straight_through(x, y)
    if ste == "clipped":
        f = q.format
        xm = _blocks(jnp.moveaxis(jax.lax.stop_gradient(x).astype(jnp.float32), q.axis, -1),
                     f.block_size)
        s = scales_to_f32(jnp.moveaxis(q.scales, q.axis, -1), f) * jnp.moveaxis(
            q.global_scale, q.axis, -1)
        lim = e2m1.MAX * s[..., None]
        if own_scales:
            lim = jnp.maximum(lim, jnp.max(jnp.abs(xm), axis=-1, keepdims=True))
        keep = _merge_blocks(jnp.abs(xm) <= lim)
        return straight_through(x, y, jnp.moveaxis(keep, -1, q.axis))
    raise ValueError(f"ste must be 'identity' or 'clipped', got {ste!r}")


# --------------------------------------------------------------------------------------------
# Metrics


def _as_codes(a):
    return unpacked_codes(a) if isinstance(a, (QTensor, Hint)) else jnp.asarray(a)


def _code_pair(a, b):
    for attr, what in (("fmt", "formats"), ("axis", "block axes")):
        va, vb = getattr(a, attr, None), getattr(b, attr, None)
        if va is not None and vb is not None and va != vb:  # (codes on different grids)
            raise ValueError(f"cannot compare codes of different {what}: {va!r} and {vb!r}")
    ca, cb = _as_codes(a), _as_codes(b)
    if ca.shape != cb.shape:
        raise ValueError(f"cannot compare codes of shapes {ca.shape} and {cb.shape}")
    return e2m1.signed_index(ca), e2m1.signed_index(cb)


def code_agreement(a: QTensor | jax.Array, b: QTensor | jax.Array) -> jax.Array:
    """Fraction of elements whose codes are equal (+0 and -0 count as equal).
    Accepts QTensors or unpacked uint8 code arrays."""
    ia, ib = _code_pair(a, b)
    return jnp.mean((ia == ib).astype(jnp.float32))


MAX_CODE_DISTANCE = 14


def code_distance_histogram(a: QTensor | jax.Array, b: QTensor | jax.Array) -> jax.Array:
    """Counts (int32[15]) of the code-step distance 0..14 between corresponding codes, measured
    on the signed ladder -6..-0.5, 0, 0.5..6 (so -0.5 vs +0.5 is 2 steps)."""
    ia, ib = _code_pair(a, b)
    return distance_counts(jnp.abs(ia - ib))


def distance_counts(d: jax.Array, weight: jax.Array | None = None) -> jax.Array:
    """int32[15]: ``count[i] = sum(weight where d == i)`` for code distances ``d`` in 0..14
    (integer or bool weights, 1 if None), as 15 masked sums that XLA fuses into one pass. (A
    scatter-add into 15 bins serializes on the GPU's atomics: 29 ms for 50M codes in the
    30B-shape train step.)"""
    w = jnp.ones(d.shape, jnp.int32) if weight is None else weight.astype(jnp.int32)
    return jnp.stack([jnp.sum(jnp.where(d == i, w, 0), dtype=jnp.int32)
                      for i in range(MAX_CODE_DISTANCE + 1)])


def mantissa_hint(hint: Hint) -> Hint:
    """The 1-bit hint carried by an exact (full-code) hint."""
    if hint.kind == "mantissa":
        return hint
    codes = e2m1.unpack_nibbles(jnp.moveaxis(hint.bits, hint.axis, -1))
    bits = jnp.moveaxis(e2m1.pack_bits(codes & 1), -1, hint.axis)
    return dataclasses.replace(hint, bits=bits, kind="mantissa")
