"""quantize_with_hint: Pallas Triton kernel (interpret mode) bit-identical to trace_jax.quant
(quantize + extract_hint) on random and edge inputs; bf16 inputs against an IEEE-division model
(XLA's CPU fusion of the reference computes x * (1/s), see NOTES_attention.md)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels.quantize_hint import quantize_with_hint
from trace_jax import e2m1
from trace_jax import quant as Q


def _u8(a):
    return np.asarray(jax.lax.bitcast_convert_type(a, jnp.uint8))


def _assert_same(qk, hk, qr, hr):
    np.testing.assert_array_equal(np.asarray(qk.codes), np.asarray(qr.codes))
    np.testing.assert_array_equal(_u8(qk.scales), _u8(qr.scales))
    np.testing.assert_array_equal(np.asarray(qk.global_scale), np.asarray(qr.global_scale))
    assert qk.global_scale.shape == qr.global_scale.shape
    np.testing.assert_array_equal(np.asarray(hk.bits), np.asarray(hr.bits))
    assert (qk.fmt, qk.axis, hk.kind) == (qr.fmt, qr.axis, hr.kind)


@pytest.mark.parametrize("fmt,scope", [("nvfp4", "row"), ("nvfp4", "tensor"), ("mxfp4", "row")])
@pytest.mark.parametrize("m,k", [(16, 256), (24, 768), (5, 96)])
def test_bit_identical_random_f32(fmt, scope, m, k):
    if k % Q.get_format(fmt).block_size:
        pytest.skip("K not a multiple of the block")
    key = jax.random.PRNGKey(m * k)
    x = jax.random.normal(key, (m, k), jnp.float32)
    x = x * jnp.exp(3 * jax.random.normal(jax.random.PRNGKey(1), (m, 1)))
    x = x.at[0].set(0.0)  # an all-zero row
    qr, hr = quantize_with_hint(x, fmt, global_scope=scope, backend="reference")
    qk, hk = quantize_with_hint(x, fmt, global_scope=scope, backend="triton")
    _assert_same(qk, hk, qr, hr)


def test_edge_values_ties_saturation():
    # ties at every E2M1 boundary (scale 1 when amax is 6 -> nvfp4 g*s = 1/..; use mxfp4: 2**0)
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0], np.float32)
    row = np.concatenate([ties, -ties, ties * 0.5, 7.9 * np.ones(8, np.float32)])
    x = np.stack([row, np.zeros_like(row), row * 1e-30, row * 3e30], 0)
    for fmt in ("mxfp4", "nvfp4"):
        qr, hr = quantize_with_hint(jnp.asarray(x), fmt, backend="reference")
        qk, hk = quantize_with_hint(jnp.asarray(x), fmt, backend="triton")
        _assert_same(qk, hk, qr, hr)


def test_bf16_matches_ieee_division_model():
    m, k = 32, 512
    x = (jax.random.normal(jax.random.PRNGKey(3), (m, k)) * 4).astype(jnp.bfloat16)
    qk, hk = quantize_with_hint(x, "nvfp4", backend="triton")
    qr, _ = quantize_with_hint(x, "nvfp4", backend="reference")
    np.testing.assert_array_equal(_u8(qk.scales), _u8(qr.scales))
    np.testing.assert_array_equal(np.asarray(qk.global_scale), np.asarray(qr.global_scale))
    eff = np.asarray(qr.scales.astype(jnp.float32)) * np.asarray(qr.global_scale)
    z = np.asarray(x, np.float32).reshape(m, k // 16, 16) / eff[..., None]  # IEEE f32 divide
    want = np.asarray(e2m1.encode(jnp.asarray(z))).reshape(m, k)
    np.testing.assert_array_equal(np.asarray(Q.unpacked_codes(qk)), want)
    np.testing.assert_array_equal(np.asarray(hk.bits), np.asarray(e2m1.pack_bits(want & 1)))


def test_nan_inf_poison_their_block():
    x = np.ones((4, 64), np.float32)
    x[1, 3] = np.nan
    x[2, 40] = np.inf
    qk, _ = quantize_with_hint(jnp.asarray(x), "mxfp4", backend="triton")
    d = np.asarray(Q.dequantize(qk))
    assert np.all(np.isnan(d[1, :32])) and np.all(d[1, 32:] == 1)
    assert np.all(np.isnan(d[2, 32:])) and np.all(d[2, :32] == 1)
    assert np.all(d[0] == 1) and np.all(d[3] == 1)
    qn, _ = quantize_with_hint(jnp.asarray(x), "nvfp4", backend="triton")
    assert np.all(np.isnan(np.asarray(Q.dequantize(qn))[1]))  # per-row global scale poisoned


def test_without_hint():
    x = jax.random.normal(jax.random.PRNGKey(0), (8, 64))
    q, h = quantize_with_hint(x, "nvfp4", with_hint=False, backend="triton")
    assert h is None and q.codes.shape == (8, 32)
