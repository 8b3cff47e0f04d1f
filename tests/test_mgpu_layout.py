"""The Mosaic GPU FP4 weight layout (``pallas_kernels.mgpu_layout``): the words are a bijection of
the natural codes, and the kernel's register-by-register decode (emulated in uint32 arithmetic)
puts every code at the K column its WGMMA register half stands for; scales land per span."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels import matmul_layout as ML
from pallas_kernels import mgpu_layout as MG


def _nibbles(n, k, seed=0):
    return jax.random.randint(jax.random.PRNGKey(seed), (n, k), 0, 16).astype(jnp.uint8)


def test_gather_table_is_a_permutation_with_one_thread_quad_per_word():
    g = MG.gather_table()
    assert sorted(g.ravel().tolist()) == list(range(64))
    for w in range(8):  # word 2 q + e holds only columns of lane q (col % 8 in {2q, 2q+1})
        assert set((g[w] % 8) // 2) == {w // 2}
        assert set(g[w] // 32) == {w % 2}


@pytest.mark.parametrize("n,k", [(64, 64), (128, 256), (8, 192)])
def test_pack_unpack_roundtrip(n, k):
    nib = _nibbles(n, k, seed=n + k)
    words = MG.pack_codes(nib)
    assert words.shape == (n, k // 8) and words.dtype == jnp.uint32
    np.testing.assert_array_equal(np.asarray(MG.unpack_codes(words)), np.asarray(nib))


def test_emulated_registers_hold_the_codes_of_their_columns():
    nib = _nibbles(64, 256, seed=3)
    pat = MG.emulate_registers(MG.pack_codes(nib)).astype(jnp.uint32)
    np.testing.assert_array_equal(np.asarray(ML.pattern_to_code(pat)), np.asarray(nib))
    stray = pat & ~jnp.uint32(0x81C0)  # nothing outside the pattern bits
    assert int(jnp.max(stray)) == 0


def test_pack_scales_puts_a_spans_four_block_codes_in_one_word():
    s = jax.random.randint(jax.random.PRNGKey(5), (64, 16), 0, 0x7F).astype(jnp.uint8)
    w = np.asarray(MG.pack_scales(s))  # [K/64 = 4, N = 64]
    assert w.shape == (4, 64)
    codes = np.asarray(MG.scale_codes(s))
    for span in range(4):
        for b in range(4):
            np.testing.assert_array_equal((w[span] >> (8 * b)) & 0xFF, codes[:, 4 * span + b])
    np.testing.assert_array_equal(np.asarray(MG.unpack_scales(MG.pack_scales(s))), np.asarray(s))


def test_scale_code_multiplier_is_the_scale_times_2_pow_118_in_bf16():
    """The kernel's S = (code << 4) + 0x7600 (bf16 bits) for every E4M3 byte: exactly
    scale * 2**118 for the positive finite ones (subnormal scales included), NaN for NaN and for
    negative scales (never silently wrong), finite for zero (the block's codes are all 0)."""
    b = jnp.arange(256, dtype=jnp.uint8)
    want = jax.lax.bitcast_convert_type(b, jnp.float8_e4m3fn).astype(jnp.float32) * 2.0 ** 118
    got = jax.lax.bitcast_convert_type(MG.multiplier_bits(MG.scale_codes(b)), jnp.bfloat16)
    got = np.asarray(got.astype(jnp.float32))
    want = np.asarray(want)
    pos = (want > 0) & np.isfinite(want)
    assert pos.sum() == 126  # 0x01 .. 0x7E
    np.testing.assert_array_equal(got[pos], want[pos])
    assert np.isnan(got[np.isnan(want) | (want < 0)]).all()
    assert np.isfinite(got[want == 0]).all()


def test_bad_k_is_refused():
    with pytest.raises(ValueError, match="multiple of 64"):
        MG.pack_codes(_nibbles(8, 96))


def _weights(k, n, seed=7):
    from trace_jax.quant import quantize
    w = jax.random.normal(jax.random.PRNGKey(seed), (k, n), jnp.float32)
    return quantize(w, "nvfp4", axis=-2, global_scope="tensor")


def test_prepare_mgpu_roundtrip_and_cpu_fallback():
    from pallas_kernels import fp4_matmul_mgpu as FM
    q = _weights(256, 128)
    w = FM.prepare_mgpu(q)
    back = FM.mgpu_to_qtensor(w)
    np.testing.assert_array_equal(np.asarray(back.codes), np.asarray(q.codes))
    np.testing.assert_array_equal(np.asarray(back.scales.view(jnp.uint8)),
                                  np.asarray(q.scales.view(jnp.uint8)))
    x = jax.random.normal(jax.random.PRNGKey(1), (3, 256), jnp.bfloat16)
    ref = jnp.dot(x.astype(jnp.float32), quant_dequant(q)).astype(jnp.bfloat16)
    np.testing.assert_array_equal(np.asarray(FM.fp4_matmul_mgpu(x, w)), np.asarray(ref))
    with pytest.raises(ValueError, match=r"x must be \[M, 256\]"):
        FM.fp4_matmul_mgpu(x[:, :128], w)


def quant_dequant(q):
    from trace_jax.quant import dequantize
    return dequantize(q, jnp.float32)


def test_emulated_kernel_values_times_two_pow_shift_are_the_weights():
    """What the kernel feeds the MMA: pattern (E2M1 * 2**-126) * S (scale * 2**118) per register
    = code * scale * 2**-SHIFT; times 2**SHIFT * global scale it is the dequantized weight."""
    from pallas_kernels import fp4_matmul_mgpu as FM
    q = _weights(128, 64, seed=9)
    w = FM.prepare_mgpu(q)
    pat = MG.emulate_registers(w.codes).astype(jnp.uint32)  # [N, K]
    code_val = ML.code_value(ML.pattern_to_code(pat))
    codes = jax.lax.bitcast_convert_type(w.scales.T, jnp.uint8).reshape(64, 8)  # [N, K / 16]
    s_mul = jax.lax.bitcast_convert_type(MG.multiplier_bits(codes), jnp.bfloat16)  # scale * 2**118
    s_mul = s_mul.astype(jnp.float32)
    vals = code_val * jnp.repeat(s_mul * 2.0 ** -126, 16, axis=1)  # pattern value * S, [N, K]
    import dataclasses
    unit = dataclasses.replace(q, global_scale=jnp.ones_like(q.global_scale))  # code * scale
    np.testing.assert_array_equal(np.asarray(vals.T * 2.0 ** FM.SHIFT),
                                  np.asarray(quant_dequant(unit)))


@pytest.mark.parametrize("sizes,m,mp", [((5, 0, 7, 1), 13, 8), ((20, 3, 0, 0), 26, 8),
                                        ((0, 0, 2, 9), 11, 16), ((0, 0, 2, 9), 40, 16)])
def test_grouped_padding_bookkeeping_matches_ragged_dot(sizes, m, mp):
    """The grouped wrapper's bookkeeping, with the kernel replaced by plain JAX that visits the
    same (expert, chunk, column) windows, equals the ragged_dot reference:
    empty experts, a group longer than one chunk, rows past the groups' sum (they give 0). The
    emulation leaves unwritten rows NaN, so it also checks that every row is stored."""
    from pallas_kernels import fp4_matmul_mgpu as FM
    from trace_jax.quant import quantize
    e, k, n = len(sizes), 128, 64
    w = jax.jit(lambda a: FM.prepare_mgpu(quantize(a, "nvfp4", axis=-2, global_scope="tensor")))(
        jax.random.normal(jax.random.PRNGKey(2), (e, k, n)) *
        jnp.arange(1, e + 1, dtype=jnp.float32)[:, None, None])  # distinct scales
    assert w.shape == (e, k, n)
    x = jax.random.normal(jax.random.PRNGKey(3), (m, k), jnp.bfloat16)
    gs = jnp.asarray(sizes, jnp.int32)
    ref = jax.jit(FM.fp4_grouped_matmul_mgpu_reference)(x, w, gs)
    run = jax.jit(lambda x, w, gs, lay: FM.fp4_grouped_matmul_mgpu(
        x, w, gs, mp=mp, backend="emulate", x_layout=lay), static_argnums=3)
    got = run(x, w, gs, "rows")
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(ref, np.float32),
                               rtol=1e-2, atol=1e-2)  # bf16 outputs; summation order differs
    if sum(sizes) < m:
        assert float(jnp.max(jnp.abs(got[sum(sizes):].astype(jnp.float32)))) == 0.0
    # the aligned x layout: the same products row for row (same f32 operations per column)
    np.testing.assert_array_equal(np.asarray(run(x, w, gs, "aligned"), np.float32),
                                  np.asarray(got, np.float32))
    with pytest.raises(ValueError, match=r"group_sizes must be \[4\]"):
        FM.fp4_grouped_matmul_mgpu(x, w, gs[:3], backend="emulate")
    with pytest.raises(ValueError, match="unknown grouped x layout 'padded'"):
        FM.fp4_grouped_matmul_mgpu(x, w, gs, backend="emulate", x_layout="padded")


