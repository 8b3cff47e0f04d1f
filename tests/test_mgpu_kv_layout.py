"""The Mosaic GPU KV-cache layout (``pallas_kernels.mgpu_kv_layout``) and its attention kernel
(``pallas_kernels.attention_mgpu``, CPU side): exact round trip from natural NVFP4 caches, the
V^T register decode (emulated) equals the dequantized V, appending rows in place equals
converting the cache with the rows written; the kernel lowers, its partial contract and split
rule."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels import mgpu_kv_layout as MK
from trace_jax import quant as Q

quantize = jax.jit(functools.partial(Q.quantize, fmt="nvfp4", axis=-1, global_scope="row"))
B, H, S, D = 2, 2, 128, 128


def _cache(seed, zero_block=False):
    x = jax.random.normal(jax.random.PRNGKey(seed), (B, H, S, D)) * jnp.exp(
        jax.random.normal(jax.random.PRNGKey(seed + 1), (B, H, S, 1)))
    if zero_block:  # a zero block (scale 0) and a tiny one (subnormal E4M3 scales)
        x = x.at[0, 1, 5, 16:32].set(0.0).at[1, 0, 70, 32:48].multiply(1e-3)
    return quantize(x)


def _bits_equal(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))


def test_round_trip_is_exact_and_shapes_are_the_kernel_operands():
    k, v = _cache(0, zero_block=True), _cache(2, zero_block=True)
    c = jax.jit(MK.to_mgpu_kv)(k, v)
    assert c.k_codes.shape == (B, H, S, D // 8) and c.k_scales.shape == (B, H, D // 64, S)
    assert c.v_codes.shape == (B, H, D, S // 8) and c.v_scales.shape == (B, H, D // 16, S)
    assert c.k_gscale.shape == c.v_gscale.shape == (B, H, S) and c.shape == (B, H, S, D)
    k2, v2 = jax.jit(MK.from_mgpu_kv)(c)
    _bits_equal(k2, k)
    _bits_equal(v2, v)


def test_v_transposed_register_decode_equals_the_dequantized_cache():
    """Each thread's pair of V^T codes times the two multipliers it loads from its 8 scale
    bytes gives code * scale * 2**-8 at the right (d, cache row): the whole V^T exactly."""
    v = _cache(4, zero_block=True)
    c = jax.jit(MK.to_mgpu_kv)(v, v)
    want = Q.dequantize(Q.QTensor(codes=v.codes, scales=v.scales,
                                  global_scale=jnp.ones_like(v.global_scale), fmt="nvfp4",
                                  axis=-1), jnp.float32) * 2.0 ** -8  # [B, H, S, D]
    for b, h in ((0, 1), (1, 0)):
        got = MK.emulate_v_transposed(c.v_codes[b, h], c.v_scales[b, h])  # [D, S]
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want[b, h].T))
    rows = MK.v_scale_rows()
    assert sorted(rows) == list(range(64)) and list(rows[:4]) == [0, 1, 8, 9]


def test_append_row_equals_converting_the_written_cache():
    """Rows at a span's first / last row and in the middle, different per sequence."""
    k, v = _cache(6), _cache(8)
    for p in ((0, 127), (63, 64), (70, 5)):
        pos = jnp.asarray(p, jnp.int32)
        kn, vn = _cache(10 + p[0]), _cache(11 + p[0])  # rows pos of these are the new rows
        take = lambda q: jax.tree.map(  # noqa: E731
            lambda a: jnp.take_along_axis(a, pos[:, None, None, None], axis=2), q)
        k_row, v_row = take(kn), take(vn)
        put = lambda q, r: jax.tree.map(  # noqa: E731
            lambda a, x: jax.vmap(lambda a, x, i: jax.lax.dynamic_update_slice_in_dim(
                a, x, i, axis=1))(a, x, pos), q, r)
        want = MK.to_mgpu_kv(put(k, k_row), put(v, v_row))
        got = jax.jit(MK.append_row)(MK.to_mgpu_kv(k, v), k_row, v_row, pos)
        _bits_equal(got, want)


