"""Decode attention (bf16 / NVFP4 / MXFP4 caches) and KV append: Pallas Triton kernel in interpret
mode against the pure-JAX f32 reference; append-then-attend equals quantize-whole-then-attend;
a long-context check of the reference and the kernel against a float64 numpy computation; the
v2 decode's bit manipulation (inline PTX on the GPU) emulated word by word in numpy against the
E2M1 table; the f32-P precision option against float64."""

import functools
import re
import time
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels import decode_attention as DA
from pallas_kernels.decode_attention import decode_attention
from pallas_kernels.kv_append import append_kv, empty_cache
from pallas_kernels import attention_triton as AT
from pallas_kernels import kv_layout as KL
from trace_jax import quant as Q
from trace_jax.quant import QTensor

# Caches and references built by jitted library calls (one program per shape; op by op, every
# primitive of the quantizer compiled on its own for each shape: seconds per test). The kernels
# under test run as the library calls them.
quantize = jax.jit(Q.quantize, static_argnames=("fmt", "axis", "global_scope"))
dequantize = jax.jit(Q.dequantize, static_argnames=("dtype",))
decode_attention_reference = jax.jit(DA.decode_attention_reference,
                                     static_argnames=("sm_scale", "backend"))

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float64)


def _rel(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def _cache(x, fmt):
    if fmt == "bf16":
        return x.astype(jnp.bfloat16)
    return quantize(x, fmt, axis=-1, global_scope="row")


def _inputs(seed, b, hq, h, s, d):
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(seed), 3)
    q = jax.random.normal(k1, (b, hq, d), jnp.float32).astype(jnp.bfloat16)
    k = jax.random.normal(k2, (b, h, s, d), jnp.float32) * 2.0
    v = jax.random.normal(k3, (b, h, s, d), jnp.float32)
    return q, k, v


