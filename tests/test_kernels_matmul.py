"""FP4 matmul kernels (Pallas Triton, interpret mode on CPU) against the pure-JAX reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels import fp4_matmul as fm
from pallas_kernels import matmul_triton as mt
from trace_jax import quant

CFG = mt.Config(bm=16, bn=64, bk=64, split_k=1)


def _rel(out, ref):
    out, ref = np.asarray(out, np.float32), np.asarray(ref, np.float32)
    assert np.all(np.isfinite(out))
    return np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)


def _w(key, shape, fmt, scale=1.0):
    return fm.prepare_weights(quant.quantize(jax.random.normal(key, shape) * scale, fmt, axis=-2))


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("m,cfg", [(1, CFG), (5, mt.Config(bm=16, bn=64, bk=128, split_k=2)),
                                   (37, mt.Config(bm=32, bn=128, bk=64))])
def test_dense_bf16(fmt, m, cfg):
    k0, k1 = jax.random.split(jax.random.key(m))
    w = _w(k0, (256, 128), fmt, 3.0)
    x = jax.random.normal(k1, (m, 256)).astype(jnp.bfloat16)
    ref = fm.fp4_matmul_reference(x, w)
    out = mt.dense(x, w, cfg)
    assert out.shape == (m, 128) and out.dtype == jnp.bfloat16
    assert _rel(out, ref) < 4e-3  # bf16 output rounding only (f32 summation order)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_dense_w4a4(fmt):
    k0, k1 = jax.random.split(jax.random.key(1))
    w = _w(k0, (128, 64), fmt)
    x = jax.random.normal(k1, (7, 128)) * jnp.arange(1, 8.0)[:, None]
    xq = quant.quantize(x, fmt, global_scope="row") if fmt == "nvfp4" else quant.quantize(x, fmt)
    ref = fm.fp4_matmul_reference(xq, w)
    out = fm.fp4_matmul(xq, w, backend="triton", cfg=CFG)
    assert _rel(out, ref) < 4e-3
    # the activation quantization must matter (guards against silently using x in bf16)
    assert _rel(fm.fp4_matmul_reference(x.astype(jnp.bfloat16), w), ref) > 1e-2


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_grouped_ragged(fmt):
    e, k, n, m = 4, 128, 64, 45
    k0, k1 = jax.random.split(jax.random.key(2))
    w = _w(k0, (e, k, n), fmt)
    w = fm.FP4Weights(w.codes, w.scales, w.global_scale * jnp.array([1.0, 2.0, 0.5, 3.0])[:, None, None],
                      w.fmt)
    x = jax.random.normal(k1, (m, k)).astype(jnp.bfloat16)
    gs = jnp.array([17, 0, 3, 20], jnp.int32)  # empty group, sum 40 < 45
    ref = fm.fp4_grouped_matmul_reference(x, w, gs)
    out = fm.fp4_grouped_matmul(x, w, gs, backend="triton", cfg=CFG)
    assert _rel(out, ref) < 4e-3
    assert np.all(np.asarray(out[40:]) == 0)


def test_grouped_w4a4_and_swiglu():
    e, k, n, m = 3, 64, 64, 20
    ks = jax.random.split(jax.random.key(3), 3)
    wg, wu = _w(ks[0], (e, k, n), "nvfp4"), _w(ks[1], (e, k, n), "nvfp4")
    xq = quant.quantize(jax.random.normal(ks[2], (m, k)), "nvfp4", global_scope="row")
    gs = jnp.array([0, 12, 8], jnp.int32)
    ref = fm.fp4_grouped_swiglu(xq, wg, wu, gs, backend="reference")
    out = fm.fp4_grouped_swiglu(xq, wg, wu, gs, backend="triton", cfg=CFG)
    assert _rel(out, ref) < 1e-2


def test_edge_values():
    """Zeros, saturated +-6 codes, large and small block scales, an all-zero mxfp4 block."""
    k, n = 128, 64
    rng = np.random.default_rng(0)
    w = rng.choice([-6.0, 6.0, 0.0, 0.5, -4.0], size=(k, n)).astype(np.float32)
    w[:16] *= 400.0  # large nvfp4 block scales (e4m3 near 448)
    w[16:48] *= 1e-4  # small scales
    w[48:80] = 0.0  # zero blocks (mxfp4 byte 0)
    x = jnp.asarray(rng.normal(size=(3, k)), jnp.bfloat16)
    for fmt in ["nvfp4", "mxfp4"]:
        fw = fm.prepare_weights(quant.quantize(jnp.asarray(w), fmt, axis=-2))
        ref = fm.fp4_matmul_reference(x, fw)
        out = mt.dense(x, fw, CFG)
        assert _rel(out, ref) < 4e-3, fmt


def test_decode_exact():
    """Every code x scale byte decodes to exactly code * scale (bf16), both formats."""
    codes = jnp.arange(256, dtype=jnp.uint8).reshape(16, 16)  # all byte pairs
    for fmt, sbytes in [("nvfp4", jnp.arange(0, 127, 8, dtype=jnp.uint8)),
                        ("mxfp4", jnp.arange(100, 148, 3, dtype=jnp.uint8))]:
        f = quant.get_format(fmt)
        block = f.block_size
        s_u8 = jnp.broadcast_to(sbytes[None, :], (32 // block, 16))
        c = jnp.tile(codes, (1, 1))
        lo, hi = mt.decode_tile(c, mt.decode_scales(s_u8, fmt), block)
        s_ref = quant.scales_to_f32(jax.lax.bitcast_convert_type(s_u8, f.scale_dtype), fmt)
        s_rows = jnp.repeat(s_ref, block // 2, axis=0)
        from trace_jax import e2m1
        np.testing.assert_array_equal(np.asarray(lo, np.float32),
                                      np.asarray(e2m1.decode(c & 15) * s_rows))
        np.testing.assert_array_equal(np.asarray(hi, np.float32),
                                      np.asarray(e2m1.decode(c >> 4) * s_rows))


def test_prepare_weights_roundtrip_and_pytree():
    q = quant.quantize(jax.random.normal(jax.random.key(4), (2, 64, 32)), "nvfp4", axis=-2)
    w = fm.prepare_weights(q)
    back = fm.weights_to_qtensor(w)
    np.testing.assert_array_equal(quant.dequantize(back), quant.dequantize(q))
    leaves, tree = jax.tree.flatten(w)
    assert len(leaves) == 3
    stacked = jax.tree.map(lambda a: jnp.stack([a, a]), w)  # layer axis for lax.scan
    one = jax.lax.scan(lambda c, wl: (c, wl.codes.sum()), 0, stacked)[1]
    assert one.shape == (2,)
    with pytest.raises(ValueError):
        fm.prepare_weights(quant.quantize(jnp.ones((64, 32)), "nvfp4", axis=-1))


def test_auto_is_reference_on_cpu():
    w = _w(jax.random.key(5), (64, 32), "nvfp4")
    x = jnp.ones((2, 64), jnp.bfloat16)
    np.testing.assert_array_equal(fm.fp4_matmul(x, w), fm.fp4_matmul_reference(x, w))