def test_empty_cache_and_multi_row_writes():
    """``empty_mgpu_kv`` is the conversion of two empty natural caches; ``write_rows`` of T rows
    at different starts per sequence (a prefill) equals converting the natural caches with the
    rows written: across a span boundary, at the cache's end (a clamped window), more than a
    span, the whole cache; rows that do not match the cache are refused by name."""
    from trace_jax.attention import empty_fp4
    e = empty_fp4((B, H, S, D), "nvfp4")
    _bits_equal(MK.empty_mgpu_kv(B, H, S, D), MK.to_mgpu_kv(e, e))
    k, v = _cache(30), _cache(31)
    kn, vn = _cache(32), _cache(33)
    rows_at = lambda q, start, t: jax.tree.map(lambda a: jnp.stack(  # noqa: E731
        [jax.lax.dynamic_slice_in_dim(a[b], start[b], t, axis=1) for b in range(B)]), q)
    put = lambda q, r, start: jax.tree.map(lambda a, x: jnp.stack(  # noqa: E731
        [jax.lax.dynamic_update_slice_in_dim(a[b], x[b], start[b], axis=1)
         for b in range(B)]), q, r)
    write = jax.jit(MK.write_rows)
    for t, first in ((3, (62, 3)), (3, (125, 0)), (70, (58, 0)), (128, (0, 0))):
        start = jnp.asarray(first, jnp.int32)
        k_rows, v_rows = rows_at(kn, start, t), rows_at(vn, start, t)
        got = write(MK.to_mgpu_kv(k, v), k_rows, v_rows, start)
        _bits_equal(got, MK.to_mgpu_kv(put(k, k_rows, start), put(v, v_rows, start)))
    with pytest.raises(ValueError, match="must be multiples of 64"):
        MK.empty_mgpu_kv(B, H, 100, D)
    zero = jnp.zeros((B,), jnp.int32)
    with pytest.raises(ValueError, match=r"V rows: natural NVFP4 \[2, 2, 3, 128\] expected"):
        MK.write_rows(MK.to_mgpu_kv(k, v), rows_at(kn, zero, 3), rows_at(vn, zero, 2), zero)


def test_bad_caches_are_refused_by_name():
    k = _cache(12)
    mx = Q.quantize(jnp.ones((B, H, S, D)), "mxfp4", axis=-1)
    with pytest.raises(ValueError, match="V: an NVFP4"):
        MK.to_mgpu_kv(k, mx)
    short = jax.tree.map(lambda a: a[:, :, :96] if a.shape[2] == S else a, k)
    with pytest.raises(ValueError, match="S=96 and head_dim D=128 must be multiples of 64"):
        MK.to_mgpu_kv(short, short)
    with pytest.raises(ValueError, match=r"K row: natural NVFP4 \[2, 2, 1, 128\]"):
        MK.append_row(MK.to_mgpu_kv(k, k), k, k, jnp.zeros((B,), jnp.int32))
    # a row past the cache: refused when concrete; traced, clamped to the last row for K and V
    # alike (V's word index ran past the cache and rewrote 8 other V rows)
    row = jax.tree.map(lambda a: a[:, :, :1] if a.shape[2] == S else a, k)
    c = MK.to_mgpu_kv(k, k)
    with pytest.raises(ValueError, match=rf"pos \[{S}, 0\] outside 0..{S - 1}"):
        MK.append_row(c, row, row, jnp.asarray([S, 0]))
    with pytest.raises(ValueError, match=rf"start \[{S - 2}, 0\] outside 0..{S - 3}"):
        MK.write_rows(c, *(jax.tree.map(lambda a: a[:, :, :3] if a.shape[2] == S else a, k),) * 2,
                      jnp.asarray([S - 2, 0]))
    past = jax.jit(MK.append_row)(c, row, row, jnp.asarray([S, 0]))
    _bits_equal(past, MK.append_row(c, row, row, jnp.asarray([S - 1, 0])))


