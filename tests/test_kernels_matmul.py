"""FP4 matmul kernels v2 against the pure-JAX reference (CPU: Pallas interpret mode).

The inline-PTX decode cannot run in interpret mode: there the kernel runs the asm's bit-exact
emulation (``matmul_layout.emulate_planes``); the layout, the emulation and the PTX text are
tested here, the asm itself on the GPU (``bench_matmul.decode_exact``, rel err column)."""

import dataclasses
import functools
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels import fp4_matmul as fm
from pallas_kernels import matmul_layout as L
from pallas_kernels import matmul_triton as mt
from tests._jaxpr import eqns as walk_eqns
from trace_jax import e2m1, quant

CFG = mt.Config(bm=16, bn=32, bk=256, split_k=1)


def _rel(out, ref):
    out, ref = np.asarray(out, np.float32), np.asarray(ref, np.float32)
    assert np.all(np.isfinite(out))
    return np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)


# Test inputs and references built by jitted library calls (one program per shape; op by op,
# every primitive of the quantizer compiled on its own for each shape: seconds per test). The
# kernels under test run as the library calls them.
@functools.partial(jax.jit, static_argnums=(1, 2))
def _q(key, shape, fmt, scale=1.0):
    return quant.quantize(jax.random.normal(key, shape) * scale, fmt, axis=-2)


@jax.jit
def _ref_q(x, q):
    """Reference straight from the QTensor (independent of the kernel layout)."""
    return jnp.dot(x.astype(jnp.float32), quant.dequantize(q), precision="highest")


_prepare = jax.jit(fm.prepare_weights, static_argnames=("layout",))
_quantize = jax.jit(quant.quantize, static_argnames=("fmt", "axis", "global_scope"))
_dequantize = jax.jit(quant.dequantize, static_argnames=("dtype",))
_matmul_ref = jax.jit(fm.fp4_matmul_reference)
_grouped_ref = jax.jit(fm.fp4_grouped_matmul_reference)


def test_layout_bits_bijective_and_program_exact():
    tab = L.source_table()
    assert tab.shape == (16, 4, 2)
    nib = jnp.asarray(np.random.default_rng(0).integers(0, 16, (16, 33)), jnp.uint8)
    words = L.pack_units(nib, axis=0)
    np.testing.assert_array_equal(L.unpack_units(words), nib)
    pairs = L.emulate_pairs(words[0], words[1])
    assert len(pairs) == 8
    for q, pr in enumerate(pairs):
        pr = np.asarray(pr)
        assert np.all(pr & ~np.uint32(L.P_MASK) == 0)  # nothing but magnitude + sign bits
        for h in (0, 1):
            np.testing.assert_array_equal(L.pattern_to_code(jnp.asarray(pr >> (16 * h) & 0xFFFF)),
                                          nib[2 * q + h])


def test_pattern_value_is_e2m1_times_2_pow_minus_126():
    """The asm's bf16 pattern (magnitude at bits 8..6, sign at 15) equals E2M1 * 2**-126:
    checked through exact integer arithmetic on the bf16 fields."""
    for c in range(16):
        pat = ((c & 7) << 6) | ((c & 8) << 12)
        exp, man, sign = (pat >> 7) & 0xFF, pat & 0x7F, pat >> 15
        val = (man / 128.0) * 2.0 ** -126 if exp == 0 else (1 + man / 128.0) * 2.0 ** (exp - 127)
        val = -val if sign else val
        assert val * 2.0 ** 126 == float(e2m1.decode(jnp.uint8(c)))
        assert float(L.code_value(jnp.int32(c))) == float(e2m1.decode(jnp.uint8(c)))


def test_asm_text_matches_program():
    asm = L.asm_text()
    assert asm.count("mul.rn.bf16x2") == 8 and asm.count("lop3.b32") == 1
    ops = [ln.split()[0] for ln in asm.splitlines() if re.match(r"^[a-z]", ln)]
    assert sum(o in ("shf.l.wrap.b32", "and.b32", "lop3.b32") for o in ops) == 16
    assert f"{L.MASK_A:#010x}" in asm and f", {L.RA};" in asm and f", {L.RB};" in asm
    assert len(L.ASM_CONSTRAINTS.split(",")) == 19


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_prepare_roundtrip_and_dequant(fmt, layout):
    q = _q(jax.random.key(4), (2, 256, 32), fmt, 5.0)
    w = _prepare(q, layout)
    assert w.shape == (2, 256, 32) and w.codes.dtype == jnp.uint32
    back = fm.weights_to_qtensor(w)
    np.testing.assert_array_equal(back.codes, q.codes)
    np.testing.assert_array_equal(_dequantize(back), _dequantize(q))
    np.testing.assert_array_equal(np.asarray(fm.dequantize_bf16(w), np.float32),
                                  np.asarray(_dequantize(q, jnp.bfloat16), np.float32))
    stacked = jax.tree.map(lambda a: jnp.stack([a, a]), w)  # layer axis for lax.scan
    one = jax.lax.scan(lambda c, wl: (c, wl.codes.sum()), 0, stacked)[1]
    assert one.shape == (2,)
    with pytest.raises(ValueError):
        fm.prepare_weights(quant.quantize(jnp.ones((64, 32)), "nvfp4", axis=-1))


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("m,layout,cfg", [(1, "kn", CFG), (5, "nk", CFG),
                                          (37, "kn", mt.Config(bm=32, bn=64, bk=256, split_k=2))])
