"""quantize_with_hint: Pallas Triton kernel (interpret mode) bit-identical to trace_jax.quant
(quantize + extract_hint, the multiply-by-reciprocal spec) on random f32 and bf16 inputs and on
edge inputs (zeros, ties, saturation, tiny/subnormal/huge magnitudes, signed zeros, NaN/Inf)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels.quantize_hint import (default_knobs, quantize_with_hint,
                                          quantize_with_hint_reference)
from trace_jax import quant as Q
from tests._jaxpr import eqns

# The reference (trace_jax.quant.quantize + extract_hint) jitted, as the model runs it: op by op,
# every primitive compiled on its own for each shape (seconds per test)
_reference = jax.jit(quantize_with_hint_reference,
                     static_argnames=("fmt", "global_scope", "with_hint", "backend"))

CASES = [("nvfp4", "row"), ("nvfp4", "tensor"), ("mxfp4", "row")]


def _u8(a):
    return np.asarray(jax.lax.bitcast_convert_type(a, jnp.uint8))


def _assert_same(qk, hk, qr, hr):
    np.testing.assert_array_equal(np.asarray(qk.codes), np.asarray(qr.codes))
    np.testing.assert_array_equal(_u8(qk.scales), _u8(qr.scales))
    assert qk.global_scale.shape == qr.global_scale.shape
    np.testing.assert_array_equal(np.asarray(qk.global_scale, np.float32).view(np.uint32),
                                  np.asarray(qr.global_scale, np.float32).view(np.uint32))
    np.testing.assert_array_equal(np.asarray(hk.bits), np.asarray(hr.bits))
    assert (qk.fmt, qk.axis, hk.kind) == (qr.fmt, qr.axis, hr.kind)


def _check(x, fmt, scope, values=None, **kw):
    """The kernel's QTensor and hint against the reference, and its dequantized values (the
    ``values`` output, in ``values`` or else x's dtype) against ``quant.dequantize`` of the
    reference QTensor."""
    x = jnp.asarray(x)
    values = x.dtype if values is None else jnp.dtype(values)
    qr, hr = _reference(x, fmt, global_scope=scope)
    qk, hk, yk = quantize_with_hint(x, fmt, global_scope=scope, values=values,
                                    backend="triton", **kw)
    _assert_same(qk, hk, qr, hr)
    yr = Q.dequantize(qr, values)
    assert yk.shape == x.shape and yk.dtype == values
    np.testing.assert_array_equal(_u8(yk), _u8(yr))  # bit for bit: -0 and NaN included
    return qk


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("fmt,scope,m,k", [
    (fmt, scope, m, k) for fmt, scope in CASES for m, k in ((16, 256), (24, 768), (5, 96))
    if k % Q.get_format(fmt).block_size == 0])
def test_bit_identical_random(fmt, scope, m, k, dtype):
    x = jax.random.normal(jax.random.PRNGKey(m * k), (m, k), jnp.float32)
    x = x * jnp.exp(3 * jax.random.normal(jax.random.PRNGKey(1), (m, 1)))
    x = x.at[0].set(0.0).astype(dtype)  # an all-zero row
    _check(x, fmt, scope)


@pytest.mark.parametrize("fmt,scope", CASES)
def test_f32_values_of_a_bf16_input(fmt, scope):
    """bf16 in, exact f32 values out (the model's KV site: code * scale * row scale, which bf16
    cannot hold for NVFP4)."""
    x = jax.random.normal(jax.random.PRNGKey(3), (8, 128), jnp.float32).astype(jnp.bfloat16)
    _check(x, fmt, scope, values=jnp.float32)


def _edge_rows():
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0], np.float32)
    row = np.concatenate([ties, -ties, ties * 0.5, 7.9 * np.ones(8, np.float32)])  # 32
    rng = np.random.default_rng(0)
    small = -np.abs(rng.standard_normal(32)).astype(np.float32) * 1e-6
    spread = small.copy()
    spread[0] = 1e30  # other blocks' e4m3 scales underflow to 0: z = x * 0 = -0
    rows = [
        row,
        np.zeros(32, np.float32),
        row * np.float32(1e-30),
        row * np.float32(3e30),  # saturation at 6 and huge magnitudes
        spread,
        small * np.float32(1e-33),  # subnormal magnitudes
        np.full(32, np.finfo(np.float32).max, np.float32) * np.sign(small),
        row * np.float32(np.pi),  # nvfp4 scales that are not powers of two
    ]
    return np.stack(rows, 0)


@pytest.mark.parametrize("fmt,scope", CASES)
def test_edge_values(fmt, scope):
    x = _edge_rows()
    _check(x, fmt, scope)
    if scope == "row":  # the same rows in bf16 (saturating the f32 max row)
        _check(jnp.asarray(x).astype(jnp.bfloat16), fmt, scope)


@pytest.mark.parametrize("variant", ["v5", "v4", "v3"])
@pytest.mark.parametrize("fmt,scope", CASES)
def test_nan_inf_rows_bit_identical(fmt, scope, variant):
    x = np.tile(_edge_rows(), (2, 2))  # 16 x 64
    x[9, 5] = np.nan
    x[11, 40] = -np.inf
    x[12, 3] = np.inf
    x[13, 33] = -np.nan
    qk = _check(x, fmt, scope, variant=variant)
    d = np.asarray(Q.dequantize(qk))
    good = np.delete(np.arange(16), [9, 11, 12, 13])
    if fmt == "nvfp4" and scope == "tensor":
        assert np.all(np.isnan(d))
    elif fmt == "nvfp4":  # per-row global scale: the whole row, and only that row
        assert np.all(np.isnan(d[[9, 11, 12, 13]])) and np.all(np.isfinite(d[good]))
    else:  # mxfp4: only the 32-element block
        assert np.all(np.isnan(d[9, :32])) and np.all(np.isfinite(d[9, 32:]))
        assert np.all(np.isnan(d[11, 32:])) and np.all(np.isfinite(d[11, :32]))
        assert np.all(np.isfinite(d[good]))


def test_one_nan_row_of_many():
    x = jax.random.normal(jax.random.PRNGKey(7), (16, 128), jnp.float32)
    x = x.at[9, 70].set(jnp.nan)
    for fmt, scope in CASES:
        _check(x, fmt, scope)
    qk = _check(x.astype(jnp.bfloat16), "nvfp4", "row", block_m=16)
    d = np.asarray(Q.dequantize(qk))
    assert np.all(np.isnan(d[9])) and np.all(np.isfinite(np.delete(d, 9, axis=0)))
    assert np.isnan(np.asarray(qk.global_scale)[9, 0])


@pytest.mark.parametrize("fmt,scope", CASES)
def test_chunking_and_block_rows(fmt, scope):
    x = (jax.random.normal(jax.random.PRNGKey(5), (32, 512)) * 3).astype(jnp.bfloat16)
    _check(x, fmt, scope, block_m=16, chunk_k=64)


@pytest.mark.parametrize("fmt,scope", CASES)
def test_v5_block_parts_at_several_tiles(fmt, scope):
    """v5 (each block's eight-element parts loaded by one thread, codes / hint bits written per
    part) against the reference over several chunks and row blocks, and with NVFP4 row scope's
    two walks; zero and NaN rows included (the default tiles: test_nan_inf_rows_bit_identical)."""
    x = (jax.random.normal(jax.random.PRNGKey(9), (16, 512)) * 3).at[4].set(0.0)
    x = x.at[7, 300].set(jnp.nan).astype(jnp.bfloat16)
    _check(x, fmt, scope, variant="v5", block_m=4, chunk_k=128)
    if (fmt, scope) == ("nvfp4", "row"):
        _check(x, fmt, scope, variant="v5", block_m=4, chunk_k=128, single_walk=False)


@pytest.mark.parametrize("single_walk", [True, False])
def test_row_scope_walks_with_nan_and_zero_rows(single_walk):
    """NVFP4 row scope reads x once (v3: block maxima of every chunk first) or twice (v2); both
    are the reference, over several chunks, a NaN row, an Inf row and an all-zero row."""
    x = jax.random.normal(jax.random.PRNGKey(3), (16, 1024)) * 2
    x = x.at[2, 700].set(jnp.nan).at[5, 3].set(-jnp.inf).at[11].set(0.0)
    _check(x.astype(jnp.bfloat16), "nvfp4", "row", block_m=4, chunk_k=256,
           single_walk=single_walk)


@pytest.mark.parametrize("k", [4096, 2048, 768, 96, 3072, 32768])
def test_default_knobs_keep_a_row_block_in_registers(k):
    """At most 8K elements per program (the single walk holds them), power-of-two rows."""
    kn = default_knobs(k)
    assert kn["block_m"] * k <= max(8192, k)
    assert kn["block_m"] & (kn["block_m"] - 1) == 0 and kn["block_m"] >= 1


@pytest.mark.parametrize("bs", [16, 32])
@pytest.mark.parametrize("k", [4096, 2048, 1024])
def test_v5_default_knobs_give_each_thread_a_whole_part(k, bs):
    """A v5 part tile [block_m, chunk_k / bs, 8] holds >= 8 elements for each of 4 x 32 threads."""
    kn = default_knobs(k, bs, "v5")
    assert kn["block_m"] * min(kn["chunk_k"], k) // bs * 8 >= 8 * 32 * kn["num_warps"] or \
        kn["chunk_k"] >= k


def test_without_hint():
    x = jax.random.normal(jax.random.PRNGKey(0), (8, 64))
    q, h = quantize_with_hint(x, "nvfp4", with_hint=False, backend="triton")
    qr, _ = _reference(x, "nvfp4")
    assert h is None and q.codes.shape == (8, 32)
    np.testing.assert_array_equal(np.asarray(q.codes), np.asarray(qr.codes))


def test_round_magnitude_bit_trick_equals_compare_chain():
    """The kernel's integer RNE rounding (quantize_hint._round_magnitude) against the reference
    compare chain (trace_jax.e2m1.round_magnitude): every tie and its f32 neighbours, NaN, Inf,
    subnormals, and random f32 bit patterns."""
    from pallas_kernels.quantize_hint import _round_magnitude
    from trace_jax.e2m1 import round_magnitude
    t = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.5, 1, 2, 3, 4, 0, 7, 8, 1e30],
                 np.float32)
    rng = np.random.default_rng(0)
    x = np.concatenate([t, np.nextafter(t, np.float32(np.inf)), np.nextafter(t, np.float32(0)),
                        np.array([np.inf, np.nan, 1e-45, 1e-38, 3e38], np.float32),
                        np.abs(rng.standard_normal(50000)).astype(np.float32) * 3,
                        rng.integers(0, 0x7FFFFFFF, 50000, dtype=np.uint32).view(np.float32)])
    got = np.asarray(_round_magnitude(jnp.asarray(x)))
    want = np.asarray(round_magnitude(jnp.asarray(x)))
    np.testing.assert_array_equal(got, want)


def test_round_code_magic_add_equals_compare_chain():
    """v4's magic-constant rounding (quantize_hint._round_code) against the reference compare
    chain with the sign bit: every tie and its f32 neighbours, both signs, zeros, subnormals and
    random magnitudes over its domain |z| < 2**100; ``lim`` / ``sign_mask`` 0 give code 0."""
    from pallas_kernels.quantize_hint import _round_code
    from trace_jax.e2m1 import round_magnitude
    t = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.5, 1, 2, 3, 4, 0, 7, 8, 9.5,
                  1e20], np.float32)
    rng = np.random.default_rng(1)
    mag = np.concatenate([t, np.nextafter(t, np.float32(np.inf)), np.nextafter(t, np.float32(0)),
                          np.array([1e-45, 1e-38, 2.0 ** 99], np.float32),
                          np.abs(rng.standard_normal(50000)).astype(np.float32) * 3,
                          np.exp2(rng.uniform(-149, 100, 50000)).astype(np.float32)])
    z = np.concatenate([mag, -mag])
    zj = jnp.asarray(z)
    ones = jnp.ones(z.shape, jnp.uint32)
    got = np.asarray(_round_code(zj, 7 * ones, 8 * ones))
    want = np.asarray(round_magnitude(jnp.abs(zj))) | (np.signbit(z).astype(np.uint32) << 3)
    np.testing.assert_array_equal(got, want)
    assert not np.asarray(_round_code(zj, 0 * ones, 0 * ones)).any()
    nan = jnp.full((4,), jnp.nan, jnp.float32)
    assert not np.asarray(_round_code(nan, 0 * ones[:4], 0 * ones[:4])).any()


@pytest.mark.parametrize("fmt,shapes", [
    ("nvfp4", [(3, 1, 256), (3, 1, 2, 768), (2, 1, 2, 4, 128)]), ("mxfp4", [(2, 1, 2, 4, 128)])])
def test_rollout_sites_through_the_kernel_equal_xla(monkeypatch, fmt, shapes):
    """``numerics.ACTIVATION_QUANTIZER="kernel"`` (what the GPU rollout runs, here in interpret
    mode): the three activation sites' shapes, and ``SiteIO.activation`` with hint capture, give
    the XLA path's QTensor and Hint bit for bit (same pytree structure, shapes and dtypes), a
    NaN row included; a typo in the switch is an error."""
    from trace_jax import numerics as N

    scope = "row" if Q.get_format(fmt).has_global_scale else "tensor"
    nm = N.make_numerics("fp4_rollout", 1, fmt=fmt, hint_layers="all")

    def run(mode, x):  # (SiteIO.activation calls rollout_quantize)
        monkeypatch.setattr(N, "ACTIVATION_QUANTIZER", mode)

        def site(a):
            sio = N.SiteIO(nm, capture_hints=True)
            y, q = sio.activation("layers/0/moe/expert_in", a)
            return y, q, sio.hints_out["layers/0/moe/expert_in"]

        return jax.jit(site)(x)

    for i, shape in enumerate(shapes):
        x = jax.random.normal(jax.random.key(i), shape, jnp.bfloat16) * 3
        x = x.at[1, 0, ..., 7].set(jnp.nan)
        want, got = run("xla", x), run("kernel", x)
        assert jax.tree.structure(got) == jax.tree.structure(want)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_array_equal(_u8(a), _u8(b))
        jx = jax.make_jaxpr(lambda a: N.rollout_quantize(a, fmt, scope, True))(x).jaxpr
        prims = {e.primitive.name for e in eqns(jx, skip=("pallas_call",))}
        assert "pallas_call" in prims  # (the switch is still "kernel" here)
        assert not prims & {"shift_right_logical", "gather"}  # y from the kernel, not unpacked
    if fmt == "nvfp4":  # per-tensor global scale: shapes as the XLA path's
        q_t, _, _ = N.rollout_quantize(x, fmt, "tensor", False)
        assert q_t.global_scale.shape == (1,) * x.ndim
    monkeypatch.setattr(N, "ACTIVATION_QUANTIZER", "xla")
    assert "pallas_call" not in str(jax.make_jaxpr(
        lambda a: N.rollout_quantize(a, fmt, scope, True))(x))
    monkeypatch.setattr(N, "ACTIVATION_QUANTIZER", "kernal")
    with pytest.raises(ValueError, match="ACTIVATION_QUANTIZER"):
        N.rollout_quantize(x, fmt, scope, True)


def test_code_values_equal_the_table_signed_zero_included():
    """The kernel's table-free decode (quantize_hint._code_values) against e2m1.VALUES[code] * s
    bit for bit: all 16 codes (code 8 is -0, kept by OR-ing the sign bit, not negating) times
    block factors from tiny (normal: XLA on the CPU flushes subnormals) to huge, and a NaN factor with code 0 (a NaN block's codes)."""
    from pallas_kernels.quantize_hint import _code_values
    from trace_jax.e2m1 import VALUES
    codes = np.repeat(np.arange(16, dtype=np.uint32), 5)
    s = np.tile(np.array([1.0, 0.0, 2.0 ** -120, np.pi * 2.0 ** 100, 0.75], np.float32), 16)
    got = np.asarray(_code_values(jnp.asarray(codes), jnp.asarray(s)))
    np.testing.assert_array_equal(got.view(np.uint32), (VALUES[codes] * s).view(np.uint32))
    assert np.signbit(got[codes == 8]).all()
    nan = np.asarray(_code_values(jnp.zeros(2, jnp.uint32), jnp.full(2, jnp.nan, jnp.float32)))
    assert np.isnan(nan).all()