def test_mosaic_attention_lowers_and_falls_back_to_the_reference():
    """``attention_mgpu`` lowers for sm_90 on this CPU machine (its default and its fastest
    bf16-P knob sets), the decode pieces included; on the CPU its wrapper gives the reference
    over the natural caches; a q that does not match the cache is refused."""
    from pallas_kernels import attention_mgpu as AM
    from pallas_kernels.decode_attention import decode_attention_reference
    b, h, s, d = 1, 1, 128, 128
    spec = lambda shape, dt: jax.ShapeDtypeStruct(shape, dt)  # noqa: E731
    args = (spec((b, h, 8, d), jnp.bfloat16), spec((b, h, s, d // 8), jnp.uint32),
            spec((b, h, d // 64, s), jnp.uint32), spec((b, h, s), jnp.float32),
            spec((b, h, d, s // 8), jnp.uint32), spec((b, h, d // 16, s // 4), jnp.uint32),
            spec((b, h, s), jnp.float32), spec((b,), jnp.int32))
    for p, kw in ((2, {}), (1, dict(sub=2, p_terms=1)),
                  (2, dict(lazy_sum=False, fast_full=False, approx=False,
                           no_auto_barriers=False))):
        txt = jax.jit(lambda *a: AM._attention_t(*a, p=p, steps=2, scale=0.1, **kw)).trace(
            *args).lower(lowering_platforms=("cuda",)).as_text()
        assert "mosaic_gpu" in txt and "wgmma.mma_async" in txt and "mul.rn.bf16x2" in txt
    with pytest.raises(ValueError, match="not a multiple of the step's 256"):
        jax.jit(lambda *a: AM._attention_t(*a, p=1, steps=2, scale=0.1, sub=4)).trace(*args)
    k, v = _cache(14), _cache(16)
    q = jax.random.normal(jax.random.PRNGKey(17), (B, 8, D), jnp.bfloat16)
    lengths = jnp.asarray([5, 128], jnp.int32)
    got = AM.decode_attention_mgpu(q, MK.to_mgpu_kv(k, v), lengths)
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(
        decode_attention_reference(q, k, v, lengths), np.float32))
    with pytest.raises(ValueError, match="does not match the cache"):
        AM.decode_attention_mgpu(q[:, :, :64], MK.to_mgpu_kv(k, v), lengths)


def test_mosaic_attention_partials_reference_combines_to_the_attention():
    """The kernel's partial contract (``attention_mgpu.partials_reference``: per-split O^T times
    2**-SHIFT, base-2 max and sum; an empty split has m = _NEG, l = 0) merged by
    ``attention_triton.combine`` gives the f32 reference attention (to ~1e-5), at 1, 5,
    70 and full lengths, with NaN in V's global scale past the lengths (stale rows)."""
    from pallas_kernels import attention_mgpu as AM
    from pallas_kernels import fp4_matmul_mgpu as FM
    from pallas_kernels.attention_triton import combine
    from trace_jax.ops import decode_attention_reference
    k, v = _cache(21), _cache(22)
    # stale rows of sequence 0 (lengths 1 and 5 below) hold NaN
    v = dataclasses.replace(v, global_scale=v.global_scale.at[0, :, 100:].set(jnp.nan))
    q = jax.random.normal(jax.random.PRNGKey(23), (B, 8, D), jnp.bfloat16)
    cache = MK.to_mgpu_kv(k, v)
    for lengths in ([1, 128], [5, 70]):
        lengths = jnp.asarray(lengths, jnp.int32)
        qg, kw = AM.kernel_args(q, cache, D ** -0.5, 2)
        o, m, l = AM.partials_reference(qg, cache, lengths, **kw)
        assert o.shape == (B, 2, 2, D, 8) and m.shape == l.shape == (B, 2, 2, 8)
        if int(lengths[0]) <= 64:  # sequence 0's second split is empty
            assert float(jnp.max(l[0, :, 1])) == 0.0 and float(jnp.max(m[0, :, 1])) < -1e29
        got = combine(jnp.swapaxes(o, -1, -2), m, l) * 2.0 ** FM.SHIFT
        want = decode_attention_reference(q.astype(jnp.float32), k, v, lengths)
        assert bool(jnp.all(jnp.isfinite(got)))
        np.testing.assert_allclose(np.asarray(got[:, :, :4].reshape(B, 8, D)), np.asarray(want),
                                   rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="3 splits do not divide"):
        AM.kernel_args(q, cache, 0.1, 3)


def test_mosaic_attention_split_rule():
    """``attention_mgpu.default_splits`` picks, at the shapes session 18f swept on the H200
    (B, 4 kv heads, context), a split count within 1.1% of the fastest one measured there
    (32 x 8K: 4, 32 x 32K: 16 of 16 / 32, 111 x 32K: 8, 8 x 128K: 64); and in general a divisor
    of the 64-row blocks, 1 for contexts under 32 blocks."""
    from pallas_kernels import attention_mgpu as AM
    fastest = {(32, 8192): {4}, (32, 32768): {16, 32}, (111, 32768): {8}, (8, 131072): {64}}
    for (b, s), ok in fastest.items():
        assert AM.default_splits(b, 4, s) in ok, (b, s)
    for b, s in ((1, 64), (3, 1024), (5, 4160), (27, 131072), (128, 4096), (3000, 131072)):
        p = AM.default_splits(b, 4, s)
        assert (s // 64) % p == 0 and (p == 1 or s // 64 // p >= AM.SPLIT_MIN_STEPS)
        assert p == 1 or b * 4 * p <= AM.SPLIT_PROGRAMS, (b, s, p)
    assert AM.default_splits(1, 1, 64 * 31) == 1
    assert AM.default_splits(1, 1, 64 * 66, sub=2) == 1  # 33 steps of 128 rows: 1 split