@pytest.mark.parametrize("sizes,m,mp", [((5, 0, 7, 1), 13, 8), ((20, 3, 0, 0), 26, 8),
                                        ((0, 0, 2, 9), 40, 16), ((0, 0, 0, 0), 9, 8),
                                        ((10, 5, 3), 12, 8), ((9, 17, 1), 27, 16)])
@pytest.mark.parametrize("impl", ["xla", "kernel"])
def test_aligned_x_layout_reads_each_expert_at_an_8_aligned_offset(sizes, m, mp, impl):
    """``aligned_rows`` (XLA) or ``aligned_rows_kernel`` (Pallas Triton, interpret mode) +
    ``chunk_columns(aoff=...)``: every chunk reads mp rows from an 8-aligned row inside the
    aligned x, and the row under stored column i is a copy of the sorted row the column is
    stored at (t0 + i); each sorted row in [0, M) is stored exactly once, by its expert (rows
    past the groups' sum by the last one, as zeros)."""
    from pallas_kernels import fp4_matmul_mgpu as FM
    gs = np.asarray(sizes)
    ends = np.cumsum(gs)
    if impl == "xla":
        aends, src = (np.asarray(a) for a in FM.aligned_rows(jnp.asarray(gs, jnp.int32), m, mp))
    else:
        k_ends, aends, src = (np.asarray(a) for a in FM.aligned_rows_kernel(
            jnp.asarray(gs, jnp.int32), m, mp, interpret=True))
        np.testing.assert_array_equal(k_ends, ends)
    assert len(src) % 8 == 0 and len(src) >= mp
    offs, start8, rows, nchunks = (np.asarray(a) for a in FM.program_plan(
        jnp.asarray(gs), jnp.asarray(ends), jnp.arange(len(gs)) == len(gs) - 1, m, mp))
    aoff = aends - ((rows + 7) & -8)
    owner = np.repeat(np.arange(len(gs)), gs)[:m]
    count, by, zero = np.zeros(m, int), np.full(m, -1), np.zeros(m, bool)
    for e in range(len(gs)):
        for c in range(int(nchunks[e])):
            x0, t0, lo, hi, z = (int(v) for v in FM.chunk_columns(
                offs[e], start8[e], rows[e], ends[-1], c, mp, aoff[e]))
            assert x0 % 8 == 0 and x0 + mp <= len(src) and lo == 0 < hi <= mp
            for i in range(lo, hi):
                assert src[x0 + i] == t0 + i
                count[t0 + i] += 1
                by[t0 + i], zero[t0 + i] = e, i >= z
    np.testing.assert_array_equal(count, 1)
    np.testing.assert_array_equal(by[:len(owner)], owner)
    np.testing.assert_array_equal(zero, np.arange(m) >= gs.sum())