def test_dense(fmt, m, layout, cfg):
    k0, k1 = jax.random.split(jax.random.key(m))
    q = _q(k0, (512, 64), fmt, 3.0)
    w = _prepare(q, layout)
    x = jax.random.normal(k1, (m, 512)).astype(jnp.bfloat16)
    out = mt.dense(x, w, cfg)
    assert out.shape == (m, 64) and out.dtype == jnp.bfloat16
    assert _rel(out, _ref_q(x, q)) < 4e-3  # bf16 output rounding only
    assert _rel(out, _matmul_ref(x, w)) < 4e-3


@pytest.mark.parametrize("tiles,steps,programs", [(4, 2, 3), (7, 32, 396), (3, 5, 40),
                                                    (224, 32, 396), (5, 4, 5)])
def test_stream_k_plan_matches_a_simulation(tiles, steps, programs):
    """Every iteration is run by exactly one program; a tile's programs write slots 0, 1, ...
    in program order (the kernel's slot formula), and the plan's mask is exactly those slots."""
    p_n, s_n, written = mt.stream_k_plan(tiles, steps, programs)
    total = tiles * steps
    owners = {t: [] for t in range(tiles)}
    seen = []
    for p in range(p_n):
        lo, hi = p * total // p_n, (p + 1) * total // p_n
        seen += range(lo, hi)
        for t in sorted({i // steps for i in range(lo, hi)}):
            slot = p - ((t * steps + 1) * p_n - 1) // total  # as in _fp4_stream_kernel
            owners[t].append((p, slot))
    assert sorted(seen) == list(range(total))
    want = np.zeros((max(len(o) for o in owners.values()), tiles), bool)
    for t, o in owners.items():
        assert [s for _, s in o] == list(range(len(o)))
        want[: len(o), t] = True
    assert s_n == want.shape[0] and np.array_equal(written, want)


@pytest.mark.parametrize("fmt,layout,m,programs,bk", [
    ("nvfp4", "kn", 1, 3, 256),     # 2 tiles x 4 K steps over 3 programs: tiles split
    ("mxfp4", "nk", 5, 5, 256),     # 3 programs touch a tile
    ("nvfp4", "kn", 19, 7, 512),    # 2 row tiles, the last partial
    ("nvfp4", "nk", 3, 64, 256)])   # more programs than iterations: one per iteration
def test_dense_stream_k(fmt, layout, m, programs, bk):
    k0, k1 = jax.random.split(jax.random.key(m + programs))
    q = _q(k0, (1024, 64), fmt, 3.0)
    w = _prepare(q, layout)
    x = jax.random.normal(k1, (m, 1024)).astype(jnp.bfloat16)
    cfg = mt.Config(bm=16, bn=32, bk=bk, programs=programs)
    out = mt.dense(x, w, cfg)
    assert out.shape == (m, 64) and out.dtype == jnp.bfloat16
    assert _rel(out, _ref_q(x, q)) < 4e-3
    plain = mt.dense(x, w, dataclasses.replace(cfg, programs=0))
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(plain, np.float32),
                               rtol=1e-2, atol=1e-2)


def test_dense_detects_wrong_permutation():
    """The test above can fail: a kernel fed unpermuted x is far off."""
    q = _q(jax.random.key(9), (256, 32), "nvfp4")
    w = _prepare(q)
    x = jax.random.normal(jax.random.key(10), (3, 256)).astype(jnp.bfloat16)
    orig = mt.permute_x
    try:
        mt.permute_x = lambda xb, bk: xb
        bad = mt.dense(x, w, CFG)
    finally:
        mt.permute_x = orig
    assert _rel(bad, _ref_q(x, q)) > 0.3


@pytest.mark.parametrize("k", [256, 160])  # 256: the plane-major dequantize; 160: the fallback
def test_prefill_path_exact(k):
    q = _q(jax.random.key(11), (k, 64), "nvfp4", 2.0)
    w = _prepare(q)
    assert mt.planes_fit(w) == (k == 256)
    x = jax.random.normal(jax.random.key(12), (fm.PREFILL_M, k)).astype(jnp.bfloat16)
    out = fm.fp4_matmul(x, w, backend="triton")  # M >= PREFILL_M: dequant + XLA dot
    assert _rel(out, _ref_q(x, q)) < 4e-3


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_dense_w4a4(fmt):
    k0, k1 = jax.random.split(jax.random.key(1))
    q = _q(k0, (256, 32), fmt)
    w = _prepare(q)
    x = jax.random.normal(k1, (7, 256)) * jnp.arange(1, 8.0)[:, None]
    xq = _quantize(x, fmt, global_scope="row") if fmt == "nvfp4" else _quantize(x, fmt)
    ref = _matmul_ref(xq, w)
    out = fm.fp4_matmul(xq, w, backend="triton", cfg=CFG)
    assert _rel(out, ref) < 4e-3
    assert _rel(_matmul_ref(x.astype(jnp.bfloat16), w), ref) > 1e-2


@pytest.mark.parametrize("fmt,layout,programs", [("nvfp4", "kn", 0), ("mxfp4", "nk", 0),
                                                 ("nvfp4", "kn", 3), ("mxfp4", "nk", 64)])
def test_grouped_ragged(fmt, layout, programs):
    """One program per (item, N tile), and persistent programs (fewer programs than tiles, and
    more): the same rows, zeros past the groups."""
    e, k, n, m = 5, 256, 32, 45
    k0, k1 = jax.random.split(jax.random.key(2))
    q = _q(k0, (e, k, n), fmt)
    w = _prepare(q, layout)
    gsc = jnp.array([1.0, 2.0, 0.5, 3.0, 1.5])[:, None, None]
    w = fm.FP4Weights(w.codes, w.scales, w.global_scale * gsc, w.kscale, w.fmt, w.layout)
    x = jax.random.normal(k1, (m, k)).astype(jnp.bfloat16)
    gs = jnp.array([17, 0, 3, 20, 0], jnp.int32)  # empty groups, sum 40 < 45
    ref = _grouped_ref(x, w, gs)
    cfg = dataclasses.replace(CFG, programs=programs)
    out = fm.fp4_grouped_matmul(x, w, gs, backend="triton", cfg=cfg)
    assert _rel(out, ref) < 4e-3
    assert np.all(np.asarray(out[40:]) == 0)
    wf = _dequantize(q) * gsc  # independent of the kernel layout
    ref2 = jax.lax.ragged_dot(x.astype(jnp.float32), wf, gs, precision="highest")
    assert _rel(out, ref2) < 4e-3


@pytest.mark.parametrize("programs", [0, 5])
def test_grouped_bf16_kernel(programs):
    e, k, n, m = 4, 128, 64, 30
    w = jax.random.normal(jax.random.key(6), (e, k, n)).astype(jnp.bfloat16)
    x = jax.random.normal(jax.random.key(7), (m, k)).astype(jnp.bfloat16)
    gs = jnp.array([0, 11, 0, 15], jnp.int32)
    out = fm.bf16_grouped_matmul(x, w, gs, backend="triton",
                                 cfg=mt.Config(bm=16, bn=32, bk=64, programs=programs))
    ref = fm.bf16_grouped_matmul(x, w, gs, backend="reference")
    assert _rel(out, ref) < 4e-3
    assert np.all(np.asarray(out[26:]) == 0)


@pytest.mark.parametrize("programs", [0, 5])
def test_grouped_bf16_kernel_scales_each_experts_accumulator(programs):
    """``expert_scale`` multiplies expert e's f32 accumulator before the bf16 rounding (the FP4
    kernels' global scale): the kernel equals the reference bit for bit up to f32 summation
    order, which differs from scaling the bf16 output afterwards; its gradient is the unscaled
    backward with dy scaled per row (here against XLA's gradient of the scaled f32 product)."""
    e, k, n, m = 4, 128, 64, 30
    k0, k1, k2 = jax.random.split(jax.random.key(12), 3)
    w = jax.random.normal(k0, (e, k, n)).astype(jnp.bfloat16)
    x = jax.random.normal(k1, (m, k)).astype(jnp.bfloat16)
    dy = jax.random.normal(k2, (m, n)).astype(jnp.bfloat16)
    gs = jnp.array([0, 11, 0, 15], jnp.int32)
    sc = jnp.array([3.0, 0.0123, 7.5, 1 / 3], jnp.float32)
    cfg = mt.Config(bm=16, bn=32, bk=64, programs=programs)
    out = fm.bf16_grouped_matmul(x, w, gs, backend="triton", cfg=cfg, expert_scale=sc)
    ref = fm.bf16_grouped_matmul(x, w, gs, backend="reference", expert_scale=sc)
    f32 = jax.lax.ragged_dot(x.astype(jnp.float32), w.astype(jnp.float32), gs,
                             precision="highest")
    rows = np.repeat(np.asarray(sc), np.asarray(gs))[:, None]
    want = (np.asarray(f32)[:26] * rows).astype(jnp.bfloat16)
    np.testing.assert_array_equal(np.asarray(ref[:26], np.float32), np.asarray(want, np.float32))
    assert _rel(out, ref) < 1e-3 and np.mean(np.asarray(out) != np.asarray(ref)) < 0.02
    assert np.all(np.asarray(out[26:]) == 0)
    late = (np.asarray(fm.bf16_grouped_matmul(x, w, gs, backend="reference"), np.float32)[:26]
            * rows).astype(jnp.bfloat16)  # rounding before the scale: another result
    assert np.mean(np.asarray(late, np.float32) != np.asarray(want, np.float32)) > 0.1

    def loss(fn, x, w):
        return jnp.sum(fn(x, w).astype(jnp.float32) * dy.astype(jnp.float32))

    kern = lambda x, w: fm.bf16_grouped_matmul(  # noqa: E731
        x, w, gs, backend="triton", cfg=cfg, expert_scale=sc)
    def scaled(x, w):
        out = jax.lax.ragged_dot(x.astype(jnp.float32), w.astype(jnp.float32), gs,
                                 precision="highest")
        return out * fm.expert_rows(sc, gs, m)
    dx, dw = jax.grad(functools.partial(loss, kern), argnums=(0, 1))(x, w)
    rx, rw = jax.grad(functools.partial(loss, scaled), argnums=(0, 1))(x, w)
    assert _rel(dx, rx) < 4e-3 and _rel(dw, rw) < 4e-3


def test_grouped_bf16_backward():
    """The kernel path's custom VJP (dx through the forward kernel reading w transposed in
    place, dw through the weight-gradient kernel) against XLA's gradient of an f32
    ``ragged_dot``: empty experts get zero dw, rows past the groups get zero dx, an expert
    with more rows than one BM step (70 > 64) accumulates across steps."""
    e, k, n, m = 4, 128, 64, 100
    k0, k1, k2 = jax.random.split(jax.random.key(11), 3)
    w = jax.random.normal(k0, (e, k, n)).astype(jnp.bfloat16)
    x = jax.random.normal(k1, (m, k)).astype(jnp.bfloat16)
    dy = jax.random.normal(k2, (m, n)).astype(jnp.bfloat16)
    gs = jnp.array([0, 70, 0, 21], jnp.int32)  # sum 91 < 100

    def loss(fn, x, w):
        return jnp.sum(fn(x, w).astype(jnp.float32) * dy.astype(jnp.float32))

    kern = lambda x, w: fm.bf16_grouped_matmul(x, w, gs, backend="triton")  # noqa: E731
    def ref(x, w):
        return jax.lax.ragged_dot(x.astype(jnp.float32), w.astype(jnp.float32), gs,
                                  precision="highest")
    dx, dw = jax.grad(functools.partial(loss, kern), argnums=(0, 1))(x, w)
    rx, rw = jax.grad(functools.partial(loss, ref), argnums=(0, 1))(x, w)
    assert dx.dtype == x.dtype and dw.dtype == w.dtype
    assert _rel(dx, rx) < 4e-3 and _rel(dw, rw) < 4e-3
    assert np.all(np.asarray(dx[91:], np.float32) == 0)
    assert np.all(np.asarray(dw[0], np.float32) == 0) and np.all(np.asarray(dw[2], np.float32) == 0)
    dw32 = mt.grouped_bf16_wgrad(x, dy, gs)  # f32 out, before the cast to w's dtype
    assert _rel(dw32, fm.bf16_grouped_matmul_wgrad_reference(x, dy, gs)) < 1e-5
    wt = jnp.swapaxes(w, 1, 2)  # [E,N,K] read as the transposed weight == the [E,K,N] forward
    out_nk = mt.grouped_bf16(dy, w, gs, mt.Config(bm=16, bn=64, bk=64), w_layout="nk")
    out_kn = mt.grouped_bf16(dy, wt, gs, mt.Config(bm=16, bn=64, bk=64))
    np.testing.assert_array_equal(np.asarray(out_nk, np.float32), np.asarray(out_kn, np.float32))


@pytest.mark.parametrize("layout,gs", [("kn", [17, 0, 20]), ("nk", [30, 0, 25]),
                                       ("kn", [0, 0, 0])])
def test_grouped_persistent_multi_tile(layout, gs):
    """Persistent programs that each run several (item, N tile) pairs of several K steps:
    the accumulator restarts per tile; groups summing past M are clipped; no groups -> zeros."""
    e, k, n, m = 3, 512, 64, 40
    k0, k1 = jax.random.split(jax.random.key(9))
    w = _prepare(_q(k0, (e, k, n), "nvfp4"), layout)
    x = jax.random.normal(k1, (m, k)).astype(jnp.bfloat16)
    gs = jnp.array(gs, jnp.int32)
    cfg = mt.Config(bm=16, bn=32, bk=256, programs=3)  # 2 K steps, 2 N tiles, 3 programs
    out = np.asarray(fm.fp4_grouped_matmul(x, w, gs, backend="triton", cfg=cfg), np.float32)
    ref = np.asarray(_grouped_ref(x, w, gs), np.float32)
    if int(gs.sum()) == 0:
        assert np.all(out == 0) and np.all(ref == 0)
    else:
        assert _rel(out, ref) < 4e-3
    wb = jax.random.normal(k0, (e, k, n)).astype(jnp.bfloat16)
    outb = fm.bf16_grouped_matmul(x, wb, gs, backend="triton",
                                  cfg=mt.Config(bm=16, bn=32, bk=128, programs=3))
    refb = np.asarray(fm.bf16_grouped_matmul(x, wb, gs, backend="reference"), np.float32)
    if int(gs.sum()) == 0:
        assert np.all(np.asarray(outb, np.float32) == 0)
    else:
        assert _rel(outb, refb) < 4e-3


def _loops_outside_kernels(jaxpr) -> list[str]:
    """Loop primitives (scan / while) in a jaxpr and its sub-jaxprs, not inside pallas_call."""
    return [e.primitive.name for e in walk_eqns(jaxpr, skip=("pallas_call",))
            if e.primitive.name in ("scan", "while")]


def test_grouped_wrappers_have_no_loops():
    """The grouped matmuls run in every MoE layer of every decode step: the code around the
    kernel must not hold a loop (on the GPU XLA runs one as a while loop of small kernels; the
    item tables' binary searches were two per call)."""
    e, k, n, m = 128, 256, 64, 40
    w = _prepare(_q(jax.random.key(10), (e, k, n), "nvfp4"))
    x = jnp.ones((m, k), jnp.bfloat16)
    gs = jnp.zeros((e,), jnp.int32).at[:5].set(8)
    cfgs = [mt.default_config(m, k, n, grouped=True), dataclasses.replace(CFG, programs=0)]
    for cfg in cfgs:
        jp = jax.make_jaxpr(lambda x, w, g, c=cfg: mt.grouped(x, w, g, c))(x, w, gs)
        assert _loops_outside_kernels(jp.jaxpr) == [], cfg
    wb = jnp.ones((e, k, n), jnp.bfloat16)
    jp = jax.make_jaxpr(lambda x, w, g: mt.grouped_bf16(x, w, g))(x, wb, gs)
    assert _loops_outside_kernels(jp.jaxpr) == []
    ends = jnp.array([0, 3, 3, 7])  # the loop-free search is numpy's side="right"
    v = jnp.arange(-1, 9)
    np.testing.assert_array_equal(mt._searchsorted_right(ends, v),
                                  np.searchsorted(np.asarray(ends), np.asarray(v), side="right"))


def test_persistent_needs_split_k_1():
    w = _prepare(_q(jax.random.key(8), (2, 512, 32), "nvfp4"))
    x = jnp.ones((4, 512), jnp.bfloat16)
    with pytest.raises(ValueError, match="split_k=1"):
        fm.fp4_grouped_matmul(x, w, jnp.array([2, 2], jnp.int32), backend="triton",
                              cfg=mt.Config(bm=16, bn=32, bk=256, split_k=2, programs=4))


def test_grouped_w4a4_and_swiglu():
    e, k, n, m = 3, 256, 32, 20
    ks = jax.random.split(jax.random.key(3), 3)
    wg = _prepare(_q(ks[0], (e, k, n), "nvfp4"))
    wu = _prepare(_q(ks[1], (e, k, n), "nvfp4"))
    xq = _quantize(jax.random.normal(ks[2], (m, k)), "nvfp4", global_scope="row")
    gs = jnp.array([0, 12, 8], jnp.int32)
    ref = fm.fp4_grouped_swiglu(xq, wg, wu, gs, backend="reference")
    out = fm.fp4_grouped_swiglu(xq, wg, wu, gs, backend="triton", cfg=CFG)
    assert _rel(out, ref) < 1e-2


def test_edge_values():
    """Every code incl. negative zero and +-6, large/small/subnormal block scales, zero blocks;
    NaN in a block makes its scale NaN and the output NaN (reference semantics)."""
    k, n = 256, 32
    rng = np.random.default_rng(0)
    w = rng.choice([-6.0, 6.0, 0.0, -0.0, 0.5, -0.5, -4.0, 1.5], size=(k, n)).astype(np.float32)
    w[:32] *= 400.0
    w[32:96] *= 1e-4
    w[96:160] = 0.0
    x = jnp.asarray(rng.normal(size=(3, k)), jnp.bfloat16)
    for fmt in ["nvfp4", "mxfp4"]:
        q = _quantize(jnp.asarray(w), fmt, axis=-2)
        fw = _prepare(q)
        out = mt.dense(x, fw, CFG)
        assert _rel(out, _ref_q(x, q)) < 4e-3, fmt
    wn = w.copy()
    wn[0, 0] = np.nan
    qn = _quantize(jnp.asarray(wn), "mxfp4", axis=-2)
    out = np.asarray(mt.dense(x, _prepare(qn), CFG), np.float32)
    assert np.isnan(out[:, 0]).all() and np.isfinite(out[:, 1:]).all()


def test_decode_exact_all_codes_and_scales():
    """Kernel path (emulated asm) on an identity x returns every code * scale exactly."""
    rng = np.random.default_rng(1)
    k, n = 256, 32
    codes = jnp.asarray(np.tile(np.arange(16), k * n // 16).reshape(k, n), jnp.uint8)
    for fmt, sc in [("nvfp4", [2.0 ** -9, 0.375, 1.0, 13.0, 448.0]),
                    ("mxfp4", [2.0 ** -30, 2.0 ** -3, 1.0, 2.0 ** 20])]:
        blk = quant.get_format(fmt).block_size
        s = rng.choice(sc, (k // blk, n))
        w = np.asarray(e2m1.decode(codes)) * np.repeat(s, blk, axis=0)
        q = _quantize(jnp.asarray(w, jnp.float32), fmt, axis=-2)
        out = mt.dense(jnp.eye(k, dtype=jnp.bfloat16), _prepare(q),
                       mt.Config(bm=16, bn=32, bk=256))
        np.testing.assert_array_equal(np.asarray(out, np.float32),
                                      np.asarray(_dequantize(q, jnp.bfloat16), np.float32))


def test_auto_is_reference_on_cpu():
    w = _prepare(_q(jax.random.key(5), (256, 32), "nvfp4"))
    x = jnp.ones((2, 256), jnp.bfloat16)
    np.testing.assert_array_equal(fm.fp4_matmul(x, w), fm.fp4_matmul_reference(x, w))


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_dequantize_planes_is_the_exact_weight_plane_major(fmt):
    """The prefill path's one-pass dequantize (interpret mode): bit-identical to
    ``code * block_scale`` (dequantize_bf16 with a unit global scale) after undoing the
    plane-major row order, and ``permute_x(x) @ planes`` equals ``x @ W``."""
    q = _q(jax.random.key(21), (512, 48), fmt, 4.0)  # 2 K tiles, N = 48 -> 16-wide tiles
    w = _prepare(q)
    planes = mt.dequantize_planes(w)
    unit = fm.dequantize_bf16(dataclasses.replace(w, global_scale=jnp.ones_like(w.global_scale)))
    rows = np.arange(512).reshape(2, 16, 16).transpose(0, 2, 1).reshape(512)  # 16 i + p per row
    np.testing.assert_array_equal(np.asarray(planes, np.float32),
                                  np.asarray(unit, np.float32)[rows])
    assert not np.array_equal(np.asarray(planes, np.float32), np.asarray(unit, np.float32))
    x = jax.random.normal(jax.random.key(22), (3, 512)).astype(jnp.bfloat16)
    a = jnp.dot(mt.permute_x(x, mt.PLANES_BK), planes, preferred_element_type=jnp.float32)
    b = jnp.dot(x, unit, preferred_element_type=jnp.float32)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="K % 256"):
        mt.dequantize_planes(fm.prepare_weights(_q(jax.random.key(23), (128, 48), fmt)))


# --------------------------------------------------------------------------------------------
# Compile checks (sm_90, no GPU)


def test_bad_mma_kwidth_rule():
    """The compile check's small-K kWidth rule (session 13: kWidth 8 on the K = 16 plane dots
    was miscompiled on the H200; kWidth 4 and 2 are fine at K = 16)."""
    from pallas_kernels import matmul_compilecheck as mc

    def dot(k, kw):
        op = "#ttg.dot_op<{{opIdx = {i}, parent = #mma, kWidth = {kw}}}>"
        return (f"    %3 = tt.dot %1, %2, %0 : tensor<16x{k}xbf16, {op.format(i=0, kw=kw)}> * "
                f"tensor<{k}x128xbf16, {op.format(i=1, kw=kw)}> -> tensor<16x128xf32, #mma>\n")

    assert mc.bad_mma_kwidth(dot(16, 4) + dot(16, 2) + dot(32, 8)) == []
    bad = mc.bad_mma_kwidth(dot(16, 8))
    assert len(bad) == 2 and bad[0].startswith("K=16 kWidth=8")


@pytest.mark.parametrize("kind", ["dense", "grouped"])
def test_default_kernels_compile_to_valid_mma(kind, tmp_path):
    """Lowered for sm_90 and compiled with the installed Triton (no GPU): the default ("kn")
    kernel's plane dots get a kWidth their K = 16 supports (``bad_mma_kwidth``) and the decode
    runs 16 asm blocks / 128 ``mul.bf16x2`` per 256-K step (no duplicated decode). Session 13's
    paired kernel (since removed) got kWidth 8 here and gave wrong results on the H200, which
    the interpret-mode tests cannot see."""
    from pallas_kernels import matmul_compilecheck as mc  # needs triton (requirements.txt)

    cfg = mt.Config(bm=16, bn=128, bk=256, split_k=2 if kind == "dense" else 1,
                    programs=0 if kind == "dense" else 4)
    if kind == "dense":
        w = fm.prepare_weights(quant.quantize(jnp.ones((512, 256)), "nvfp4", axis=-2))
        fn, args = (lambda x, w: mt.dense(x, w, cfg)), (jnp.ones((1, 512), jnp.bfloat16), w)
    else:
        w = fm.prepare_weights(quant.quantize(jnp.ones((3, 512, 256)), "mxfp4", axis=-2))
        gs = jnp.array([2, 0, 3], jnp.int32)
        fn, args = (lambda x, w: mt.grouped(x, w, gs, cfg)), (jnp.ones((5, 512), jnp.bfloat16), w)
    with mc.patched():
        (ttir,) = mc.lower(fn, *args)
    st = mc.compile_ttir(ttir, cfg.num_warps, cfg.num_stages, str(tmp_path), f"kn_{kind}")
    assert st["bad_mma_kwidth"] == [] and st["mma"] > 0 and st["local"] == 0
    ptx = (tmp_path / f"kn_{kind}.ptx").read_text()
    assert ptx.count("mul.rn.bf16x2") == 128
    assert "FP4_FORCE_COMPILE" not in os.environ


@pytest.mark.parametrize("w_layout,programs", [("kn", 0), ("kn", 4), ("nk", 0)])
def test_scaled_bf16_grouped_kernel_compiles_for_sm90(w_layout, programs, tmp_path):
    """The rollout's and the QAT trainer's ScaledExperts path (``expert_scale``) lowers for sm_90
    and compiles with the installed Triton (no GPU): no spills, one f32 multiply per accumulator
    element more than the unscaled kernel in the epilogue (the interpret-mode tests cannot see a
    lowering failure, and no GPU has run this kernel yet)."""
    from pallas_kernels import matmul_compilecheck as mc

    gs = jnp.array([3, 0, 2, 3], jnp.int32)
    k, n = (256, 128) if w_layout == "kn" else (128, 256)
    w = jnp.ones((4, 256, 128), jnp.bfloat16)
    x = jnp.ones((8, k), jnp.bfloat16)
    cfg = dataclasses.replace(mt.default_bf16_config(8, n), programs=programs)
    es = jnp.array([0.5, 1.0, 2.0, 4.0], jnp.float32)
    muls = {}
    for scaled in (False, True):
        fn = functools.partial(mt.grouped_bf16, group_sizes=gs, cfg=cfg, w_layout=w_layout,
                               expert_scale=es if scaled else None)
        with mc.patched():
            (ttir,) = mc.lower(fn, x, w)
        name = f"g_{w_layout}_{programs}_{scaled}"
        st = mc.compile_ttir(ttir, cfg.num_warps, cfg.num_stages, str(tmp_path), name)
        assert st["local"] == 0 and st["mma"] + st["wgmma"] > 0, st
        ptx = (tmp_path / f"{name}.ptx").read_text()
        muls[scaled] = len(re.findall(r"\bmul(\.rn)?\.f32\b", ptx))
    acc_per_thread = cfg.bm * cfg.bn // (32 * cfg.num_warps)
    assert muls[True] - muls[False] == acc_per_thread, (muls, acc_per_thread)


def test_grouped_matmuls_refuse_bad_group_sizes():
    """Negative group sizes used to give numbers; every grouped entry point now names them.
    The model's ``ops.grouped_matmul`` (whose groups partition the rows) also refuses sums past
    the rows, which the kernels clip as ``ragged_dot`` does. Traced sizes are not checked."""
    from pallas_kernels import fp4_matmul as FM
    from trace_jax import ops

    x = jnp.ones((6, 32), jnp.bfloat16)
    w = jnp.ones((2, 32, 16), jnp.bfloat16)
    wq = FM.prepare_expert_weights(quant.quantize(w.astype(jnp.float32), "nvfp4", axis=-2))
    ops.grouped_matmul(x, w, jnp.asarray([2, 4]))
    neg = jnp.asarray([-1, 7], jnp.int32)
    for call in (lambda g: ops.grouped_matmul(x, w, g),
                 lambda g: FM.bf16_grouped_matmul(x, w, g),
                 lambda g: FM.fp4_grouped_matmul(x, wq, g),
                 lambda g: FM.fp4_grouped_swiglu(x, wq, wq, g)):
        with pytest.raises(ValueError, match=r"group_sizes must be >= 0.*\[-1, 7\]"):
            call(neg)
    with pytest.raises(ValueError, match="sum to at most the 6 rows.*sum 8"):
        ops.grouped_matmul(x, w, jnp.asarray([4, 4]))
    FM.fp4_grouped_matmul(x, wq, jnp.asarray([4, 4]))  # the kernels' contract: clipped
    out = jax.jit(lambda g: ops.grouped_matmul(x, w, g))(jnp.asarray([2, 4]))
    assert out.shape == (6, 16)


def test_matmuls_refuse_operands_that_do_not_fit():
    """x whose K is not the weight's, and group_sizes with another count than the experts: the
    Triton kernels read K from x and experts from group_sizes, so they used to drop half the
    weight (or read past it) and read a non-existent expert instead of raising."""
    from pallas_kernels import fp4_matmul as FM

    w2 = FM.prepare_weights(quant.quantize(jnp.ones((512, 32)), "nvfp4", axis=-2))
    w3 = FM.prepare_expert_weights(quant.quantize(jnp.ones((2, 512, 32)), "nvfp4", axis=-2))
    x = jnp.ones((4, 256), jnp.bfloat16)
    for backend in ("triton", "reference"):
        with pytest.raises(ValueError, match=r"fp4_matmul: x \(4, 256\) does not contract with "
                                             r"the weight \(512, 32\)"):
            FM.fp4_matmul(x, w2, backend=backend)
        with pytest.raises(ValueError, match=r"fp4_grouped_matmul: x \(4, 256\) does not"):
            FM.fp4_grouped_matmul(x, w3, jnp.asarray([2, 2]), backend=backend)
    x = jnp.ones((6, 512), jnp.bfloat16)
    three = jnp.asarray([2, 2, 2], jnp.int32)
    for call in (lambda: FM.fp4_grouped_matmul(x, w3, three, backend="triton"),
                 lambda: FM.fp4_grouped_swiglu(x, w3, w3, three, backend="triton"),
                 lambda: FM.bf16_grouped_matmul(x, jnp.ones((2, 512, 64), jnp.bfloat16), three,
                                                backend="triton")):
        with pytest.raises(ValueError, match=r"group_sizes of shape \(3,\) for 2 experts"):
            call()
    with pytest.raises(ValueError, match="gate .* and up .* weights differ in shape"):
        FM.fp4_grouped_swiglu(x, w3, FM.prepare_expert_weights(
            quant.quantize(jnp.ones((2, 512, 64)), "nvfp4", axis=-2)), jnp.asarray([3, 3]))


def test_resident_warps_follow_the_sm90_limits():
    """Registers (per warp in units of 256, each warp from one of 4 sub-partitions of 16K),
    shared memory (+1 KB reserved per block, 128 B units), 32 blocks and 64 warps per SM:
    whichever binds first, worked by hand as cuda_occupancy.h does."""
    from pallas_kernels.matmul_compilecheck import resident_warps

    assert resident_warps(136, 1, 20480) == 10  # shared memory: 233472 // 21504
    assert resident_warps(136, 1, 0) == 12  # registers: 4352 per warp, 3 per 16K sub-partition
    assert resident_warps(182, 1, 0) == 8  # 5888 per warp: 2 per sub-partition
    assert resident_warps(255, 1, 0) == 8  # 8160 -> 8192 per warp: 2 per sub-partition
    assert resident_warps(128, 4, 0) == 16  # 4096 per warp: 16 warps, 4 blocks of 4
    assert resident_warps(96, 3, 0) == 18  # 3072 per warp: 5 per sub-partition, 20 // 3 blocks
    assert resident_warps(32, 1, 0) == 32  # the 32-block limit
    assert resident_warps(16, 2, 0) == 64  # the 64-warp limit
    assert resident_warps(32, 1, 233472 // 7 - 1024 - 60) == 6  # 60 B short of 7, rounded up


def test_attention_compilecheck_counts_the_default_tile(tmp_path):
    """The attention compile check compiles the v6 NVFP4 default for sm_90 (no GPU) and divides
    its loop by the rows the default block really holds (it used to assume 16 rows when a
    config named no block_k), with the warps an SM holds from its registers and shared memory."""
    from pallas_kernels import attention_compilecheck as acc
    from pallas_kernels import attention_triton as AT
    from pallas_kernels import matmul_compilecheck as mc

    with mc.patched():
        st = acc.compile_config("nv_default", dict(fmt="nvfp4", decode="v6"), str(tmp_path))
    assert st["rows"] == AT.tuned_knobs("nvfp4", "v6")[0] and st["local"] == 0
    assert st["sm_warps"] == mc.resident_warps(st["regs"], st["warps"], st["smem"]) > 0
    assert 20 < st["per_row"] < 45, st  # ~32 SASS per cache row (NOTES_attention)