def _np_attention(q, k, v, lengths, sm_scale):
    """float64 numpy attention over dequantized caches (k, v already float arrays)."""
    q = np.asarray(q, np.float64)
    k = np.asarray(k, np.float64)
    v = np.asarray(v, np.float64)
    b, hq, d = q.shape
    h = k.shape[1]
    out = np.zeros((b, hq, d))
    for i in range(b):
        n = int(lengths[i])
        for j in range(hq):
            kk, vv = k[i, j // (hq // h), :n], v[i, j // (hq // h), :n]
            sc = kk @ q[i, j] * sm_scale
            p = np.exp(sc - sc.max())
            out[i, j] = p @ vv / p.sum()
    return out


@pytest.mark.parametrize("fmt", ["bf16", "nvfp4", "mxfp4"])
@pytest.mark.parametrize("hq,h,d,s,block_k,splits", [
    (8, 2, 128, 96, 32, 3),    # GQA 4, lengths not multiples of the block, 3 splits
    (4, 2, 256, 64, 16, 2),    # head_dim 256, GQA 2
    (4, 4, 64, 48, 16, None),  # MHA (G=1 padded to 16), automatic splits
])
def test_kernel_matches_reference(fmt, hq, h, d, s, block_k, splits):
    b = 3
    q, k, v = _inputs(zlib.crc32(f"{fmt}-{hq}-{d}".encode()) % 1000, b, hq, h, s, d)
    lengths = jnp.asarray([1, s // 2 + 3, s], jnp.int32)
    kc, vc = _cache(k, fmt), _cache(v, fmt)
    ref = decode_attention_reference(q, kc, vc, lengths)
    out = decode_attention(q, kc, vc, lengths, backend="triton", block_k=block_k,
                           num_splits=splits)
    assert out.shape == (b, hq, d) and out.dtype == jnp.bfloat16
    assert np.all(np.isfinite(np.asarray(out, np.float32)))
    # bf16 P@V operands and a bf16 output: ~1e-3; a layout or mask bug gives O(1)
    assert _rel(out, ref) < 6e-3
    # the reference itself against float64 numpy on the dequantized cache
    kf = dequantize(kc) if isinstance(kc, QTensor) else kc
    vf = dequantize(vc) if isinstance(vc, QTensor) else vc
    want = _np_attention(q, kf, vf, np.asarray(lengths), 1 / np.sqrt(d))
    assert _rel(ref, want) < 4e-3


def test_masked_rows_may_hold_nan():
    b, hq, h, s, d = 2, 8, 2, 64, 128
    q, k, v = _inputs(7, b, hq, h, s, d)
    lengths = jnp.asarray([5, 40], jnp.int32)
    pos = jnp.arange(s)[None, None, :, None] >= lengths[:, None, None, None]
    k = jnp.where(pos, jnp.nan, k).astype(jnp.bfloat16)
    v = jnp.where(pos, jnp.nan, v).astype(jnp.bfloat16)
    ref = decode_attention_reference(q, k, v, lengths)
    out = decode_attention(q, k, v, lengths, backend="triton", block_k=16, num_splits=2)
    assert np.all(np.isfinite(np.asarray(out, np.float32)))
    assert _rel(out, ref) < 6e-3


def test_gqa_head_mapping():
    """Query head j must read kv head j // G: permuting kv heads must change the output."""
    b, hq, h, s, d = 1, 8, 2, 32, 64
    q, k, v = _inputs(3, b, hq, h, s, d)
    lengths = jnp.asarray([s], jnp.int32)
    out = decode_attention(q, k.astype(jnp.bfloat16), v.astype(jnp.bfloat16), lengths,
                           backend="triton", block_k=16)
    want = _np_attention(q, k, v, [s], 1 / np.sqrt(d))
    assert _rel(out, want) < 6e-3
    swapped = _np_attention(q, k[:, ::-1], v[:, ::-1], [s], 1 / np.sqrt(d))
    assert _rel(out, swapped) > 0.1


@pytest.mark.parametrize("fmt", ["bf16", "nvfp4", "mxfp4"])
def test_append_then_attend_equals_quantize_whole(fmt):
    b, hq, h, s, d = 2, 8, 2, 64, 128
    q, k, v = _inputs(11, b, hq, h, s, d)
    kb, vb = k.astype(jnp.bfloat16), v.astype(jnp.bfloat16)
    kc, vc = empty_cache((b, h, s, d), fmt), empty_cache((b, h, s, d), fmt)
    step = jax.jit(append_kv, donate_argnums=0)
    pos = np.zeros(b, np.int32)
    for t in (5, 1, 1, 3, 30):  # prefill chunk then decode-sized appends
        # never mutate a numpy buffer a device array was made from: on CPU the transfer may
        # alias it and run after `pos += t` (a flaky lost row under load, even with
        # jnp.array(copy=True)); `pos = pos + t` makes a new buffer instead
        pj = jnp.asarray(pos)
        kc = step(kc, jax.vmap(lambda x, p: jax.lax.dynamic_slice_in_dim(x, p, t, 1))(kb, pj), pj)
        vc = step(vc, jax.vmap(lambda x, p: jax.lax.dynamic_slice_in_dim(x, p, t, 1))(vb, pj), pj)
        pos = pos + t
    n = int(pos[0])
    whole_k, whole_v = _cache(kb, fmt), _cache(vb, fmt)
    if fmt == "bf16":
        np.testing.assert_array_equal(np.asarray(kc[:, :, :n], np.float32),
                                      np.asarray(whole_k[:, :, :n], np.float32))
    else:
        for got, want in ((kc, whole_k), (vc, whole_v)):
            np.testing.assert_array_equal(got.codes[:, :, :n], want.codes[:, :, :n])
            np.testing.assert_array_equal(
                jax.lax.bitcast_convert_type(got.scales[:, :, :n], jnp.uint8),
                jax.lax.bitcast_convert_type(want.scales[:, :, :n], jnp.uint8))
            gs = got.global_scale
            ws = want.global_scale
            if gs.shape[2] > 1:
                gs, ws = gs[:, :, :n], ws[:, :, :n]
            np.testing.assert_array_equal(gs, ws)
    lengths = jnp.asarray(pos)
    a = decode_attention(q, kc, vc, lengths, backend="triton", block_k=16, num_splits=2)
    w = decode_attention_reference(q, whole_k, whole_v, lengths)
    assert _rel(a, w) < 6e-3


def test_long_context_32k():
    """Long-context accuracy on CPU (the 128K check runs on the GPU in bench_attention.py): the
    reference and the kernel (interpret mode) at 32K positions against float64 numpy."""
    b, hq, h, s, d = 1, 8, 1, 32768, 128
    q, k, v = _inputs(5, b, hq, h, s, d)
    lengths = np.asarray([s - 77], np.int32)
    t0 = time.time()
    for fmt in ("nvfp4", "bf16"):
        kc, vc = _cache(k, fmt), _cache(v, fmt)
        kf = dequantize(kc) if fmt != "bf16" else kc
        vf = dequantize(vc) if fmt != "bf16" else vc
        want = _np_attention(q, kf, vf, lengths, 1 / np.sqrt(d))
        ref = decode_attention_reference(q, kc, vc, jnp.asarray(lengths))
        out = decode_attention(q, kc, vc, jnp.asarray(lengths), backend="triton", block_k=128,
                               num_splits=8)
        assert _rel(ref, want) < 4e-3
        assert _rel(out, want) < 6e-3
    assert time.time() - t0 < 60


def _bf16_bits_value(bits):
    """float64 value of bf16 bit patterns (uint32, low 16 bits); numpy keeps subnormals."""
    return (np.asarray(bits, np.uint32) << 16).view(np.float32).astype(np.float64)


def test_nibble_bit_pattern_is_e2m1_times_2_pow_minus_126():
    n = np.arange(16, dtype=np.uint32)
    bits = np.asarray(AT.nibble_bits_bf16(jnp.asarray(n)))
    got = _bf16_bits_value(bits) * 2.0 ** 126
    np.testing.assert_array_equal(got, E2M1)
    assert np.all(np.signbit(got) == np.signbit(E2M1))  # code 8 is -0


def test_asm_word_emulation_matches_per_byte_decode():
    """The PTX sequence (prmt spread, mask, multiply-as-two-shifts, mask) on random 32-bit words
    of 4 code bytes, emulated in numpy uint32 arithmetic: lane k of output word j must hold the
    code of byte 2j+k (low nibble for the LO variant, high nibble for HI)."""
    rng = np.random.default_rng(0)
    w = rng.integers(0, 2 ** 32, size=4096, dtype=np.uint64).astype(np.uint32)
    w[:256] = np.arange(256, dtype=np.uint32) * 0x01010101  # every byte value
    byte = [(w >> (8 * i)) & 0xFF for i in range(4)]
    for mask, mul, nib in ((0x000F000F, 0x1040, lambda b: b & 0xF),
                           (0x00F000F0, 0x104, lambda b: b >> 4)):
        outs = AT.asm_word_emulation(w.astype(np.uint64), None, None, mask, mul)
        for j, o in enumerate(outs):
            o = o.astype(np.uint32)
            for k in range(2):
                lane = (o >> (16 * k)) & 0xFFFF
                want = E2M1[nib(byte[2 * j + k])]
                got = _bf16_bits_value(lane) * 2.0 ** 126
                np.testing.assert_array_equal(got, want)
    # and the PTX text implements exactly these constants
    assert "0x000F000F" in AT._ASM_LO and "0x1040" in AT._ASM_LO and "0x4140" in AT._ASM_LO
    assert "0x00F000F0" in AT._ASM_HI and "0x104;" in AT._ASM_HI and "0x4342" in AT._ASM_HI


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_emulated_decode_equals_dequantize(fmt):
    """Decoded tile (interpret path of the v2 decode) * 2**(126 - KSHIFT) == dequantize (without
    the nvfp4 global scale), bit for bit, incl. codes 0.5 and -0."""
    x = jax.random.normal(jax.random.PRNGKey(3), (32, 128)) * jnp.exp(
        2 * jax.random.normal(jax.random.PRNGKey(4), (32, 1)))
    qt = quantize(x, fmt, axis=-1, global_scope="row")
    s_u8 = jax.lax.bitcast_convert_type(qt.scales, jnp.uint8)
    s_bf = AT._expand_cols(AT._scale_bf16(s_u8, fmt), 64)
    lo, hi = AT._decode_v2(qt.codes, s_bf, fmt, interpret=True)
    got = np.stack([np.asarray(lo, np.float64), np.asarray(hi, np.float64)], -1).reshape(32, 128)
    got *= 2.0 ** (126 - AT.KSHIFT[fmt])
    from trace_jax.quant import scales_to_f32, unpacked_codes
    sc = np.repeat(np.asarray(scales_to_f32(qt.scales, fmt), np.float64), qt.format.block_size, -1)
    want = E2M1[np.asarray(unpacked_codes(qt))] * sc
    np.testing.assert_array_equal(got, want)
    assert np.sum(np.abs(want) == 0.5 * sc) > 0  # the subnormal code is exercised


@pytest.mark.parametrize("nan_path", ["fadd", "select"])
def test_mxfp4_scale_bytes_convert_exactly_and_nan_stays_nan(nan_path):
    """Every E8M0 byte in the documented window (2**e, e in [-96, 37]) becomes 2**(e + KSHIFT)
    in bf16 exactly; larger ones overflow to inf; byte 255 (NaN) must stay NaN, not inf (an inf
    K scale with negative codes would give a -inf score and hide the NaN). Both NaN paths."""
    b = jnp.arange(256, dtype=jnp.uint8)[:, None]
    got = np.asarray(AT._scale_bf16(b, "mxfp4", nan_path), np.float64)[:, 0]
    e = np.arange(256) - 127
    window = (e >= -96) & (e <= 37)
    np.testing.assert_array_equal(got[window], 2.0 ** (e[window] + AT.KSHIFT["mxfp4"]))
    assert np.all(np.isposinf(got[(e > 37) & (e < 128)]))
    assert np.isnan(got[255])


def test_mxfp4_nan_path_follows_tile_rows(monkeypatch):
    """fadd at <= 32-row tiles, select at 64 (session 36's A/B); the module switch forces one;
    an unknown path is refused by name."""
    assert [AT.mxfp4_nan_path(r) for r in (16, 32, 64)] == ["fadd", "fadd", "select"]
    monkeypatch.setattr(AT, "MXFP4_NAN_PATH", "select")
    assert AT.mxfp4_nan_path(32) == "select"
    with pytest.raises(ValueError, match="nan_path"):
        AT._scale_bf16(jnp.zeros((2, 2), jnp.uint8), "mxfp4", "where")


@pytest.mark.parametrize("block_k", [32, 64])
def test_mxfp4_nan_scale_reaches_the_output_with_either_tile(block_k):
    """A NaN block scale (E8M0 byte 255) in a valid K row makes that sequence's output NaN on
    the kernel's fadd (32-row tiles) and select (64-row) paths alike, where an inf would hide; the other sequence, and a
    NaN scale in a row past its length, leave outputs finite and equal to the reference."""
    b, hq, h, s, d = 2, 4, 1, 128, 64
    q, k, v = _inputs(31, b, hq, h, s, d)
    # Sequence 0: row 9's K positive and the queries negative, so an inf K scale (the NaN lost)
    # would give a -inf score, a zero weight and a finite output.
    k = k.at[0, 0, 9].set(1.0 + jnp.abs(k[0, 0, 9]) / 4)  # no zero codes (0 * inf is NaN)
    q = q.at[0].set(-jnp.abs(q[0]))
    lengths = jnp.asarray([100, 70], jnp.int32)
    kc, vc = _cache(k, "mxfp4"), _cache(v, "mxfp4")
    want = decode_attention_reference(q, dequantize(kc), dequantize(vc), lengths)
    sb = jax.lax.bitcast_convert_type(kc.scales, jnp.uint8)
    sb = sb.at[0, 0, 9, 1].set(255).at[1, 0, 90, 0].set(255)  # row 90 >= length 70: masked
    import dataclasses
    kc = dataclasses.replace(kc, scales=jax.lax.bitcast_convert_type(sb, kc.scales.dtype))
    out = np.asarray(AT.decode_attention_triton(
        q, kc, vc, lengths, sm_scale=d ** -0.5, block_k=block_k, num_splits=1,
        out_dtype=jnp.float32, interpret=True), np.float32)
    assert np.all(np.isnan(out[0]))
    assert np.all(np.isfinite(out[1]))
    assert _rel(out[1], np.asarray(want, np.float32)[1]) < 6e-3


@pytest.mark.parametrize("fmt", ["bf16", "nvfp4"])
def test_f32_p_precision_beats_bf16_p(fmt):
    """precision="f32" (P split into two bf16 terms) is f32-accurate against float64 before the
    output rounding; precision="bf16" (v1) is ~1e-3 off."""
    b, hq, h, s, d = 1, 8, 1, 512, 128
    q, k, v = _inputs(21, b, hq, h, s, d)
    lengths = np.asarray([s - 5], np.int32)
    kc, vc = _cache(k * 0.3, fmt), _cache(v, fmt)
    kf = dequantize(kc) if fmt != "bf16" else kc
    vf = dequantize(vc) if fmt != "bf16" else vc
    want = _np_attention(q, kf, vf, lengths, 1 / np.sqrt(d))
    err = {}
    for prec in ("f32", "bf16"):
        out = AT.decode_attention_triton(q, kc, vc, jnp.asarray(lengths), sm_scale=d ** -0.5,
                                         block_k=64, num_splits=2, precision=prec,
                                         out_dtype=jnp.float32, interpret=True)
        err[prec] = _rel(out, want)
    assert err["f32"] < 2e-5, err
    assert err["bf16"] > 5 * err["f32"], err


def _v6_case(seed, fmt, lengths, d, hq=8, h=2):
    """GQA inputs for the v6 kernel: q, K and V caches in ``fmt`` in the word layout (S = the
    longest length), the lengths, and float64 attention over the dequantized caches."""
    q, k, v = _inputs(seed, len(lengths), hq, h, max(lengths), d)
    lengths = np.asarray(lengths, np.int32)
    kc, vc = _cache(k * 0.3, fmt), _cache(v, fmt)
    want = _np_attention(q, dequantize(kc), dequantize(vc), lengths, d ** -0.5)
    return q, KL.to_kv_words(kc), KL.to_kv_words(vc), lengths, want


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_v6_default_knobs_at_either_p_precision(monkeypatch, fmt):
    """A v6 call without knobs takes ``tuned_knobs(fmt, "v6")`` (one set per format since
    session 38: MXFP4's 32-row tiles at both P precisions, so its NaN path is fadd), and at
    either precision it matches float64 attention within that precision's rounding (lengths 1
    and not a multiple of the block)."""
    d = 64
    q, kw, vw, lengths, want = _v6_case(29, fmt, [200, 77, 1], d)
    seen, tuned = [], AT.tuned_knobs
    monkeypatch.setattr(AT, "tuned_knobs", lambda *a: seen.append(a) or tuned(*a))
    err = {}
    for prec in ("f32", "bf16"):
        out = AT.decode_attention_triton(q, kw, vw, jnp.asarray(lengths), sm_scale=d ** -0.5,
                                         precision=prec, out_dtype=jnp.float32, interpret=True)
        err[prec] = _rel(out, want)
    assert seen == [(fmt, "v6"), (fmt, "v6")]
    assert err["f32"] < 2e-5 and err["bf16"] < 5e-3, err
    assert fmt == "nvfp4" or AT.mxfp4_nan_path(tuned(fmt, "v6")[0]) == "fadd"


def test_reference_and_op_follow_the_p_precision(monkeypatch):
    """The CPU reference with ``p_precision="bf16"`` rounds the unnormalised weights exp(s -
    max) to bf16 before P.V (their f32 sum normalises), as the GPU kernel's one-MMA P.V does: it
    matches a float64 computation of exactly that, while the f32 reference matches exact
    attention and the two differ by about a bf16 rounding. ``ops.decode_attention`` (the
    reference on a CPU) follows its ``p_precision`` and refuses an unknown one."""
    import ml_dtypes

    from trace_jax import ops
    b, hq, h, s, d = 2, 8, 2, 96, 64
    q, k, v = _inputs(23, b, hq, h, s, d)
    lengths = np.asarray([s, s - 17], np.int32)
    kc, vc = _cache(k * 0.3, "nvfp4"), _cache(v, "nvfp4")
    kf, vf = (np.asarray(dequantize(c), np.float64) for c in (kc, vc))
    ref = {p: np.asarray(ops.decode_attention_reference(
        q.astype(jnp.float32), kc, vc, jnp.asarray(lengths), p_precision=p), np.float64)
        for p in ops.P_PRECISIONS}
    want = {"f32": _np_attention(q, kf, vf, lengths, d ** -0.5), "bf16": np.zeros((b, hq, d))}
    qn = np.asarray(q, np.float64)
    for i in range(b):
        n = int(lengths[i])
        for j in range(hq):
            kk, vv = kf[i, j // (hq // h), :n], vf[i, j // (hq // h), :n]
            e = np.exp((kk @ qn[i, j]) * d ** -0.5 - np.max((kk @ qn[i, j]) * d ** -0.5))
            w = e.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
            want["bf16"][i, j] = (w @ vv) / e.sum()
    gap = _rel(ref["bf16"], ref["f32"])
    assert _rel(ref["f32"], want["f32"]) < 1e-5
    # (the f32 exp puts a few weights on the other side of a bf16 rounding than float64's)
    assert _rel(ref["bf16"], want["bf16"]) < 0.1 * gap
    assert 3e-4 < gap < 1e-2
    for p in ops.P_PRECISIONS:
        got = ops.decode_attention(q.astype(jnp.float32), kc, vc, jnp.asarray(lengths),
                                   p_precision=p)
        np.testing.assert_array_equal(np.asarray(got, np.float64), ref[p])
    with pytest.raises(ValueError, match="p_precision='f16'"):
        ops.decode_attention(q, kc, vc, jnp.asarray(lengths), p_precision="f16")
    # on a GPU the op hands its setting to the kernel (a recorder stands in for it here), and
    # the kernel glue's reference backend applies it
    seen = []
    monkeypatch.setattr(ops, "_kernel", lambda *a: lambda *args, **kw: seen.append(kw) or args[0])
    ops.decode_attention(q, kc, vc, jnp.asarray(lengths), p_precision="bf16")
    assert seen == [{"precision": "bf16"}]
    glue = DA.decode_attention(q.astype(jnp.float32), kc, vc, jnp.asarray(lengths),
                               backend="reference", precision="bf16", block_k=64)
    np.testing.assert_array_equal(np.asarray(glue, np.float64),
                                  np.asarray(jnp.asarray(ref["bf16"]).astype(jnp.bfloat16),
                                             np.float64))


def test_split_combine_kernel_equals_the_xla_combine():
    """The Pallas split combine (interpret mode) equals the XLA one on random partials with
    fully masked splits (running max -1e30, sum 0, as a split past the sequence's length
    leaves them) and interleaves the even / odd halves, also reading the splits in chunks and
    narrower column tiles (td); through the wrapper the two combines agree, and shapes or knobs
    the kernel cannot tile take the XLA one."""
    ks = jax.random.split(jax.random.key(31), 4)
    b, h, p, d2, gq = 2, 3, 8, 32, 8
    acc_e, acc_o = (jax.random.normal(k, (b, h, p, d2, gq)) for k in ks[:2])
    m = jax.random.normal(ks[2], (b, h, p, gq)) * 4
    l = jax.random.uniform(ks[3], (b, h, p, gq)) + 0.5
    m, l = m.at[0, 1, 5:].set(AT._NEG), l.at[0, 1, 5:].set(0.0)  # splits 5.. empty
    ref = np.asarray(AT.combine_transposed_halves(acc_e, acc_o, m, l))
    got = np.asarray(AT.combine_transposed_halves_pallas(acc_e, acc_o, m, l, interpret=True))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    for chunk, td in ((2, 16), (4, 8), (8, 4)):  # P read in chunks (an empty chunk included);
        np.testing.assert_allclose(np.asarray(AT.combine_transposed_halves_pallas(  # narrower
            acc_e, acc_o, m, l, p_chunk=chunk, td=td, interpret=True)),  # column tiles
            ref, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got[..., 0::2], got[..., 1::2])  # the halves stay apart
    got16 = AT.combine_transposed_halves_pallas(acc_e, acc_o, m, l, out_dtype=jnp.bfloat16,
                                                interpret=True)  # one rounding of the same f32
    assert got16.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(got16), np.asarray(jnp.asarray(got, jnp.bfloat16)))
    assert AT.combine_kernel_fits(8, 64, 8) and not AT.combine_kernel_fits(3, 64, 8)
    assert not AT.combine_kernel_fits(8, 64, 8, td=12) and not AT.combine_kernel_fits(
        8, 64, 8, p_chunk=3)
    with pytest.raises(ValueError, match="powers of two"):
        AT.combine_transposed_halves_pallas(acc_e[:, :, :3], acc_o[:, :, :3], m[:, :, :3],
                                            l[:, :, :3])
    bq, hq, hk, s, d = 2, 8, 2, 128, 64
    q, k, v = _inputs(32, bq, hq, hk, s, d)
    kc, vc = (KL.to_kv_words(_cache(a, "nvfp4")) for a in (k, v))
    lengths = jnp.asarray([128, 20], jnp.int32)
    outs = {c: AT.decode_attention_triton(q, kc, vc, lengths, sm_scale=d ** -0.5, block_k=16,
                                          num_splits=4, out_dtype=jnp.float32, split_combine=c,
                                          interpret=True) for c in ("kernel", "xla")}
    np.testing.assert_allclose(np.asarray(outs["kernel"]), np.asarray(outs["xla"]), rtol=1e-5,
                               atol=1e-6)
    with pytest.raises(ValueError, match="split_combine must be"):
        AT.decode_attention_triton(q, kc, vc, lengths, sm_scale=1.0, split_combine="last")


def test_split_order_changes_only_the_launch_order():
    """split_order="inner" (grid (P, H, B), the default) and "outer" (grid (B, H, P)) give
    bit-identical results, a sequence with empty splits included; a bad order is an error."""
    bq, hq, hk, s, d = 2, 8, 2, 128, 64
    q, k, v = _inputs(33, bq, hq, hk, s, d)
    lengths = jnp.asarray([128, 20], jnp.int32)  # sequence 1: splits 2.. of 8 are empty
    kn, vn = _cache(k, "nvfp4"), _cache(v, "nvfp4")
    run = functools.partial(AT.decode_attention_triton, q, KL.to_kv_words(kn), KL.to_kv_words(vn),
                            lengths, sm_scale=d ** -0.5, block_k=16, num_splits=8,
                            out_dtype=jnp.float32, interpret=True)
    inner, outer = (np.asarray(run(split_order=o)) for o in ("inner", "outer"))
    np.testing.assert_array_equal(inner, outer)
    args = (q, KL.to_kv_words(kn), KL.to_kv_words(vn), lengths)
    grids = {o: re.findall(r"grid=\(([0-9, ]*)\)", str(jax.make_jaxpr(functools.partial(
        AT.decode_attention_triton, sm_scale=1.0, block_k=16, num_splits=8, interpret=True,
        split_order=o))(*args))) for o in ("inner", "outer")}
    assert grids == {"inner": ["8, 2, 2"], "outer": ["2, 2, 8"]}, grids  # (P, H, B) / (B, H, P)
    want = _np_attention(q, dequantize(kn), dequantize(vn), np.asarray(lengths), d ** -0.5)
    assert _rel(inner, want) < 2e-5
    with pytest.raises(ValueError, match="split_order must be"):
        run(split_order="reversed")


def test_bf16_partials_round_each_split_once():
    """partial_dtype=bf16 stores the split partials in bf16 (the pallas_call's partial outputs
    are bf16: half the bytes), at an error within the order of the output's own rounding; the
    default, one split and an f32 output keep f32 partials; another dtype is an error."""
    bq, hq, hk, s, d = 2, 8, 2, 128, 64
    q, k, v = _inputs(34, bq, hq, hk, s, d)
    lengths = jnp.asarray([128, 37], jnp.int32)
    kn, vn = _cache(k, "nvfp4"), _cache(v, "nvfp4")
    args = (q, KL.to_kv_words(kn), KL.to_kv_words(vn), lengths)

    def run(**kw):
        return AT.decode_attention_triton(*args, sm_scale=d ** -0.5, block_k=16, interpret=True,
                                          **kw)

    def kernel_out_dtypes(**kw):  # the attention pallas_call's four outputs
        def calls(jaxpr):
            for e in jaxpr.eqns:
                if e.primitive.name == "pallas_call":
                    yield e
                if "jaxpr" in e.params:
                    yield from calls(getattr(e.params["jaxpr"], "jaxpr", e.params["jaxpr"]))

        eqn = next(calls(jax.make_jaxpr(functools.partial(run, **kw))().jaxpr))
        return [str(a.aval.dtype) for a in eqn.outvars]

    want = _np_attention(q, dequantize(kn), dequantize(vn), np.asarray(lengths), d ** -0.5)
    out = {pd: run(num_splits=4, partial_dtype=pd) for pd in (jnp.bfloat16, jnp.float32)}
    assert out[jnp.bfloat16].dtype == jnp.bfloat16
    e_bf16, e_f32 = _rel(out[jnp.bfloat16], want), _rel(out[jnp.float32], want)
    assert not np.array_equal(np.asarray(out[jnp.bfloat16]), np.asarray(out[jnp.float32]))
    # two independent bf16 roundings (partial, output) where a head has one non-empty split:
    # ~sqrt(2) x the output rounding alone (measured 1.43x here); a wrong merge gives O(1)
    assert e_bf16 < 1.6 * e_f32 and e_bf16 < 4e-3, (e_bf16, e_f32)
    bf16 = dict(partial_dtype=jnp.bfloat16)
    out_avals = {name: kernel_out_dtypes(**kw) for name, kw in {
        "bf16": dict(num_splits=4, **bf16), "default": dict(num_splits=4),
        "one split": dict(num_splits=1, **bf16)}.items()}
    assert out_avals == {"bf16": ["bfloat16", "bfloat16", "float32", "float32"],
                         "default": ["float32"] * 4, "one split": ["float32"] * 4}, out_avals
    with pytest.raises(ValueError, match="partial_dtype must be"):
        run(partial_dtype=jnp.float16)
    # the bf16-cache kernel takes the option too
    kb, vb = k.astype(jnp.bfloat16), v.astype(jnp.bfloat16)
    bf = {pd: AT.decode_attention_triton(q, kb, vb, lengths, sm_scale=d ** -0.5, block_k=16,
                                         num_splits=4, partial_dtype=pd, interpret=True)
          for pd in (jnp.bfloat16, jnp.float32)}
    want_bf = _np_attention(q, kb, vb, np.asarray(lengths), d ** -0.5)
    assert not np.array_equal(np.asarray(bf[jnp.bfloat16]), np.asarray(bf[jnp.float32]))
    assert _rel(bf[jnp.bfloat16], want_bf) < 1.6 * _rel(bf[jnp.float32], want_bf)


_V3_SHAPES = [
    (32, 4, 128, 96, 16, 3, 1),    # G = 8 (the N = 8 MMA shape), partial blocks, 3 splits
    (8, 2, 128, 96, 32, None, 2),  # G = 4 padded to 8, two chains per iteration
    (4, 4, 64, 48, 16, 1, 2),      # MHA (G = 1), one split, chains with an odd block count
    (32, 2, 256, 64, 16, 2, 1),    # G = 16, head_dim 256
]


# every shape for NVFP4; MXFP4 (the same kernels, another scale decode) on the first (G = 8,
# partial blocks, 3 splits: v3, v4, v6 against the reference)
@pytest.mark.parametrize("fmt,hq,h,d,s,block_k,splits,chains",
                         [("nvfp4", *c) for c in _V3_SHAPES]
                         + [("mxfp4", *c) for c in _V3_SHAPES[:1]])
def test_v3_matches_reference(fmt, hq, h, d, s, block_k, splits, chains):
    """decode="v3" (transposed MMAs, N = G query heads, ``chains`` independent row chunks):
    f32 output within f32 rounding of float64 attention over the dequantized cache, and the
    reference within the usual bound. decode="v4" (v3 with the V codes read as uint32 words):
    bit-identical to v3."""
    b = 3
    q, k, v = _inputs(zlib.crc32(f"{fmt}-{hq}-{d}-v3".encode()) % 1000, b, hq, h, s, d)
    lengths = jnp.asarray([1, s // 2 + 3, s], jnp.int32)
    kc, vc = _cache(k, fmt), _cache(v, fmt)
    kw = dict(sm_scale=d ** -0.5, block_k=block_k, num_splits=splits, out_dtype=jnp.float32,
              interpret=True)
    o3 = AT.decode_attention_triton(q, kc, vc, lengths, decode="v3", chains=chains, **kw)
    assert o3.shape == (b, hq, d)
    want = _np_attention(q, dequantize(kc), dequantize(vc), np.asarray(lengths), d ** -0.5)
    assert _rel(o3, want) < 1e-5  # f32 outputs, f32 P (the default precision)
    ref = decode_attention_reference(q, kc, vc, lengths)
    assert _rel(o3.astype(jnp.bfloat16), ref) < 6e-3
    o4 = AT.decode_attention_triton(q, kc, vc, lengths, decode="v4", chains=chains, **kw)
    np.testing.assert_array_equal(np.asarray(o4), np.asarray(o3))
    if (fmt, hq, d, s) == ("nvfp4", 32, 128, 96):  # the public wrapper, default knobs: one shape
        for dec in ("v3", "v4"):
            out = decode_attention(q, kc, vc, lengths, backend="triton", decode=dec,
                                   block_k=block_k)
            assert out.dtype == jnp.bfloat16 and _rel(out, ref) < 6e-3
        for prec in ("f32", "bf16"):  # default (tuned) block_k and splits, both P precisions
            od = AT.decode_attention_triton(q, kc, vc, lengths, sm_scale=d ** -0.5, decode="v4",
                                            precision=prec, out_dtype=jnp.float32,
                                            interpret=True)
            assert _rel(od, ref) < 6e-3
    # v5 / v6: v4 with the K / K and V caches in the kv_layout words (the default for such
    # caches): the same decoded values, so v5 gives the same output bit for bit and v6 (whose
    # V^T is a transpose of the decoded tile, so the CPU dot may sum in another order) within
    # f32 rounding; the reference reads those caches too
    kwc, vwc = KL.to_kv_words(kc), KL.to_kv_words(vc)
    if (hq, chains) == (32, 1):  # v5 (not a default for init_cache's caches) on two shapes
        o5 = AT.decode_attention_triton(q, kwc, vc, lengths, chains=chains, **kw)
        np.testing.assert_array_equal(np.asarray(o5), np.asarray(o4))
    o6 = AT.decode_attention_triton(q, kwc, vwc, lengths, chains=chains, **kw)
    assert _rel(o6, o4) < 1e-6
    np.testing.assert_array_equal(np.asarray(decode_attention_reference(q, kwc, vwc, lengths)),
                                  np.asarray(ref))


def test_word_layout_decodes_refuse_a_cache_in_another_layout():
    q, k, v = _inputs(4, 1, 8, 2, 32, 128)
    kc, vc = _cache(k, "nvfp4"), _cache(v, "nvfp4")
    kw, vw = KL.to_kv_words(kc), KL.to_kv_words(vc)
    n = jnp.asarray([32], jnp.int32)
    for kk, vv, dec in ((kc, vc, "v5"), (kw, vc, "v4"), (kw, vw, "v5"), (kw, vc, "v6"),
                        (kc, vw, "v6"), (kc, vw, None)):
        with pytest.raises(ValueError, match="layout"):
            AT.decode_attention_triton(q, kk, vv, n, sm_scale=0.1, decode=dec, interpret=True)


def test_unpack_words_is_the_byte_order_of_the_cache():
    """v4 reads the V codes as little-endian uint32 words (an XLA bitcast in the wrapper) and
    ``_unpack_words`` must give back the [BK, D2] code bytes in order."""
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 256, size=(16, 64), dtype=np.uint8)
    words = jax.lax.bitcast_convert_type(jnp.asarray(codes).reshape(16, 16, 4), jnp.uint32)
    np.testing.assert_array_equal(np.asarray(AT._unpack_words(words, 64)), codes)


def test_split_combine_barrier_keeps_the_result(monkeypatch):
    """COMBINE_BARRIER only changes how XLA fuses the v3/v4 split combine (``split_combine="xla"``),
    not what it computes: with and without it the kernel (interpret mode, 4 splits, ragged
    lengths) gives the same output, and both match the float64 attention."""
    q, k, v = _inputs(11, 3, 8, 2, 128, 64)
    kc, vc = _cache(k, "nvfp4"), _cache(v, "nvfp4")
    lengths = jnp.array([128, 37, 1], jnp.int32)
    outs = []
    for barrier in (False, True):
        monkeypatch.setattr(AT, "COMBINE_BARRIER", barrier)
        jax.clear_caches()
        f = lambda q, kc, vc, n: AT.decode_attention_triton(  # noqa: E731
            q, kc, vc, n, sm_scale=0.125, block_k=16, num_splits=4, decode="v4",
            interpret=True, out_dtype=jnp.float32, split_combine="xla")
        hlo = jax.jit(f).lower(q, kc, vc, lengths).as_text()
        assert ("optimization_barrier" in hlo) == barrier  # the flag is what the program holds
        outs.append(np.asarray(f(q, kc, vc, lengths)))
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6, atol=1e-6)
    ref = _np_attention(q, dequantize(kc), dequantize(vc), lengths, 0.125)
    assert _rel(outs[1], ref) < 1e-5


def test_default_split_rule():
    """``default_splits``: for decode v6 the split counts session 19 measured best or within
    3.6% of the best at 8 NVFP4 shapes (NOTES_attention, 19b / 19c); a block count without a
    divisor in the rule's range gets the largest divisor below it, never splits of fewer than
    256 rows; other decode versions and ``SPLIT_TARGET`` keep the old program-count rule."""
    measured = {(8, 8192): 32, (32, 8192): 32, (128, 8192): 8, (8, 32768): 128,
                (32, 32768): 32, (111, 32768): 32, (8, 131072): 128, (27, 131072): 128}
    for (b, s), p in measured.items():
        assert AT.default_splits(b, 4, s // 32, 32, "v6", 1) == p, (b, s)
    assert AT.default_splits(8, 4, 74, 32, "v6", 1) == 2  # 74 = 2 x 37: 37 blocks per split
    assert AT.default_splits(8, 4, 127, 32, "v6", 1) == 1  # prime: one split, not 127 of 1
    assert AT.default_splits(8, 4, 4, 32, "v6", 1) == 1  # 128 rows: fewer than 256 anyway
    assert AT.default_splits(8, 4, 4096, 32, "v4", 1) == 256  # old rule: 8192 programs
    assert AT.default_splits(8, 4, 127, 32, "v4", 1) == 127  # (which may split to 1 block)
    assert AT.default_splits(8, 4, 2048, 64, "v6", 1) == 128  # MXFP4 v6 at 8 x 128K (64-row
    # blocks): 19c's best there


def test_split_target_default_sets_the_split_count(monkeypatch):
    """``SPLIT_TARGET`` (what ``bench_rollout.py --attn_split_target`` sets) is the split target
    when a call names none: it changes the number of splits (the partial outputs' P axis in the
    lowered program) and not the result. Without it decode v6 takes the FP4 rule: >=
    FP4_SPLIT_TARGET programs with FP4_SPLIT_ROWS[0] .. [1] cache rows per split."""
    q, k, v = _inputs(12, 2, 8, 2, 512, 64)
    kc, vc = _cache(k, "nvfp4"), _cache(v, "nvfp4")
    kw, vw = KL.to_kv_words(kc), KL.to_kv_words(vc)  # v6's cache layout
    lengths = jnp.array([512, 45], jnp.int32)
    outs, hlos = [], []
    monkeypatch.setattr(AT, "FP4_SPLIT_ROWS", (64, 128))  # 8 .. 16 blocks of 8 rows per split
    try:
        # None: the rule, 4096 programs capped at 64 blocks / 8 = P 8; then 16 programs -> P 4,
        # 64 -> P 16 (at least 2 blocks per split; the rule's row bounds do not apply)
        for target in (None, 16, 64):
            monkeypatch.setattr(AT, "SPLIT_TARGET", target)
            jax.clear_caches()
            f = lambda q, kc, vc, n: AT.decode_attention_triton(  # noqa: E731
                q, kc, vc, n, sm_scale=0.125, block_k=8, decode="v6", interpret=True,
                out_dtype=jnp.float32)
            hlos.append(jax.jit(f).lower(q, kw, vw, lengths).as_text())
            outs.append(np.asarray(f(q, kw, vw, lengths)))
        monkeypatch.setattr(AT, "SPLIT_TARGET", None)
        monkeypatch.setattr(AT, "FP4_SPLIT_TARGET", 8)  # 8 programs: P 2, raised to 4 by the
        jax.clear_caches()  # rows bound (64 blocks / 16 per split)
        hlos.append(jax.jit(f).lower(q, kw, vw, lengths).as_text())
    finally:
        jax.clear_caches()  # no trace made with a non-default target outlives the test
    for hlo, p in zip(hlos, (8, 4, 16, 4)):
        assert f"tensor<2x2x{p}x32x8xf32>" in hlo, p
    for o in outs[1:]:
        np.testing.assert_allclose(o, outs[0], rtol=0, atol=1e-5)  # summation order only
    ref = _np_attention(q, dequantize(kc), dequantize(vc), lengths, 0.125)
    assert max(_rel(o, ref) for o in outs) < 1e-5


def test_default_version_follows_the_cache_layouts():
    """decode=None picks the kernel version that reads the caches' layouts (what the benchmark
    reports as the model's kernel)."""
    x = jnp.ones((1, 1, 4, 16), jnp.float32)
    nat = Q.quantize(x, "nvfp4", axis=-1, global_scope="row")
    words = KL.to_kv_words(nat)
    assert AT.default_version(words, words) == "v6"
    assert AT.default_version(words, nat) == "v5"
    assert AT.default_version(nat, nat) == "v4"
    assert AT.default_version(x.astype(jnp.bfloat16), x.astype(jnp.bfloat16)) is None


def test_attention_benchmark_shapes_put_the_rollout_first_and_fit_the_budget():
    from pallas_kernels import bench_attention as BA
    shapes = BA.attention_shapes(tiny=False)
    assert shapes[:2] == list(BA.ROLLOUT_SHAPES)
    budget = BA.KV_BUDGET
    for b, s in shapes:  # the bf16 cache of every row fits: K and V, 4 heads x 128 dims x 2 B
        assert 2 * b * 4 * s * 128 * 2 <= budget
    assert sorted(shapes[2:]) == sorted((b, s) for b in (8, 32, 128) for s in (8192, 32768, 131072))


def test_append_and_reference_attention_name_bad_rows_and_lengths():
    """append_kv and the reference attention refuse inputs that used to be clamped, wrapped or
    broadcast into a silently wrong cache or output: rows past the cache end, negative
    positions, a head or head-dim mismatch, lengths outside 1..S or of the wrong shape, K and
    V caches of different shapes."""
    cache = empty_cache((2, 2, 8, 16), "nvfp4")
    new = jnp.ones((2, 2, 2, 16))
    append_kv(cache, new, jnp.asarray([6, 0]))  # the last two rows: fine
    for bad_new, pos, msg in [(new, [7, 0], r"positions \[7, 0\] outside 0..6 \(2 new rows"),
                              (new, [-3, 0], "outside 0..6"),
                              (jnp.ones((2, 1, 2, 16)), [0, 0], r"need \[2, 2, T <= 8, 16\]"),
                              (jnp.ones((2, 2, 2, 8)), [0, 0], "do not fit the cache"),
                              (new, [0], r"positions shape \(1,\) != \(2,\)")]:
        with pytest.raises(ValueError, match=msg):
            append_kv(cache, bad_new, jnp.asarray(pos))
    from trace_jax import ops

    q = jnp.ones((2, 4, 16), jnp.bfloat16)
    k = jnp.ones((2, 2, 8, 16), jnp.bfloat16)
    ops.decode_attention_reference(q, k, k, jnp.asarray([8, 1]))
    for kv, lengths, msg in [((k, k), [9, 1], r"lengths \[9, 1\] outside 1..8"),
                             ((k, k), [0, 1], "outside 1..8"),
                             ((k, k), [3], r"lengths shape \(1,\) != \(2,\)"),
                             ((k, k[:, :1]), [3, 3], "do not fit q"),
                             ((k[:1], k[:1]), [3, 3], "B = 2")]:
        with pytest.raises(ValueError, match=msg):
            ops.decode_attention_reference(q, *kv, jnp.asarray(lengths))
        # the Triton kernel's wrapper too (it read the batch and S from q and K alone: a
        # missing cache row, zero lengths as NaN, lengths past S clipped)
        with pytest.raises(ValueError, match=msg.replace("B = 2", "with B = 2")):
            decode_attention(q, *kv, jnp.asarray(lengths, jnp.int32), backend="triton")


@pytest.mark.parametrize("fmt,prec", [("nvfp4", "f32"), ("mxfp4", "bf16")])
def test_v6_late_v_transpose_gives_the_same_attention(fmt, prec):
    """``late_vt`` only moves each V plane's transpose to its own MMA: the same output as the
    default to the bit, and float64's within the kernel's tolerance (lengths 1 and not a
    multiple of the block, several splits)."""
    d = 64
    q, kw, vw, lengths, want = _v6_case(33, fmt, [192, 77, 1], d)
    out = [np.asarray(AT.decode_attention_triton(
        q, kw, vw, jnp.asarray(lengths), sm_scale=d ** -0.5, num_splits=3, precision=prec,
        late_vt=late, out_dtype=jnp.float32, interpret=True)) for late in (False, True)]
    np.testing.assert_array_equal(out[1], out[0])
    assert _rel(out[1], want) < (2e-5 if prec == "f32" else 5e-3)


def test_late_vt_default_follows_the_measured_rule(monkeypatch):
    """With ``late_vt`` and ``LATE_VT`` unset, v6 transposes late for NVFP4 with f32 P only, and
    only where a split holds at least ``LATE_VT_MIN_ROWS`` cache rows (the cases measured
    faster); ``LATE_VT`` and the argument override the rule, in that order. The kernel is
    checked to receive the resolved flag, with the split's rows as the call computes them."""
    seen = []
    real = AT._fp4_kernel_v3
    monkeypatch.setattr(AT, "_fp4_kernel_v3", lambda *a, **kw: (seen.append(kw["late_vt"]),
                                                                 real(*a, **kw))[1])
    d = 64

    def run(fmt, prec, late_vt=None, splits=1):
        q, kw, vw, lengths, _ = _v6_case(5, fmt, [64, 3], d)
        AT.decode_attention_triton.__wrapped__(
            q, kw, vw, jnp.asarray(lengths), sm_scale=d ** -0.5, num_splits=splits,
            precision=prec, late_vt=late_vt, interpret=True)
        return seen.pop()

    assert AT.LATE_VT_MIN_ROWS == 1024
    assert AT.default_late_vt("nvfp4", "f32", 1024) is True
    assert AT.default_late_vt("nvfp4", "f32", 1023) is False
    assert not any(AT.default_late_vt(f, p, 1 << 20) for f, p in
                   (("nvfp4", "bf16"), ("mxfp4", "f32"), ("mxfp4", "bf16")))
    # the 64-row cache in one split (64 rows) and in two (32 rows each) about the threshold
    monkeypatch.setattr(AT, "LATE_VT_MIN_ROWS", 64)
    assert [run(f, p) for f in ("nvfp4", "mxfp4") for p in ("f32", "bf16")] == [
        True, False, False, False]
    assert run("nvfp4", "f32", splits=2) is False
    monkeypatch.setattr(AT, "LATE_VT_MIN_ROWS", 32)
    assert run("nvfp4", "f32", splits=2) is True
    assert run("nvfp4", "f32", late_vt=False) is False
    monkeypatch.setattr(AT, "LATE_VT", True)
    assert run("mxfp4", "bf16") is True
    assert run("mxfp4", "bf16", late_vt=False) is False


def test_attention_benchmark_skips_a_row_the_device_has_no_memory_for(monkeypatch, tmp_path):
    """A row that runs the device out of memory (the shapes are sized for an H200; an H100
    could not hold 128 x 128K) is skipped and named in the results, and the rows after it still
    run; any other runtime error still stops the run."""
    from pallas_kernels import bench_attention as BA
    monkeypatch.setattr(BA, "attention_shapes", lambda tiny: [(2, 256), (3, 128)])
    oom = jax.errors.JaxRuntimeError(
        "NOT_FOUND: All configs failed during profiling. EXECUTION FAILED: RESOURCE_EXHAUSTED: "
        "Out of memory while trying to allocate 16.02GiB")

    def row(self, b, s):
        if b == 2:
            raise oom
        return {"batch": b, "context": s}

    monkeypatch.setattr(BA.Bench, "attention_row", row)
    monkeypatch.setattr(BA, "to_markdown", lambda res: str(res.get("skipped")))
    res = BA.main(["--tiny", "--skip", "long,qh,append", "--out", str(tmp_path)])
    assert res["attention"] == [{"batch": 3, "context": 128}]
    assert res["skipped"] == ["attention 2 x 256 (out of device memory)"]
    assert "out of device memory" in (tmp_path / "kernels_attention.md").read_text()
    oom = jax.errors.JaxRuntimeError("INTERNAL: a kernel failed to launch")
    with pytest.raises(jax.errors.JaxRuntimeError, match="failed to launch"):
        BA.main(["--tiny", "--skip", "long,qh,append", "--out", str(tmp_path)])