def test_aligned_rows_kernel_equals_xla_at_decode_sizes():
    """The one-launch bookkeeping kernel (interpret mode) gives the XLA ops' ends, aends and src
    at the 30B decode shapes (128 experts, several 256-row programs): ragged groups with many
    empty ones, equal groups, and sizes summing past M."""
    from pallas_kernels import fp4_matmul_mgpu as FM
    rng = np.random.default_rng(5)
    for m, mp in ((888, 16), (216, 8)):
        for case in range(3):
            gs = rng.integers(0, 16, 128) * (rng.random(128) > 0.3)
            gs = np.full(128, m // 128) if case == 1 else gs
            gs[0] += m if case == 2 else 0
            g = jnp.asarray(gs, jnp.int32)
            want = (FM._cumsum_small(g), *FM.aligned_rows(g, m, mp))
            got = FM.aligned_rows_kernel(g, m, mp, interpret=True)
            for a, b in zip(got, want):
                assert a.shape == b.shape and a.dtype == b.dtype
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_aligned_rows_kernel_compiles_for_sm90_without_spills(tmp_path):
    """Lowered for an H200 and compiled with the installed Triton (no GPU): the bookkeeping
    kernel's [256, 128] tiles stay in registers (no local memory)."""
    from pallas_kernels import fp4_matmul_mgpu as FM
    from pallas_kernels import matmul_compilecheck as mc
    with mc.patched():
        (ttir,) = mc.lower(lambda g: FM.aligned_rows_kernel(g, 888, 16),
                           jax.ShapeDtypeStruct((128,), jnp.int32))
    st = mc.compile_ttir(ttir, 4, 1, str(tmp_path), "aligned_rows")
    assert st["local"] == 0 and 0 < st["regs"] <= 255


@pytest.mark.parametrize("sizes,m,mp", [((5, 0, 7, 1), 13, 8), ((20, 3, 0, 0), 26, 8),
                                        ((0, 0, 2, 9), 40, 16), ((0, 0, 0, 0), 9, 8),
                                        ((10, 5, 3), 12, 8)])  # (sizes past M: clipped)
def test_direct_store_windows_cover_every_row_once(sizes, m, mp):
    """The direct store's plan (``program_plan`` + ``chunk_columns``, which the kernel's scalar
    code runs): over every expert's chunks, each sorted row in [0, M) is stored exactly once,
    by its own expert (rows past the groups' sum by the last one, as zeros; none past M), and
    every chunk reads its rows inside the x the wrapper pads by ``read_pad``."""
    from pallas_kernels import fp4_matmul_mgpu as FM
    gs = np.asarray(sizes)
    ends = np.cumsum(gs)
    offs, start8, rows, nchunks = (np.asarray(a) for a in FM.program_plan(
        jnp.asarray(gs), jnp.asarray(ends), jnp.arange(len(gs)) == len(gs) - 1, m, mp))
    owner = np.repeat(np.arange(len(gs)), gs)[:m]
    count, by, zero = np.zeros(m, int), np.full(m, -1), np.zeros(m, bool)
    for e in range(len(gs)):
        for c in range(int(nchunks[e])):
            x0, t0, lo, hi, z = (int(v) for v in FM.chunk_columns(offs[e], start8[e], rows[e],
                                                                   ends[-1], c, mp))
            assert x0 == t0 and x0 % 8 == 0 and 0 <= lo < hi <= mp + 8
            assert x0 + mp + 8 <= m + FM.read_pad(m, mp) and FM.read_pad(m, mp) % 8 == (-m) % 8
            for i in range(lo, hi):
                count[x0 + i] += 1  # (an index past M raises here)
                by[x0 + i], zero[x0 + i] = e, i >= z
    np.testing.assert_array_equal(count, 1)
    np.testing.assert_array_equal(by[:len(owner)], owner)
    np.testing.assert_array_equal(zero, np.arange(m) >= gs.sum())


def test_prepare_expert_weights_picks_the_layout_and_both_give_the_same_product():
    """``prepare_expert_weights``: "auto" takes the Mosaic GPU layout only where it fits (nvfp4,
    K and N multiples of 64), "mosaic" refuses the rest by name; ``fp4_grouped_matmul`` takes
    either layout (same codes: the same reference product, bit for bit)."""
    import functools

    from pallas_kernels import fp4_matmul as fm
    from trace_jax.quant import quantize
    e, k, n = 3, 128, 64
    wf = jax.random.normal(jax.random.PRNGKey(4), (e, k, n))
    # the layout choice and its errors from shapes alone (eval_shape: nothing computed)
    qs = lambda w, fmt="nvfp4": jax.eval_shape(  # noqa: E731
        functools.partial(quantize, fmt=fmt, axis=-2), w)
    kind = lambda q, kernel="auto": type(jax.eval_shape(  # noqa: E731
        functools.partial(fm.prepare_expert_weights, kernel=kernel), q)).__name__
    assert kind(qs(wf)) == "MgpuWeights" and kind(qs(wf), "triton") == "FP4Weights"
    assert kind(qs(wf[..., :32])) == "FP4Weights"  # N = 32
    assert kind(qs(wf, "mxfp4")) == "FP4Weights"
    with pytest.raises(ValueError, match="Mosaic GPU FP4 kernel takes nvfp4"):
        kind(qs(wf, "mxfp4"), "mosaic")
    with pytest.raises(ValueError, match="unknown expert kernel 'mgpu'"):
        kind(qs(wf), "mgpu")
    with pytest.raises(ValueError, match=r"wants a \[K,N\] weight"):
        jax.eval_shape(lambda x, w: fm.fp4_matmul(x, fm.prepare_expert_weights(w, "mosaic")),
                       jax.ShapeDtypeStruct((10, k), jnp.bfloat16), qs(wf))  # [E, K, N]

    @functools.partial(jax.jit, static_argnames="kernel")
    def product(x, w, gs, kernel):
        q = quantize(w, "nvfp4", axis=-2, global_scope="tensor")
        return fm.fp4_grouped_matmul(x, fm.prepare_expert_weights(q, kernel), gs)

    x = jax.random.normal(jax.random.PRNGKey(5), (10, k), jnp.bfloat16)
    gs = jnp.array([4, 0, 5], jnp.int32)
    a, b = (np.asarray(product(x, wf, gs, kernel), np.float32) for kernel in ("mosaic", "triton"))
    np.testing.assert_array_equal(a, b)
    assert np.abs(a[:9]).min() > 0 and np.all(a[9:] == 0)  # rows past the groups' sum: zeros


def test_grouped_w4a4_row_scale_equals_the_reference():
    """An activation QTensor through the Mosaic GPU path (as ``fp4_grouped_matmul`` feeds it:
    exact ``code * block scale`` bf16 values, the per-row global scale on the f32 result), with
    the kernel emulated, equals the reference on the QTensor; without the row scale it is off."""
    from pallas_kernels import fp4_matmul as fm
    from pallas_kernels import fp4_matmul_mgpu as FM
    from pallas_kernels import matmul_triton as mt
    from trace_jax.quant import quantize
    e, k, n, m = 2, 128, 64, 12

    @jax.jit
    def run(w, x, gs):
        w = FM.prepare_mgpu(quantize(w, "nvfp4", axis=-2, global_scope="tensor"))
        xq = quantize(x, "nvfp4", global_scope="row")
        xb, g = mt.x_bf16(xq)
        return (fm.fp4_grouped_matmul_reference(xq, w, gs),
                FM.fp4_grouped_matmul_mgpu(xb, w, gs, row_scale=g, backend="emulate",
                                           x_layout="rows"),
                FM.fp4_grouped_matmul_mgpu(xb, w, gs, backend="emulate", x_layout="rows"),
                FM.fp4_grouped_matmul_mgpu(xb, w, gs, row_scale=g, backend="emulate",
                                           mp=8, x_layout="aligned"))

    w = jax.random.normal(jax.random.PRNGKey(6), (e, k, n))
    x = jax.random.normal(jax.random.PRNGKey(7), (m, k)) * jnp.arange(1, m + 1.0)[:, None] * 9
    gs = jnp.array([7, 5], jnp.int32)
    ref, got, plain, aligned = (np.asarray(a, np.float32) for a in run(w, x, gs))
    np.testing.assert_allclose(got, ref, rtol=1e-2, atol=1e-2 * m * 9)
    np.testing.assert_array_equal(aligned, got)  # the aligned x layout, at mp 8
    assert np.max(np.abs(plain - ref)) > 10 * np.max(np.abs(got - ref))
    wq = jax.eval_shape(lambda w: FM.prepare_mgpu(quantize(w, "nvfp4", axis=-2)), w)
    with pytest.raises(ValueError, match=r"row_scale must be \[12, 1\]"):
        jax.eval_shape(lambda xb, wq: FM.fp4_grouped_matmul_mgpu(
            xb, wq, gs, row_scale=jnp.ones((3, 1)), backend="emulate"),
            jax.ShapeDtypeStruct((m, k), jnp.bfloat16), wq)


@pytest.mark.parametrize("sizes,m,mp,lay", [((5, 0, 7, 1), 13, 8, "aligned"),
                                            ((0, 20, 3, 9), 40, 16, "rows"),
                                            ((35, 0, 70, 9, 41), 160, 56, "rows")])
def test_fused_swiglu_bookkeeping_matches_the_unfused_composition(sizes, m, mp, lay):
    """The fused gate / up / SwiGLU kernel's wrapper, the kernel emulated (its windows, each
    product scaled and rounded to bf16, then the epilogue's SwiGLU), equals silu(gate) * up from
    the reference products: empty experts, groups longer than a chunk, rows past the groups'
    sum (0), the W4A4 row scale. Swapping gate and up changes the result (the pair's order is
    kept), and mismatched weights are refused by name. At mp 56 the default chunk widths
    (``GROUPED_WIDTHS``) apply, and the pair stores what one width stores, bit for bit."""
    from pallas_kernels import fp4_matmul as fm
    from pallas_kernels import fp4_matmul_mgpu as FM
    from pallas_kernels import matmul_triton as mt
    from trace_jax.quant import quantize
    e, k, n = len(sizes), 128, 64
    prep = jax.jit(lambda a: FM.prepare_mgpu(jax.vmap(  # one global scale per expert
        lambda ae: quantize(ae, "nvfp4", axis=-2, global_scope="tensor"))(a)))
    wg, wu = (prep(jax.random.normal(jax.random.PRNGKey(i), (e, k, n)) *
                   jnp.arange(1, e + 1, dtype=jnp.float32)[:, None, None]) for i in (4, 5))
    assert len(set(np.asarray(wg.global_scale).ravel().tolist())) == e  # distinct per expert
    x = jax.random.normal(jax.random.PRNGKey(3), (m, k)) * 2
    gs = jnp.asarray(sizes, jnp.int32)
    xq = quantize(x, "nvfp4", global_scope="row")
    xb, g = mt.x_bf16(xq)

    @jax.jit
    def run(xb, g, wg, wu, gs):
        fused = lambda a, b, **kw: FM.fp4_grouped_swiglu_mgpu(  # noqa: E731
            xb, a, b, gs, mp=mp, backend="emulate", x_layout=lay, **kw)
        return (fused(wg, wu), FM.fp4_grouped_swiglu_mgpu_reference(xb, wg, wu, gs),
                fused(wg, wu, row_scale=g), fm.fp4_grouped_swiglu(xq, wg, wu, gs,
                                                                  backend="reference"),
                fused(wu, wg))

    got, ref, got4, ref4, swapped = (np.asarray(a, np.float32) for a in run(xb, g, wg, wu, gs))
    assert not np.isnan(got).any() and not np.isnan(got4).any()
    scale = np.abs(ref).max()
    # per element: a bf16 rounding of each product (f32 sums in another order) moves the
    # SwiGLU by a few bf16 ulps at most; the floor covers values near 0
    np.testing.assert_allclose(got, ref, rtol=2e-2, atol=1e-4 * scale)
    np.testing.assert_allclose(got4, ref4, rtol=2e-2, atol=1e-4 * np.abs(ref4).max())
    if sum(sizes) < m:
        assert np.max(np.abs(got[sum(sizes):])) == 0.0
    assert np.max(np.abs(swapped - ref)) > 0.1 * scale
    r = FM.chunk_rows(mp, lay == "aligned")
    if any(wd < r for wd in FM.GROUPED_WIDTHS):  # the default widths act on this call
        one = jax.jit(lambda xb, g, wg, wu, gs: FM.fp4_grouped_swiglu_mgpu(
            xb, wg, wu, gs, mp=mp, backend="emulate", x_layout=lay, row_scale=g, widths=()))
        np.testing.assert_array_equal(np.asarray(one(xb, g, wg, wu, gs), np.float32), got4)
    else:
        assert mp < 56  # (the mp-56 case must exercise the widths)
    w_small = prep(jnp.ones((e, k, 2 * n)))
    with pytest.raises(ValueError, match="must have one shape"):
        FM.fp4_grouped_swiglu_mgpu(xb, wg, w_small, gs, backend="emulate")


def test_fused_swiglu_lowers_and_model_stage_dispatches(monkeypatch):
    """The fused kernel lowers for CUDA on the CPU (the epilogue's exp inside the kernel), and
    ``fp4_grouped_swiglu`` on the kernel path runs one grouped kernel for Mosaic weights with
    ``FUSED_SWIGLU`` (or ``fused=True``), two otherwise."""
    import re

    from pallas_kernels import fp4_matmul as fm
    from pallas_kernels import fp4_matmul_mgpu as FM
    from trace_jax.quant import quantize
    e, k, n, m = 2, 512, 128, 23
    ws = [FM.prepare_mgpu(quantize(jax.random.normal(jax.random.PRNGKey(i), (e, k, n)),
                                   "nvfp4", axis=-2, global_scope="tensor")) for i in (0, 1)]
    gs = jnp.array([3, 20], jnp.int32)

    def kernels(**kw):  # (grouped kernel calls, whether an exp is lowered)
        txt = jax.jit(lambda x, a, b, g: fm.fp4_grouped_swiglu(
            x, a, b, g, backend="triton", **kw)).trace(
            jnp.zeros((m, k), jnp.bfloat16), *ws, gs).lower(lowering_platforms=("cuda",)).as_text()
        assert "mosaic_gpu" in txt and "wgmma.mma_async" in txt
        return len(re.findall(r"call @_grouped_direct\b", txt)), "math.exp" in txt

    assert kernels(fused=True) == (1, True) and kernels(fused=False) == (2, False)
    monkeypatch.setattr(FM, "FUSED_SWIGLU", True)
    assert kernels() == (1, True)
    monkeypatch.setattr(FM, "FUSED_SWIGLU", False)
    assert kernels() == (2, False)
    monkeypatch.setattr(FM, "SERIAL_TILES", not FM.SERIAL_TILES)  # (the other K step)
    monkeypatch.setattr(FM, "GROUPED_TILES", 2)  # two 64-row tiles of each weight per program
    assert kernels(fused=True) == (1, True)


def test_weight_tiles_per_program_lower_and_are_checked(monkeypatch):
    """``nt`` 64-row weight tiles per grouped program: the kernel's grid has N / (64 nt) programs
    per expert, with ``SERIAL_TILES`` one wgmma wait per tile (of each weight, fused) and one
    without, and it lowers for CUDA; an N that nt does not tile is refused by name, a bad
    ``GROUPED_TILES`` too, and ``GROUPED_TILES`` falls back to 1 where it does not divide N."""
    import re

    from pallas_kernels import fp4_matmul_mgpu as FM
    from trace_jax.quant import quantize
    e, k, n, m = 2, 512, 256, 23
    w = FM.prepare_mgpu(quantize(jax.random.normal(jax.random.PRNGKey(0), (e, k, n)), "nvfp4",
                                 axis=-2, global_scope="tensor"))
    gs = jnp.array([3, 20], jnp.int32)
    x = jnp.zeros((m, k), jnp.bfloat16)

    def kernel_jaxpr(f):
        txt = str(jax.make_jaxpr(f)(x, w, gs))
        return re.findall(r"Mesh\(grid=\((\d+), (\d+)\)", txt), txt.count("wgmma_wait")

    for serial in (True, False):
        monkeypatch.setattr(FM, "SERIAL_TILES", serial)
        for nt in (1, 2, 4):
            grids, waits = kernel_jaxpr(lambda x, w, g, nt=nt: FM.fp4_grouped_matmul_mgpu(
                x, w, g, backend="mgpu", nt=nt))
            assert grids == [(str(e), str(n // (64 * nt)))] and waits == (nt if serial else 1)
        grids, waits = kernel_jaxpr(lambda x, w, g: FM.fp4_grouped_swiglu_mgpu(
            x, w, w, g, backend="mgpu", nt=2))
        assert grids == [(str(e), str(n // 128))] and waits == (4 if serial else 1)
    for nt in (2, 4):
        txt = jax.jit(lambda x, w, g, nt=nt: FM.fp4_grouped_matmul_mgpu(
            x, w, g, backend="mgpu", nt=nt)).trace(x, w, gs).lower(
            lowering_platforms=("cuda",)).as_text()
        assert "mosaic_gpu" in txt and len(re.findall(r"call @_grouped_direct\b", txt)) == 1
    with pytest.raises(ValueError, match="nt=3: N=256 must be a multiple of 64 x nt"):
        FM.fp4_grouped_matmul_mgpu(x, w, gs, backend="emulate", nt=3)
    monkeypatch.setattr(FM, "GROUPED_TILES", 8)  # 8 x 64 > N = 256: the wrapper runs nt 1
    assert kernel_jaxpr(lambda x, w, g: FM.fp4_grouped_matmul_mgpu(
        x, w, g, backend="mgpu"))[0] == [(str(e), str(n // 64))]
    monkeypatch.setattr(FM, "GROUPED_TILES", 0)
    with pytest.raises(ValueError, match="GROUPED_TILES=0: use None or a positive int"):
        FM.fp4_grouped_matmul_mgpu(x, w, gs, backend="emulate")
    with pytest.raises(ValueError, match="N=256 must be a multiple of 64 x nt=8"):
        FM._grouped_direct(w.codes, w.scales, jnp.zeros((24, k), jnp.bfloat16), gs,
                           jnp.cumsum(gs), w.global_scale, w.global_scale, mp=16, tk=256,
                           steps=2, m=m, scaled=False, nt=8)


def test_appended_x_rows_with_and_without_the_read_pad():
    from pallas_kernels import fp4_matmul_mgpu as FM
    assert FM.appended_rows(888, 16, True) == FM.read_pad(888, 16) == 24
    assert FM.appended_rows(888, 16, False) == 0  # TMA fills the read-ahead rows
    assert FM.appended_rows(30, 8, False) == 2  # to a multiple of 8 rows
    assert FM.appended_rows(23, 16, False) == FM.read_pad(23, 16)  # shorter than one read


def test_kernels_lower_to_mosaic_gpu_on_cpu():
    """Both Mosaic GPU kernels trace and lower for CUDA on a CPU machine (layouts, inline_mgpu and
    wgmma operands are checked there; only the PTX compile needs a GPU)."""
    from pallas_kernels import fp4_matmul_mgpu as FM
    from trace_jax.quant import quantize
    q = quantize(jax.random.normal(jax.random.PRNGKey(0), (2, 512, 128)), "nvfp4", axis=-2,
                 global_scope="tensor")
    w = FM.prepare_mgpu(q)
    xp = jnp.zeros((8, 512), jnp.bfloat16)
    dense, dense_split = [jax.jit(lambda c, s, x, sp=sp: FM._matmul_t(
        c, s, x, tk=256, steps=2, splits=sp)).trace(w.codes[0], w.scales[0], xp).lower(
        lowering_platforms=("cuda",)).as_text() for sp in (1, 2)]
    # M = 1 and 3 unpadded: the x block of 8 rows reaches past x (TMA's out-of-bounds fill)
    unpadded_dense = [jax.jit(lambda c, s, x: FM._matmul_t(
        c, s, x, tk=256, steps=2, splits=2, mp=8)).trace(w.codes[0], w.scales[0], xp[:m]).lower(
        lowering_platforms=("cuda",)).as_text() for m in (1, 3)]
    # two 64-row weight tiles per CTA against one x tile (N = 128)
    dense_tiles = jax.jit(lambda c, s, x: FM._matmul_t(c, s, x, tk=256, steps=2, tiles=2)).trace(
        w.codes[0], w.scales[0], xp).lower(lowering_platforms=("cuda",)).as_text()
    with pytest.raises(ValueError, match="tiles=4"):
        FM._matmul_t(w.codes[0], w.scales[0], xp, tk=256, steps=2, tiles=4)  # N 128
    with pytest.raises(ValueError, match="tiles=3"):
        FM.fp4_matmul_mgpu(xp, jax.tree.map(lambda a: a[0], w), tiles=3)
    with pytest.raises(ValueError, match="mp=4"):
        FM._matmul_t(w.codes[0], w.scales[0], xp[:1], tk=256, steps=2, mp=4)
    with pytest.raises(ValueError, match=r"mp=8 .*\[M=9"):
        FM._matmul_t(w.codes[0], w.scales[0], jnp.zeros((9, 512), jnp.bfloat16), tk=256, steps=2,
                     mp=8)
    with pytest.raises(ValueError, match="splits=3"):
        FM.fp4_matmul_mgpu(xp, jax.tree.map(lambda a: a[0], w), splits=3)  # K 512: not 3 x 64
    gs = jnp.array([3, 20], jnp.int32)
    direct = [jax.jit(lambda *a, sc=sc: FM._grouped_direct(*a, mp=16, tk=256, steps=2, m=23,
                                                          scaled=sc)).trace(
        w.codes, w.scales, jnp.zeros((48, 512), jnp.bfloat16), gs, jnp.cumsum(gs),
        jnp.ones((2,), jnp.float32), jnp.ones((23,) if sc else (2,), jnp.float32)).lower(
        lowering_platforms=("cuda",)).as_text() for sc in (False, True)]
    unpadded = jax.jit(lambda *a: FM._grouped_direct(*a, mp=16, tk=256, steps=2, m=23,
                                                     scaled=False)).trace(  # x_pad=False: M rows,
        w.codes, w.scales, jnp.zeros((24, 512), jnp.bfloat16), gs, jnp.cumsum(gs),  # to 8
        jnp.ones((2,), jnp.float32), jnp.ones((2,), jnp.float32)).lower(
        lowering_platforms=("cuda",)).as_text()
    aends, src = FM.aligned_rows(gs, 23, 16)
    aligned = jax.jit(lambda *a: FM._grouped_direct(*a, mp=16, tk=256, steps=2, m=23,
                                                    scaled=True, aligned=True)).trace(
        w.codes, w.scales, jnp.zeros((src.shape[0], 512), jnp.bfloat16), gs, jnp.cumsum(gs),
        jnp.ones((2,), jnp.float32), jnp.ones((23,), jnp.float32), aends).lower(
        lowering_platforms=("cuda",)).as_text()
    for txt in (dense, dense_split, dense_tiles, *unpadded_dense, *direct, unpadded, aligned):
        assert "mosaic_gpu" in txt and "wgmma.mma_async" in txt and "mul.rn.bf16x2" in txt


def test_fp4_matmul_takes_mosaic_weights():
    """``fp4_matmul`` with dense Mosaic GPU weights: the reference equals the Triton layout's bit
    for bit (bf16 x and a W4A4 activation QTensor); the prefill path (M >= PREFILL_M: dequantize
    + XLA GEMM, runs on the CPU) agrees with the reference to bf16 rounding, the activation's
    global scale included; a bad cfg is refused by name."""
    from pallas_kernels import fp4_matmul as fm
    from trace_jax.quant import quantize
    k, n = 256, 128
    q = quantize(jax.random.normal(jax.random.PRNGKey(7), (k, n)), "nvfp4", axis=-2,
                 global_scope="tensor")
    wm, wt = fm.prepare_expert_weights(q, "mosaic"), fm.prepare_weights(q)
    assert type(wm).__name__ == "MgpuWeights"
    for m in (5, fm.PREFILL_M + 8):
        x = 3.0 * jax.random.normal(jax.random.PRNGKey(m), (m, k))
        for xin in (x.astype(jnp.bfloat16), quantize(x, "nvfp4", global_scope="tensor")):
            ref = np.asarray(fm.fp4_matmul(xin, wt), np.float32)
            np.testing.assert_array_equal(np.asarray(fm.fp4_matmul(xin, wm), np.float32), ref)
            if m >= fm.PREFILL_M:  # the kernel path's prefill branch is plain XLA
                got = np.asarray(fm.fp4_matmul(xin, wm, backend="triton"), np.float32)
                np.testing.assert_allclose(got, ref, rtol=2e-2, atol=2e-2 * np.abs(ref).max())
    with pytest.raises(TypeError, match="cfg=\\(tk, steps, splits\\)"):
        fm.fp4_matmul(jnp.ones((4, k), jnp.bfloat16), wm, backend="triton", cfg=(256, 4))


def test_dense_split_rule_reproduces_the_measured_best():
    """``default_splits`` at the shapes session 20 measured on the H200 (K 8192, M = 8, 4
    stages; gpu_session20a/b): 2 splits beat 1 at N = 8448, 16896 and 28672; 1 beat 2 at N =
    25344 (3 CTAs per SM already balanced); at 33792 (4 per SM) the two were within 1.2%; M = 32
    (2 stages) 2 splits beat 1 and 4; M = 64 (2 stages) 1 beat 2 and 4. 4 stages at M <= 16,
    2 above."""
    from pallas_kernels import fp4_matmul_mgpu as FM
    picks = {nn: FM.default_splits(nn, 8192, 8, 256, 4, sms=132)
             for nn in (8448, 16896, 25344, 28672)}
    assert picks[8448] >= 2 and picks[16896] == 2 and picks[25344] == 1 and picks[28672] == 2
    assert FM.default_splits(33792, 8192, 8, 256, 4, sms=132) in (1, 2)
    assert FM.default_splits(28672, 8192, 32, 256, 2, sms=132) == 2
    assert FM.default_splits(28672, 8192, 64, 256, 2, sms=132) == 1
    assert FM.default_steps(8) == FM.default_steps(16) == 4 and FM.default_steps(32) == 2
    # session 28: M = 64 2 tiles (1.08x in three runs); session 43: with tk 256, 2 stages
    # (1.08-1.31x tk 128, 3 stages at 33-64 rows on an H100); M = 200 tk 128
    for m in (33, 48, 64):
        assert (FM.default_dense_tiles(28672, m), FM.default_dense_tk(m), FM.default_steps(m)) \
            == (2, 256, 2)
    assert FM.default_dense_tiles(28672, 8) == FM.default_dense_tiles(28672, 32) == 1
    assert FM.default_dense_tiles(64 * 33, 64) == 1  # N not a multiple of 128
    assert (FM.default_dense_tk(200), FM.default_steps(200), FM.default_dense_tiles(28672, 200)) \
        == (128, 2, 1)
    assert FM.default_dense_tk(32) == 256
    assert FM.dense_ctas_per_sm(8, 256, 4) == 4  # 20a's resource dump: 55296 B of smem per CTA
    assert FM.dense_ctas_per_sm(32, 256, 2) == 4  # 3 with the output beside the stages (28b)
    assert FM.default_splits(768, 768, 8, 256, 4, sms=132) == 1  # 3 K steps: nothing to split


def test_grouped_knobs_by_layout():
    """mp 8 only on the aligned x layout and up to a mean group of 4 rows (20d: 216 rows over 128
    experts), mp 16 for decode otherwise, 56 for prefill-sized groups."""
    from pallas_kernels import fp4_matmul_mgpu as FM
    assert FM.default_grouped_knobs(216, 128, 2048, aligned=True)[0] == 8
    assert FM.default_grouped_knobs(888, 128, 2048, aligned=True)[0] == 16
    assert FM.default_grouped_knobs(216, 128, 2048)[0] == 16
    assert FM.default_grouped_knobs(16384, 128, 768) == (56, 256, 2)
    assert FM.default_grouped_knobs(888, 128, 768)[1] == 256
    # weight tiles per program (21f): nt 2 for the 2048-wide down projection, 1 for the fused
    # 768-wide gate / up pair (nt 2 was slower there)
    assert FM.default_tiles(2048, 1) == 2 and FM.default_tiles(768, 2) == 1
    assert FM.default_tiles(768, 1) == 1 and FM.default_tiles(64 * 33, 1) == 1  # 33: odd


def test_fp4_matmul_mosaic_dispatch_lowers_on_cpu():
    """``fp4_matmul`` with dense Mosaic weights on the kernel path (``backend="triton"``: the GPU
    dispatch) lowers for CUDA for a bf16 x and a W4A4 QTensor at M = 5, at M = 13 (not a
    multiple of 8 and more than 8 rows: TMA cannot take x unpadded, session 28 found the
    wrapper passing it so) and at M = 250, where tk 256 with 2 stages would not fit shared
    memory (``dense_tk`` takes 128)."""
    from pallas_kernels import fp4_matmul as fm
    from pallas_kernels import fp4_matmul_mgpu as FM
    from trace_jax.quant import quantize
    k, n = 512, 128
    q = quantize(jax.random.normal(jax.random.PRNGKey(8), (k, n)), "nvfp4", axis=-2,
                 global_scope="tensor")
    wm = FM.prepare_mgpu(q)
    for m in (5, 13, 250):
        x = jnp.ones((m, k), jnp.float32)
        for xin in (x.astype(jnp.bfloat16), quantize(x, "nvfp4", global_scope="tensor")):
            txt = jax.jit(lambda a, b: fm.fp4_matmul(a, b, backend="triton")).trace(
                xin, wm).lower(lowering_platforms=("cuda",)).as_text()
            assert "mosaic_gpu" in txt
    assert FM.dense_tk(8192, 8, 4) == 256 and FM.dense_tk(8192, 256, 2) == 128
    assert FM.dense_tk(8192, 208, 2) == 256 and FM.dense_tk(8192, 216, 2) == 128
    # 4 weight tiles' stages at tk 256 do not fit where 1 tile's do; at mp 256 their f32 output
    # tiles alone (256 KB) do not
    assert FM.dense_tk(8192, 128, 3) == 256 and FM.dense_tk(8192, 128, 3, tiles=4) == 128
    with pytest.raises(ValueError, match="3 stages of 256 rows and 4 weight tiles"):
        FM.dense_tk(8192, 256, 3, 128, tiles=4)
    assert FM.dense_smem(8, 256, 4, scoped=False) == 55296 + 1024  # 20a's resource dump
    assert FM.dense_smem(8, 256, 4, scoped=True) == 55296 - 64 * 8 * 4 + 1024  # output reuses
    assert FM.dense_smem(64, 256, 2, tiles=2, scoped=False) == 2 * 51200 + 32768 + 1024
    with pytest.raises(ValueError, match="no K tile <= 256 divides K / splits = 96"):
        FM.dense_tk(96, 8, 4)


def test_dense_token_major_partials_lower_on_cpu(monkeypatch):
    """``DENSE_TOKEN_MAJOR``: the dense kernel stores its f32 partials from registers as [splits,
    M, N] (the M token rows only), so XLA's epilogue is a sum without a transpose; it lowers
    for CUDA at M = 1, 8 and 13 (x padded to 16 rows; the output keeps 13) with 2 splits and at
    M = 64 with 2 weight tiles; by default (``default_token_major``) up to 32 rows only."""
    from pallas_kernels import fp4_matmul_mgpu as FM
    from trace_jax.quant import quantize
    q = quantize(jax.random.normal(jax.random.PRNGKey(4), (1024, 256)), "nvfp4", axis=-2,
                 global_scope="tensor")
    w = FM.prepare_mgpu(q)

    def lowered(m, splits, tiles):
        traced = jax.jit(lambda x: FM.fp4_matmul_mgpu(x, w, splits=splits, tiles=tiles,
                                                      backend="mgpu")).trace(
            jnp.zeros((m, 1024), jnp.bfloat16))
        assert traced.out_info.shape == (m, 256)
        return traced.lower(lowering_platforms=("cuda",)).as_text()

    assert FM.DENSE_TOKEN_MAJOR is None  # the default: token-major up to 32 rows
    assert FM.default_token_major(32) and not FM.default_token_major(40)
    assert "stablehlo.transpose" not in lowered(8, 2, 1)
    assert "stablehlo.transpose" in lowered(64, 1, 2)
    monkeypatch.setattr(FM, "DENSE_TOKEN_MAJOR", False)
    assert "stablehlo.transpose" in lowered(8, 2, 1)  # the [splits, N, Mp] tiles
    monkeypatch.setattr(FM, "DENSE_TOKEN_MAJOR", True)
    for m, splits, tiles in ((1, 2, 1), (8, 2, 1), (13, 2, 1), (64, 1, 2)):
        txt = lowered(m, splits, tiles)
        assert "wgmma.mma_async" in txt and "stablehlo.transpose" not in txt


@pytest.mark.parametrize("diag, decode, mma", [(None, True, True), ("raw_scales", True, True),
                                               ("no_decode", False, True),
                                               ("stream_only", False, False),
                                               ("weights_only", False, False),
                                               ("x_only", False, False)])
def test_dense_timing_probes_leave_out_their_parts(monkeypatch, diag, decode, mma):
    """``_DIAG`` (check_mgpu_matmul --diag, timing only): the dense and grouped kernels lower for
    CUDA with each probe, and the probe leaves out exactly its part: no_decode has the wgmma but
    no decode multiply, stream_only neither; raw_scales keeps both (without the scale asm's
    mad)."""
    from pallas_kernels import fp4_matmul_mgpu as FM
    from trace_jax.quant import quantize
    q = quantize(jax.random.normal(jax.random.PRNGKey(5), (512, 128)), "nvfp4", axis=-2,
                 global_scope="tensor")
    w = FM.prepare_mgpu(q)
    wg = FM.prepare_mgpu(quantize(jax.random.normal(jax.random.PRNGKey(6), (2, 512, 128)),
                                  "nvfp4", axis=-2, global_scope="tensor"))
    gs = jnp.array([3, 20], jnp.int32)
    monkeypatch.setattr(FM, "_DIAG", diag)
    FM.clear_trace_caches()  # the probe is read when the K loop traces
    try:
        dense = jax.jit(lambda c, s, x: FM._matmul_t(c, s, x, tk=256, steps=2)).trace(
            w.codes, w.scales, jnp.zeros((8, 512), jnp.bfloat16)).lower(
            lowering_platforms=("cuda",)).as_text()
        grouped = jax.jit(lambda *a: FM._grouped_direct(*a, mp=16, tk=256, steps=2, m=23,
                                                        scaled=False)).trace(
            wg.codes, wg.scales, jnp.zeros((48, 512), jnp.bfloat16), gs, jnp.cumsum(gs),
            jnp.ones((2,), jnp.float32), jnp.ones((2,), jnp.float32)).lower(
            lowering_platforms=("cuda",)).as_text()
    finally:
        FM.clear_trace_caches()
    for txt in (dense, grouped):
        assert "mosaic_gpu" in txt
        assert ("mul.rn.bf16x2" in txt) == decode
        assert ("wgmma.mma_async" in txt) == mma
        assert ("mad.lo.u32" in txt) == (diag is None)  # the E4M3 -> bf16 scale conversion


def test_stream_probes_copy_only_their_streams(monkeypatch):
    """The stream probes' pipelines copy, into shared memory, codes + scales + x (stream_only),
    codes + scales (weights_only) or x alone (x_only), for one weight and for the fused pair:
    the kernel jaxpr's copy_gmem_to_smem count is the same per stream in all three."""
    import re

    from pallas_kernels import fp4_matmul_mgpu as FM
    from trace_jax.quant import quantize
    w = FM.prepare_mgpu(quantize(jax.random.normal(jax.random.PRNGKey(6), (2, 512, 128)),
                                 "nvfp4", axis=-2, global_scope="tensor"))
    gs = jnp.array([3, 20], jnp.int32)
    x = jnp.zeros((23, 512), jnp.bfloat16)

    def copies(diag, pair):  # a new function each call: make_jaxpr caches by identity
        monkeypatch.setattr(FM, "_DIAG", diag)
        FM.clear_trace_caches()
        ws = (w, w) if pair else (w,)
        f = FM.fp4_grouped_swiglu_mgpu if pair else FM.fp4_grouped_matmul_mgpu
        txt = str(jax.make_jaxpr(lambda x, g: f(x, *ws, g, backend="mgpu", mp=16, tk=256))(x, gs))
        return len(re.findall(r"copy_gmem_to_smem", txt))

    try:
        for pair, nw in ((False, 1), (True, 2)):
            both = copies("stream_only", pair)
            per_stream, rest = divmod(both, 2 * nw + 1)
            assert per_stream > 0 and rest == 0, both
            assert copies("weights_only", pair) == 2 * nw * per_stream
            assert copies("x_only", pair) == per_stream
    finally:
        FM.clear_trace_caches()


def test_stream_probe_pad_leaves_an_sm_the_kernels_ctas(monkeypatch):
    """``_DIAG_CTAS``: a stream probe's pipeline gets a shared-memory pad (a u8 scratch in the
    kernel jaxpr) so that its stages, the pad and the 1 KB reserve let an SM hold exactly that
    many CTAs; no pad without the cap, for a probe that is not a stream probe, or where the
    stages are that large already; the padded probe lowers for CUDA."""
    import re

    from pallas_kernels import fp4_matmul_mgpu as FM
    from trace_jax.quant import quantize
    w = FM.prepare_mgpu(quantize(jax.random.normal(jax.random.PRNGKey(6), (2, 512, 128)),
                                 "nvfp4", axis=-2, global_scope="tensor"))
    gs = jnp.array([3, 20], jnp.int32)
    args = (w.codes, w.scales, jnp.zeros((48, 512), jnp.bfloat16), gs, jnp.cumsum(gs),
            jnp.ones((2,), jnp.float32), jnp.ones((2,), jnp.float32))
    # a stage's bytes at tk 256: codes, scales, and the x rows of an mp-16 chunk (24 with the pad)
    codes, scales, x = 64 * 256 // 2, 4 * 64 * 4, FM.chunk_rows(16, False) * 256 * 2

    def pads(diag, ctas):  # the u8 scratch sizes of the kernel jaxpr (a new function each call)
        monkeypatch.setattr(FM, "_DIAG", diag)
        monkeypatch.setattr(FM, "_DIAG_CTAS", ctas)
        FM.clear_trace_caches()
        f = lambda *a: FM._grouped_direct(*a, mp=16, tk=256, steps=2, m=23, scaled=False)
        return [int(v) for v in re.findall(r"u8\[(\d+)\]", str(jax.make_jaxpr(f)(*args)))]

    try:
        assert pads("stream_only", None) == [] and pads("no_decode", 2) == []
        for diag, stage in (("stream_only", codes + scales + x), ("weights_only", codes + scales),
                            ("x_only", x)):
            for ctas in (1, 2, 3):
                (pad,) = pads(diag, ctas)
                assert FM._SMEM_PER_SM // (2 * stage + pad + 1024) == ctas, (diag, ctas, pad)
        monkeypatch.setattr(FM, "_DIAG", "stream_only")
        monkeypatch.setattr(FM, "_DIAG_CTAS", 2)
        assert FM.probe_pad(2, 64, 256, 2) == 0  # the pair at mp 64: 100 KB of stages already
        FM.clear_trace_caches()
        txt = jax.jit(lambda *a: FM._grouped_direct(*a, mp=16, tk=256, steps=2, m=23,
                                                    scaled=False)).trace(*args).lower(
            lowering_platforms=("cuda",)).as_text()
        assert "mosaic_gpu" in txt
    finally:
        FM.clear_trace_caches()


@pytest.mark.parametrize("lay,mp,widths", [("rows", 16, (8, 16)), ("aligned", 16, (8,)),
                                           ("rows", 24, (16,))])
def test_grouped_chunk_widths_store_every_row_and_the_same_values(lay, mp, widths,
                                                                   monkeypatch):
    """Narrower chunk widths (``widths``): groups whose chunks end inside each width, at it, one
    column past it, and past all of them (two chunks) store every row with the values of the
    single-width kernel, bit for bit (the emulation stores only the columns below a chunk's
    width, which the kernel takes from the same ``chunk_width`` of the same chunk tuple, so a
    width too narrow leaves NaN: shown by a chunk_width that picks one width too few); bad
    widths are refused by name; the kernel with widths lowers for CUDA with one K pipeline per
    width."""
    import re

    from pallas_kernels import fp4_matmul_mgpu as FM
    from trace_jax.quant import quantize
    # chunks whose stored columns end at each width w and at w + 1, for all three cases below
    sizes, k, n = (3, 0, 9, 30, 1, 14, 5, 3, 15, 6), 128, 64
    e, m = len(sizes), sum(sizes) + 2
    w = jax.jit(lambda a: FM.prepare_mgpu(quantize(a, "nvfp4", axis=-2, global_scope="tensor")))(
        jax.random.normal(jax.random.PRNGKey(2), (e, k, n)))
    x = jax.random.normal(jax.random.PRNGKey(3), (m, k), jnp.bfloat16)
    gs = jnp.asarray(sizes, jnp.int32)
    run = lambda ws: np.asarray(jax.jit(lambda x, w, gs: FM.fp4_grouped_matmul_mgpu(  # noqa
        x, w, gs, mp=mp, backend="emulate", x_layout=lay, widths=ws))(x, w, gs), np.float32)
    one = run(())
    assert not np.isnan(one).any()
    np.testing.assert_array_equal(run(widths), one)
    r = FM.chunk_rows(mp, lay == "aligned")
    hi = jnp.arange(1, r + 1)
    assert [int(v) for v in FM.chunk_width((0, 0, 0, hi, 0), widths, r)] == [
        next((wd for wd in widths if h <= wd), r) for h in range(1, r + 1)]
    real = FM.chunk_width
    monkeypatch.setattr(FM, "chunk_width", lambda ch, ws, r: real(ch, ws[:-1], ws[-1]))
    assert np.isnan(run(widths)).any()  # the widest branch dropped: its chunks lose columns
    monkeypatch.setattr(FM, "chunk_width", real)
    for bad in ((12,), (r,), (0,)):
        with pytest.raises(ValueError, match=rf"chunk widths \[{bad[0]}\]"):
            run(bad)
    with pytest.raises(ValueError, match=r"chunk widths \[8\]"):
        FM.fp4_grouped_matmul_mgpu(x, w, gs, mp=8, backend="emulate", x_layout="aligned",
                                   widths=(8,))  # aligned mp 8: a chunk is 8 rows
    # the module knob: the widths below this call's chunk rows apply, the others are left out
    monkeypatch.setattr(FM, "GROUPED_WIDTHS", (*widths, r, r + 8))
    np.testing.assert_array_equal(run(None), one)
    monkeypatch.setattr(FM, "chunk_width", lambda ch, ws, r: real(ch, ws[:-1], ws[-1]))
    assert np.isnan(run(None)).any()  # (so the knob's widths did reach the kernel)
    monkeypatch.setattr(FM, "chunk_width", real)
    monkeypatch.setattr(FM, "GROUPED_WIDTHS", ())
    txt = [jax.jit(lambda x, w, gs, ws=ws: FM.fp4_grouped_matmul_mgpu(
        x, w, gs, mp=mp, backend="mgpu", x_layout=lay, widths=ws)).trace(x, w, gs).lower(
        lowering_platforms=("cuda",)).as_text() for ws in ((), widths)]
    ns = [sorted(int(v) for v in re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16", t))
          for t in txt]
    assert ns == [[r], sorted((*widths, r))]  # one K pipeline (a wgmma of N = width) per width
