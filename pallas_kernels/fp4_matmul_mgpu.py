"""FP4 (NVFP4) matmuls for small M on Hopper in Pallas Mosaic GPU: the weights are decoded
straight into the registers of wgmma's A operand. The grouped (MoE) version is the rollout's
expert kernel (``fp4_matmul.prepare_expert_weights`` / ``fp4_grouped_matmul``, session 15); the
dense one is ``fp4_matmul.fp4_matmul``'s kernel for Mosaic weights (the model's dense projections
are bf16, so the rollout does not call it).

  w = prepare_mgpu(qtensor_KxN)            # once, at weight sync (``mgpu_layout``)
  y = fp4_matmul_mgpu(x_MxK_bf16, w)        # [M, N] bf16; M <= 256 (or fp4_matmul.fp4_matmul)

out^T [N, Mp] = W^T [N, K] x^T [K, Mp] (Mp = M rounded up to 8): one warpgroup per 64 weight
rows; an ``emit_pipeline`` over K streams (TMA) a [64, tk / 8] uint32 code tile, its [tk / 64, 64]
scale words and the [Mp, tk] x tile into shared memory; the code words are loaded in the WGMMA
register layout and decoded in registers (per word: 8 integer ops and 4 ``mul.bf16x2`` by the
block scales, ``mgpu_layout``), and ``wgmma`` takes them as its A operand with x^T (transposed
view of the x tile) as B, f32 accumulation. Decoded values are ``code * scale * 2**-8`` (exact in
bf16, as in ``fp4_matmul``); the wrapper applies ``2**8 * global_scale`` to the f32 result. K
may be split over 2 or 4 CTAs per 64 rows (``default_splits``: the SMs' load balance, session 20:
75% of copy at 8192 x 28672, M = 8), their f32 partials summed in the wrapper.

GPU only (Mosaic GPU has no CPU lowering and its interpret mode cannot run ``inline_mgpu``):
``fp4_matmul_mgpu`` falls back to the pure-JAX reference on other backends; the layout and the
decode are checked on the CPU by ``tests/test_mgpu_layout.py``, the kernel on the H200 by
``experiments/check_mgpu_matmul.py``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import kv_layout as KL
from pallas_kernels import mgpu_layout as MG
from trace_jax import quant
from trace_jax.quant import QTensor

ROWS = 64  # weight rows (N) per warpgroup: wgmma's M
# Timing probes for benchmarks only (wrong results; None for the kernel itself), read when the K
# loop traces (``experiments/check_mgpu_matmul.py --diag``):
# - "raw_scales": the raw scale words as multipliers (no E4M3 -> bf16 conversion);
# - "no_decode": wgmma's A operand is the code words themselves, each word in the four registers
#   its decode would fill (no decode, no scales): the streams and the wgmma without the decode;
# - "stream_only": neither decode nor wgmma: the pipeline's TMA streams alone (output zeros);
# - "weights_only" / "x_only": as stream_only, with only the weight (codes and scales) / only
#   the x stream in the pipeline: which of the two sets the stream's time.
_DIAG: str | None = None
STREAM_PROBES = ("stream_only", "weights_only", "x_only")
DIAGS = ("raw_scales", "no_decode", *STREAM_PROBES)
# With a stream probe: pad each K pipeline's shared memory so that an SM holds at most this many
# CTAs, the kernel's own count (the grouped kernel's 245-255 registers a thread allow 2 CTAs of
# one warpgroup), instead of the more that the probe's few registers and smaller stages allow.
# None: no pad. Read when the K loop traces.
_DIAG_CTAS: int | None = None


def clear_trace_caches() -> None:
    """Drop the jitted kernels' traces, so that the next call reads the trace-time knobs
    (``_DIAG`` and the others that no static argument carries) anew."""
    _matmul_t.clear_cache()
    _grouped_direct.clear_cache()
SHIFT = 8  # decoded values are code * scale * 2**-SHIFT (scale * 2**118 as the bf16 multiplier)


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["codes", "scales", "global_scale"], meta_fields=["fmt"])
@dataclasses.dataclass(frozen=True)
class MgpuWeights:
    codes: jax.Array  # uint32 [N, K / 8] (mgpu_layout)
    scales: jax.Array  # uint32 [K / 64, N]: 4 E4M3 block scales per word
    global_scale: jax.Array  # f32 []
    fmt: str = "nvfp4"

    @property
    def shape(self) -> tuple[int, ...]:
        *lead, n, k8 = self.codes.shape
        return (*lead, 8 * k8, n)

    @property
    def nbytes(self) -> int:
        return int(4 * self.codes.size + 4 * self.scales.size)


def prepare_mgpu(w: QTensor) -> MgpuWeights:
    """An NVFP4 weight QTensor [K, N] or [E, K, N] (experts) quantized along K (axis -2, one global
    scale per tensor / expert) in the Mosaic GPU layout. K must be a multiple of 64, N of 64."""
    if w.codes.ndim == 3:
        if w.axis != -2:
            raise ValueError(f"weights must be quantized along K (axis -2), got axis {w.axis}")
        if w.global_scale.shape[-2:] != (1, 1):
            raise ValueError(f"global scale must be per expert, got shape {w.global_scale.shape}")
        g = jnp.broadcast_to(w.global_scale, (w.codes.shape[0], 1, 1))
        return jax.vmap(prepare_mgpu)(dataclasses.replace(w, global_scale=g))
    if w.fmt != "nvfp4":
        raise NotImplementedError(f"the Mosaic GPU FP4 matmul takes nvfp4 weights, got {w.fmt}")
    if w.axis != -2 or w.codes.ndim != 2:
        raise ValueError(f"weights must be [K, N] quantized along K (axis -2), got {w.shape}, "
                         f"axis {w.axis}")
    k, n = w.shape
    if k % MG.SPAN or n % ROWS:
        raise ValueError(f"K={k} and N={n} must be multiples of {MG.SPAN} and {ROWS}")
    if w.global_scale.size != 1:
        raise ValueError(f"global scale must be per tensor, got shape {w.global_scale.shape}")
    nib = jnp.stack([w.codes & 15, w.codes >> 4], axis=1).reshape(k, n)  # [K, N]
    sb = jax.lax.bitcast_convert_type(w.scales, jnp.uint8)  # [K / 16, N]
    return MgpuWeights(codes=MG.pack_codes(nib.T), scales=MG.pack_scales(sb.T),
                       global_scale=w.global_scale.astype(jnp.float32).reshape(()))


def mgpu_to_qtensor(w: MgpuWeights) -> QTensor:
    """Inverse of :func:`prepare_mgpu` (exact)."""
    if w.codes.ndim == 3:
        return jax.vmap(mgpu_to_qtensor)(w)
    k, n = w.shape
    nib = MG.unpack_codes(w.codes).T  # [K, N]
    codes = (nib[0::2] | (nib[1::2] << 4)).astype(jnp.uint8)
    sb = MG.unpack_scales(w.scales).T  # [K / 16, N]
    return QTensor(codes=codes, scales=jax.lax.bitcast_convert_type(sb, jnp.float8_e4m3fn),
                   global_scale=w.global_scale.reshape(1, 1), fmt="nvfp4", axis=-2)


def _unscaled_f32(w: MgpuWeights) -> jax.Array:
    """The exact ``code * block scale`` values in f32 (the global scale left for the
    accumulator, as the kernels apply it)."""
    ones = dataclasses.replace(w, global_scale=jnp.ones_like(w.global_scale))
    return quant.dequantize(mgpu_to_qtensor(ones), jnp.float32)


def fp4_matmul_mgpu_reference(x: jax.Array, w: MgpuWeights, row_scale=None) -> jax.Array:
    out = jnp.dot(x.astype(jnp.float32), _unscaled_f32(w), precision=jax.lax.Precision.HIGHEST)
    scale = w.global_scale.astype(jnp.float32)
    return (out * (scale if row_scale is None else scale * row_scale)).astype(jnp.bfloat16)


# --- the kernel -------------------------------------------------------------------------------

_BIAS2 = f"{MG.S_BIAS * 0x10001:#010x}"
_SCALE_ASM = f"""{{
.reg .b32 t, z;
mov.b32 z, 0;
prmt.b32 t, $2, z, 0x4140;
mad.lo.u32 $0, t, 16, {_BIAS2};
prmt.b32 t, $2, z, 0x4342;
mad.lo.u32 $1, t, 16, {_BIAS2};
}}"""  # 4 scale codes (one u32, mgpu_layout) -> bf16x2 (S0, S1), (S2, S3); S = scale * 2**118

_M = f"{KL.P_MASK:#010x}"
_DECODE_ASM = f"""{{
.reg .b32 a, slo, shi;
.reg .b16 l, h;
mov.b32 {{l, h}}, $5;
mov.b32 slo, {{l, l}};
mov.b32 shi, {{h, h}};
and.b32 a, $4, {_M};
mul.rn.bf16x2 $0, a, slo;
shf.l.wrap.b32 a, $4, $4, {KL.ROTATIONS[1]};
and.b32 a, a, {_M};
mul.rn.bf16x2 $1, a, slo;
shf.l.wrap.b32 a, $4, $4, {KL.ROTATIONS[2]};
and.b32 a, a, {_M};
mul.rn.bf16x2 $2, a, shi;
and.b32 a, $4, {KL.HOLE_MASK:#010x};
mul.lo.u32 a, a, {KL.MUL:#x};
and.b32 a, a, {_M};
mul.rn.bf16x2 $3, a, shi;
}}"""  # one word + (S_lo, S_hi) -> its 4 bf16x2 pairs, pairs 0, 1 times S_lo, 2, 3 times S_hi
# (the half broadcasts are meant to become HMUL2 operand selectors, .H0_H0 / .H1_H1)


def _decode_tile(uw, srows, tk):
    """inline_mgpu: uint32 [64, tk / 8] code words (WGMMA layout) and tk / 64 scale rows [64]
    (WGMMA_ROW layout) -> bf16 [64, tk] wgmma A operand (WGMMA layout)."""
    import jax.experimental.mosaic.gpu as mgpu
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import llvm, vector
    from jax.experimental.mosaic.gpu import fragmented_array as fa
    from jax.experimental.mosaic.gpu import utils as mu
    from jax.experimental.pallas import mosaic_gpu as plgpu

    @plgpu.inline_mgpu(
        arg_types=(plgpu.Layout.WGMMA, *([plgpu.Layout.WGMMA.reduce(1)] * len(srows))),
        return_type=plgpu.ShapeDtypeStruct((ROWS, tk), jnp.bfloat16, layout=plgpu.Layout.WGMMA))
    def dec(ctx, u_fa, *s_fas):
        del ctx
        i32 = ir.IntegerType.get_signless(32)
        bf2 = ir.VectorType.get((2,), ir.BF16Type.get())
        struct4 = llvm.StructType.get_literal([i32] * 4)
        struct2 = llvm.StructType.get_literal([i32] * 2)
        out = np.empty(fa.WGMMA_LAYOUT.registers_shape((ROWS, tk)), dtype=object)
        for s in range(tk // MG.SPAN):
            for h in range(2):  # rows r and r + 8 of the thread
                sw = mu.bitcast(s_fas[s].registers[0, 0, h, 0, 0], i32)
                if _DIAG in ("raw_scales", "no_decode"):
                    spairs = [sw] * 2
                else:
                    sp = llvm.inline_asm(struct2, [sw], _SCALE_ASM, "=r,=r,r")
                    spairs = [llvm.extractvalue(i32, sp, (i,)) for i in range(2)]
                ureg = u_fa.registers[0, s, 0, 0, h, 0, 0, 0, 0]  # vector<2 x i32>
                for e in range(2):
                    word = vector.extract(ureg, [], [e])
                    if _DIAG == "no_decode":  # the word in all four registers (timing probe)
                        for p in range(4):
                            out[0, 8 * s + 4 * e + p, 0, 0, h, 0, 0, 0, 0] = mu.bitcast(word,
                                                                                         bf2)
                        continue
                    d = llvm.inline_asm(struct4, [word, spairs[e]], _DECODE_ASM,
                                        "=r,=r,=r,=r,r,r")
                    for p in range(4):
                        out[0, 8 * s + 4 * e + p, 0, 0, h, 0, 0, 0, 0] = mu.bitcast(
                            llvm.extractvalue(i32, d, (p,)), bf2)
        return mgpu.FragmentedArray(_registers=out, _layout=fa.WGMMA_LAYOUT, _is_signed=None)

    return dec(uw, *srows)


def _mma_weights(accs, us, ss, x_smem, *, tk, serial, chunked=False):
    """One K step's wgmmas, a weight at a time: the [64, tk] tile decoded from its code words
    ``us[i]`` ([64, tk / 8]) and scale words ``ss[i]`` ([tk / 64, 64]) in shared memory, times
    ``x_smem.T``, into ``accs[i]``. ``chunked``: one wgmma per 64-column span (the next span
    decodes under it); ``serial``: wait for each weight's wgmma before decoding the next (one
    decoded tile live at a time). The last wgmma is left for the caller to wait for."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    for acc_ref, u_smem, s_smem in zip(accs, us, ss):
        if chunked:
            for j in range(tk // MG.SPAN):
                uw = plgpu.load(u_smem.at[:, pl.ds(8 * j, 8)], layout=plgpu.Layout.WGMMA,
                                optimized=False)
                srow = plgpu.load(s_smem.at[j], layout=plgpu.Layout.WGMMA.reduce(1))
                a = _decode_tile(uw, [srow], MG.SPAN)
                plgpu.wgmma(acc_ref, a, x_smem.at[:, pl.ds(MG.SPAN * j, MG.SPAN)].T)
        else:
            uw = plgpu.load(u_smem, layout=plgpu.Layout.WGMMA, optimized=True)
            srows = [plgpu.load(s_smem.at[j], layout=plgpu.Layout.WGMMA.reduce(1))
                     for j in range(tk // MG.SPAN)]
            plgpu.wgmma(acc_ref, _decode_tile(uw, srows, tk), x_smem.T)
        if serial and acc_ref is not accs[-1]:
            plgpu.wgmma_wait(0)


def stage_sizes(nw: int, mp: int, tk: int) -> list[int]:
    """Bytes of one K pipeline stage, per stream in :func:`_k_loop`'s order: the codes of each
    of ``nw`` weight tiles, their scales, then the [mp, tk] bf16 x tile."""
    return [ROWS * tk // 2] * nw + [tk // MG.SPAN * ROWS * 4] * nw + [mp * tk * 2]


def probe_pad(nw: int, mp: int, tk: int, steps: int, keep: slice = slice(None)) -> int:
    """Bytes of shared memory a stream probe's K pipeline adds (:data:`_DIAG_CTAS`) so that its
    stages (``keep``: the streams it copies of codes, scales and x) and the pad with the CTA's
    1 KB reserve exceed 1 / (``_DIAG_CTAS`` + 1) of an SM's; 0 without a stream probe, without
    the cap, or where the stages are that large already."""
    if _DIAG not in STREAM_PROBES or not _DIAG_CTAS:
        return 0
    stages = steps * sum(stage_sizes(nw, mp, tk)[keep])
    return max(0, _SMEM_PER_SM // (_DIAG_CTAS + 1) + 1 - 1024 - stages)


def _k_loop(u_rows, s_rows, x_rows, *, k, mp, tk, steps, chunked=False, serial=False):
    """One warpgroup's K loop: [64, K / 8] code words, [K / 64, 64] scale words and the [mp, K]
    x rows (GMEM refs) -> the f32 [64, mp] product (WGMMA layout). ``u_rows`` / ``s_rows`` may be
    tuples of weights that share the x tile (the fused gate / up): one pipeline streams them all
    and each step issues one wgmma per weight; then a tuple of products. ``serial``: wait for
    each weight's wgmma before decoding the next (one decoded A tile live at a time)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    multi = isinstance(u_rows, tuple)
    us, ss = (u_rows, s_rows) if multi else ((u_rows,), (s_rows,))
    nw = len(us)
    x_tr = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))

    def compute(*acc_refs):
        def step(_, *smem):
            if _DIAG in STREAM_PROBES:  # timing probe: the TMA streams, nothing computed
                return
            _mma_weights(acc_refs, smem[:nw], smem[nw:2 * nw], smem[2 * nw], tk=tk,
                         serial=serial, chunked=chunked)
            plgpu.wgmma_wait(0)

        specs = [*[plgpu.BlockSpec((ROWS, tk // 8), lambda kk: (0, kk))] * nw,
                 *[plgpu.BlockSpec((tk // MG.SPAN, ROWS), lambda kk: (kk, 0))] * nw,
                 plgpu.BlockSpec((mp, tk), lambda kk: (0, kk), transforms=x_tr)]
        refs = [*us, *ss, x_rows]
        keep = {"weights_only": slice(0, 2 * nw), "x_only": slice(2 * nw, None)}.get(
            _DIAG, slice(None))  # (the stream probes that leave a stream out)
        pipeline = functools.partial(
            plgpu.emit_pipeline(step, grid=(k // tk,), max_concurrent_steps=steps,
                                in_specs=specs[keep]), *refs[keep])
        pad = probe_pad(nw, mp, tk, steps, keep)
        if pad:
            pl.run_scoped(lambda _: pipeline(), plgpu.SMEM((pad,), jnp.uint8))
        else:
            pipeline()
        return tuple(a[...] for a in acc_refs)

    accs = pl.run_scoped(compute, *[plgpu.ACC((ROWS, mp), jnp.float32)] * nw)
    return accs if multi else accs[0]


# Where the dense kernel's f32 output tile lives in shared memory: True, a scope opened after
# the K pipeline's (Mosaic reuses the stages' memory for it); False, a kernel-wide scratch beside
# the stages (sessions 14-27). Read at trace time. Session 28 (28b, H200, 8192 x 28672, side by
# side, identical outputs): M = 32 49.6 vs 52.5 us (2 stages + the 8 KB tile: 4 CTAs per SM
# instead of 3), M = 1 / 8 / 64 within 1%. Hence the default.
DENSE_OUT_SCOPED = True
# How the dense kernel stores its f32 partials: False, the [64, Mp] tile through shared memory by
# TMA into [splits, N, Mp] (XLA's epilogue then sums, slices M columns and transposes: 1.7-2.1
# us at M <= 8, session 26); True, from registers straight into [splits, M, N], the M token rows
# only (Mp where x is padded; predicated 4-byte stores), so the epilogue is an elementwise sum
# without a transpose; None, :func:`default_token_major`. Read at trace time.
DENSE_TOKEN_MAJOR: bool | None = None
# The dense K step with tiles > 1: as SERIAL_TILES for the grouped kernel. Read at trace time.
# Session 28 (8192 x 28672, H200): M = 64, tk 128, 3 stages: 73.7-74.1 us overlapped against
# 76.6-77.7 serial; M = 1 / 8: 46.4 / 46.8 against 49.5 / 49.9. Hence False.
DENSE_SERIAL_TILES = False


def default_token_major(mp: int) -> bool:
    """Whether the dense kernel stores token-major partials (:data:`DENSE_TOKEN_MAJOR`) for x
    padded to ``mp`` rows: up to 32. Session 29 (29a, H200, 8192 x 28672, device time, two runs
    side by side, bit-identical): M = 1 40.3 / 40.5 us against 40.7 / 40.8, M = 3 40.0 / 40.2
    against 42.4 / 42.4, M = 8 40.7 / 40.8 against 40.9 / 41.2, M = 13 45.3 / 45.3 against
    47.8 / 47.9, M = 32 48.2 / 48.2 against 48.7 / 48.1; M = 64 (2 tiles) 75.5 / 75.7 against
    74.5 / 74.0: the predicated stores of 64 tokens cost more than the transpose they save."""
    return mp <= 32


def _store_partial_rows(acc, o_gmem, j, n0, m: int):
    """inline_mgpu: the f32 [64 weight rows, mp tokens] accumulator (WGMMA layout) of weight rows
    n0.. into ``o_gmem[j, token, n0 + row]`` ([splits, M, N], token-major) for the tokens < ``m``
    only: predicated 4-byte stores (a warp's store covers 8 consecutive weight rows per token)."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import arith, memref, vector
    from jax.experimental.mosaic.gpu import fragmented_array as fa
    from jax.experimental.mosaic.gpu import utils as mu
    from jax.experimental.pallas import mosaic_gpu as plgpu

    splat = plgpu.Layout.WG_SPLAT(shape=())

    @plgpu.inline_mgpu(arg_types=(plgpu.Layout.WGMMA, plgpu.RefType(), splat, splat))
    def store(ctx, acc_fa, out, j_fa, n0_fa):
        del ctx
        index = ir.IndexType.get()
        jj, base = splat_value(j_fa), splat_value(n0_fa)
        mm = arith.constant(index, m)
        stores = []
        for (r, col), reg in zip(fa.WGMMA_LAYOUT.thread_idxs(acc_fa.shape),
                                 acc_fa.registers.flat):
            for i in range(ir.VectorType(reg.type).shape[0]):
                c = arith.addi(col, arith.constant(index, i))
                stores.append((arith.cmpi(arith.CmpIPredicate.slt, c, mm),
                               vector.extract(reg, [], [i]), [jj, c, arith.addi(base, r)]))
        for ok, v, at in stores:
            with mu.when(ok):
                memref.store(v, out, at)

    store(acc, o_gmem, j, n0)


@functools.partial(jax.jit, static_argnames=("tk", "steps", "chunked", "splits", "mp", "tiles",
                                             "serial", "scoped", "token_major"))
def _matmul_t(codes, scales, xp, *, tk, steps, chunked=False, splits=1, mp=None, tiles=1,
              serial=False, scoped=True, token_major=False):
    """out^T partials [splits, N, Mp] f32 (values * 2**-SHIFT, no global scale; their sum over
    axis 0 is the product) for x [M, K], M <= Mp (``mp``, None: M; a multiple of 8): CTA (n, j)
    takes ``tiles`` adjacent 64-row weight tiles (one pipeline streams them against one x tile;
    ``serial``: one decoded tile live at a time, else the next decodes under the previous
    tile's wgmma) and the j-th of ``splits`` equal K ranges. Columns M.. of the partials come
    from TMA's out-of-bounds fill of x's rows past M and are not part of the product.
    ``scoped``: :data:`DENSE_OUT_SCOPED`. ``token_major``: the partials [splits, M', N] instead
    for x's M' rows (M, or Mp where the wrapper padded x), stored from registers
    (:data:`DENSE_TOKEN_MAJOR`)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    n, k8 = codes.shape
    k, mp = 8 * k8, mp or xp.shape[0]
    if mp % 8 or not xp.shape[0] <= mp <= 256:
        raise ValueError(f"mp={mp} must be a multiple of 8 in [M={xp.shape[0]}, 256]")
    kc = k // splits  # K per CTA
    if k % splits or kc % tk or tk % MG.SPAN:
        raise ValueError(f"K={k} must split into {splits} ranges that are multiples of tk={tk}, "
                         f"tk a multiple of {MG.SPAN}")
    if tiles < 1 or n % (ROWS * tiles):
        raise ValueError(f"N={n} must be a multiple of {ROWS} x tiles={tiles} (tiles >= 1)")
    rows_cta = ROWS * tiles

    def body(u_gmem, s_gmem, x_gmem, o_gmem, *scratch):
        ni = jax.lax.axis_index("n")
        ji = jax.lax.axis_index("k")
        row_sets = [pl.ds((ni * tiles + t) * ROWS, ROWS) for t in range(tiles)]
        accs = _k_loop(tuple(u_gmem.at[r, pl.ds(ji * (kc // 8), kc // 8)] for r in row_sets),
                       tuple(s_gmem.at[pl.ds(ji * (kc // MG.SPAN), kc // MG.SPAN), r]
                             for r in row_sets),
                       x_gmem.at[:, pl.ds(ji * kc, kc)], k=kc, mp=mp, tk=tk, steps=steps,
                       chunked=chunked, serial=serial)

        def store(o_smem):
            for t, acc in enumerate(accs):
                o_smem[t * ROWS:(t + 1) * ROWS] = acc
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(o_smem, o_gmem.at[ji, pl.ds(ni * rows_cta, rows_cta), :])
            plgpu.wait_smem_to_gmem(0)

        if token_major:
            for t, acc in enumerate(accs):
                _store_partial_rows(acc, o_gmem, ji, (ni * tiles + t) * ROWS, m)
        elif scoped:
            pl.run_scoped(store, plgpu.SMEM((rows_cta, mp), jnp.float32))
        else:
            store(*scratch)

    m = xp.shape[0]
    smem_out = not (scoped or token_major)
    return plgpu.kernel(
        body, out_type=jax.ShapeDtypeStruct((splits, m, n) if token_major else (splits, n, mp),
                                            jnp.float32),
        grid=(n // rows_cta, splits), grid_names=("n", "k"),
        scratch_types=[plgpu.SMEM((rows_cta, mp), jnp.float32)] if smem_out else [],
    )(codes, scales, xp)


# Aggregate rate of one SM (% of copy bandwidth) with c of the dense kernel's CTAs resident,
# measured at M = 8 (session 20, gpu_session20a.sh, H200): N = 8448 / 16896 / 25344 / 33792
# (K 8192) give exactly 1 / 2 / 3 / 4 CTAs per SM. The per-SM issue rate, not the CTA, is the
# limit: at 8192 x 28672 (3.39 CTAs per SM) the SMs holding 4 CTAs set the time.
SM_RATE = {1: 47.4, 2: 63.9, 3: 74.2, 4: 77.3}
SPLIT_COST = 0.03  # per extra split: shorter CTAs and the partial sum (20a: splits 4 vs 2)
_SMEM_PER_SM = 233472  # bytes a Hopper SM gives its CTAs (ncu: 233.47 KB), 1 KB each reserved


def dense_smem(mp: int, tk: int, steps: int, tiles: int = 1,
               scoped: bool | None = None) -> int:
    """Shared memory of one dense-kernel CTA with its 1 KB reserve: the pipeline stages of codes,
    scales (of ``tiles`` weight tiles) and x, and the f32 output tiles. ``scoped`` (None:
    :data:`DENSE_OUT_SCOPED`): the output's scope follows the pipeline's and reuses its memory
    (Pallas Mosaic GPU allocates scoped shared memory as a stack), so the larger of the two
    counts; else the sum (20a's resource dump: 55296 + 1024 at mp 8, tk 256, 4 stages)."""
    scoped = DENSE_OUT_SCOPED if scoped is None else scoped
    stage = sum(stage_sizes(tiles, mp, tk))
    out = tiles * ROWS * mp * 4
    return (max(steps * stage, out) if scoped else steps * stage + out) + 1024


def dense_ctas_per_sm(mp: int, tk: int, steps: int) -> int:
    """CTAs of the dense kernel one SM holds, by shared memory (:func:`dense_smem`), capped at 4
    (registers allow 5 at M = 8; SM_RATE stops at 4)."""
    return max(1, min(4, _SMEM_PER_SM // dense_smem(mp, tk, steps)))


def dense_tk(kc: int, mp: int, steps: int, tk: int = 256, tiles: int = 1) -> int:
    """K columns per pipeline step: the largest of ``tk``, 128, 64 (at most ``tk``) that divides
    the CTA's K range ``kc`` and whose stages (of ``tiles`` weight tiles) fit one SM's shared
    memory (at mp > 208 and 2 stages, tk 256 does not); a ValueError naming the sizes when none
    does."""
    for t in (tk, 128, MG.SPAN):
        if t <= tk and kc % t == 0 and dense_smem(mp, t, steps, tiles) <= _SMEM_PER_SM:
            return t
    raise ValueError(f"no K tile <= {tk} divides K / splits = {kc} and fits {steps} stages of "
                     f"{mp} rows and {tiles} weight tiles in {_SMEM_PER_SM} bytes of shared "
                     f"memory")


def default_splits(n: int, k: int, mp: int, tk: int, steps: int, sms: int | None = None) -> int:
    """K splits per 64 weight rows for the dense kernel: the s in {1, 2, 4} (K / s a multiple of
    tk, at least 4 pipeline steps) whose busiest SM finishes first, in a model of SM_RATE: CTAs
    are dealt to the SMs evenly (the most loaded gets ceil(CTAs / SMs)), run in rounds of the
    resident count, a round of c CTAs at SM_RATE[c]; plus SPLIT_COST per extra split. At 8192 x
    28672 (M <= 8) it picks 2 (20a: 1.12x the unsplit kernel, 75% of copy at M = 8)."""
    from pallas_kernels import matmul_triton

    sms = sms or matmul_triton._sm_count()
    c = dense_ctas_per_sm(mp, tk, steps)
    tiles = n // ROWS

    def cost(s):
        per_sm = -(-tiles * s // sms)
        full, rest = divmod(per_sm, c)
        t = full * c / SM_RATE[c] + (rest / SM_RATE[rest] if rest else 0.0)
        return t / s * (1 + SPLIT_COST * (s - 1))

    if mp > 32:  # M = 64 (2 stages, 20b): 1 split 78.6 us, 2 81.1, 4 81.8: not this model's
        return 1
    ok = [s for s in (1, 2, 4) if k % (s * tk) == 0 and k // (s * tk) >= 4] or [1]
    return min(ok, key=cost)


def default_steps(mp: int) -> int:
    """Pipeline stages of the dense kernel: 4 up to 16 rows, else 2. 20b at 8192 x 28672 with
    2 splits: M = 32 56.2 -> 52.6 us with 2 stages instead of 4 (the x tile is 16-32 KB per
    stage); 33-64 rows see :func:`default_dense_tk`."""
    return 4 if mp <= 16 else 2


def default_dense_tk(mp: int) -> int:
    """K per pipeline step of the dense kernel: 256 up to 64 rows, else 128.
    Session 43 (H100, device time, 2 tiles, 1 split, bit-identical) measured 33-64 rows at
    tk 256 with 2 stages against session 28's tk 128 with 3 stages, the default until then:
    - 8192 x 28672: M = 33 62.1 vs 79.0 us, 40 59.9 vs 78.4, 48 63.5 / 63.1 vs 81.7 / 81.9,
      56 67.7 vs 80.1, 64 75.7 / 75.3 / 75.5 vs 82.2 / 81.8 / 81.0 (1.08-1.31x);
    - 2048 x 8192: 13.3-14.0 vs 14.7-15.7 us.
    Session 28 (H200) had compared 2 tiles only at tk 128 once the next tile's decode overlapped
    the previous wgmma. Above 64 rows: M = 200 156.0 us at 128 against 198.9 at 256 (session 28,
    H200). :func:`dense_tk` may take a smaller one where K needs it."""
    return 256 if mp <= 64 else 128


def default_dense_tiles(n: int, mp: int) -> int:
    """64-row weight tiles per dense CTA, sharing one x tile: 2 for 33-64 rows (N a multiple of
    128), else 1 (tk and stages for them: :func:`default_dense_tk`). Session 28 (8192 x 28672,
    H200, device time, bit-identical to 1 tile): at M =
    64, 2 tiles with tk 128, 3 stages and the next tile decoded under the previous wgmma took
    73.7 / 73.9 / 74.1 us in three runs against 80.0 / 80.4 / 80.5 for the 1-tile default (tk
    256, 2 stages): 1.08x; at M = 48 (28e) 65.8 us against 72.0 with 1 tile (tk 128, 3 stages);
    at M = 1 / 8 2 tiles were 11-16% slower, at M = 32 not faster, at M = 200 237 us against
    154."""
    return 2 if 32 < mp <= 64 and n % (2 * ROWS) == 0 else 1


def fp4_matmul_mgpu(x: jax.Array, w: MgpuWeights, *, tk: int | None = None,
                    steps: int | None = None,
                    chunked: bool = False, splits: int | None = None, tiles: int | None = None,
                    row_scale: jax.Array | None = None, backend: str = "auto") -> jax.Array:
    """x [M, K] bf16 @ W [K, N] (NVFP4, :func:`prepare_mgpu`) -> [M, N] bf16, f32 accumulation;
    equals :func:`fp4_matmul_mgpu_reference` up to f32 summation order. ``splits`` > 1 splits K
    over that many CTAs per 64 weight rows (their f32 partials summed by XLA with the output's
    transpose, without it when token-major: :data:`DENSE_TOKEN_MAJOR`); None: :func:`default_splits`;
    ``steps`` None: :func:`default_steps`; ``tk`` None: :func:`default_dense_tk`.
    ``tiles``: adjacent 64-row weight tiles per CTA, streamed against one x tile (x is read from
    L2 once per tiles x 64 rows); None: :func:`default_dense_tiles`.
    ``row_scale`` [M, 1] f32 multiplies the f32 result rows (an activation's global scale).
    ``backend="auto"``: the kernel on a GPU, the reference elsewhere; ``"mgpu"`` forces the
    kernel."""
    k, n = w.shape
    if x.ndim != 2 or x.shape[1] != k:
        raise ValueError(f"x must be [M, {k}], got {x.shape}")
    m = x.shape[0]
    if row_scale is not None and row_scale.shape != (m, 1):
        raise ValueError(f"row_scale must be [{m}, 1], got {row_scale.shape}")
    mp = max(8, -(-m // 8) * 8)
    steps = default_steps(mp) if steps is None else steps
    tk = default_dense_tk(mp) if tk is None else tk
    if splits is None:
        splits = default_splits(n, k, mp, min(tk, k), steps)
    if splits < 1 or k % (splits * MG.SPAN):
        raise ValueError(f"splits={splits}: K={k} must split into multiples of {MG.SPAN}")
    tiles = default_dense_tiles(n, mp) if tiles is None else tiles
    if tiles < 1 or n % (ROWS * tiles):
        raise ValueError(f"tiles={tiles}: N={n} must be a multiple of {ROWS} x tiles")
    if backend == "reference" or (backend == "auto" and jax.default_backend() != "gpu"):
        return fp4_matmul_mgpu_reference(x, w, row_scale)
    if mp > 256:
        raise ValueError(f"M={m}: the Mosaic GPU FP4 matmul takes at most 256 rows")
    # x is not padded to mp rows where TMA can fill the rows past M (session 26: the pad was a
    # launch of its own, ~2% of the call at M = 1); output column j depends on x row j alone.
    # TMA's tiled copy takes a dimension of fewer than 8 rows or a multiple of 8: other M pad.
    xb = x.astype(jnp.bfloat16)
    if m > 8 and m % 8:
        xb = jnp.pad(xb, ((0, mp - m), (0, 0)))
    token_major = default_token_major(mp) if DENSE_TOKEN_MAJOR is None else DENSE_TOKEN_MAJOR
    out_t = _matmul_t(w.codes, w.scales, xb,
                      tk=dense_tk(k // splits, mp, steps, tk, tiles), steps=steps,
                      chunked=chunked,
                      splits=splits, mp=mp, tiles=tiles, serial=DENSE_SERIAL_TILES,
                      scoped=DENSE_OUT_SCOPED, token_major=token_major)
    scale = w.global_scale * (2.0 ** SHIFT)
    if token_major:  # [splits, M or Mp (x padded), N]
        out = jnp.sum(out_t, axis=0)[:m] * scale
    else:  # [splits, N, Mp]
        out = jnp.sum(out_t, axis=0)[:, :m].T * scale
    return (out if row_scale is None else out * row_scale).astype(jnp.bfloat16)


# --- grouped (MoE) version ----------------------------------------------------------------------
#
# Tokens sorted by expert (``group_sizes``), as ``fp4_matmul.fp4_grouped_matmul``. Each CTA
# (expert e, 64 x nt weight rows: ``default_tiles``; of both weights for the fused gate / up)
# loops over its group in chunks of mp tokens, each read either
# straight from the sorted x as mp + 8 rows from an 8-aligned start (the "rows" layout: what TMA
# into the swizzled tile needs; the extra rows are other tokens: computed, never stored) or, the
# default "aligned" layout, as mp rows of a copy of x with each expert's rows at an 8-aligned
# offset (``aligned_rows``, session 20), and stores its own tokens' rows, scaled
# and rounded to bf16, straight at their sorted positions of the [M, N] output
# (``_store_rows``), so no two CTAs write the same element. The kernel derives its windows from
# the group sizes and their cumsum in its scalar code (``program_plan``, ``chunk_columns``).
# Session 17 (``NOTES_matmul.md``): 1.13-1.19x the earlier padded f32 output + wrapper gather
# (its expert lookup and scale gather in XLA: 212 launches per 4-layer decode step, now 202).


def fp4_grouped_matmul_mgpu_reference(x, w: MgpuWeights, group_sizes,
                                      row_scale=None) -> jax.Array:
    gs = group_sizes.astype(jnp.int32)
    out = jax.lax.ragged_dot(x.astype(jnp.float32), _unscaled_f32(w), gs,
                             preferred_element_type=jnp.float32,
                             precision=jax.lax.Precision.HIGHEST)
    from pallas_kernels.fp4_matmul import expert_rows

    e, m = w.codes.shape[0], out.shape[0]  # each row's expert's global scale, on the accumulator
    scale = expert_rows(jnp.broadcast_to(w.global_scale.reshape(-1), (e,)), gs, m)
    if row_scale is not None:
        scale = scale * row_scale.astype(jnp.float32).reshape(m, 1)
    return (out * scale).astype(jnp.bfloat16)


def _cumsum_small(v):
    """Inclusive cumsum of a short vector (the experts) as one triangular masked sum: XLA fuses
    it with its neighbours, while ``jnp.cumsum`` is a reduce-window kernel of its own (session
    15's profile: ~7.6 us per layer in this bookkeeping's five small kernels)."""
    i = jnp.arange(v.shape[0])
    return jnp.sum(jnp.where(i[None, :] <= i[:, None], v[None, :], 0), axis=1, dtype=v.dtype)


def splat_value(x, int_type=None):
    """Inside ``inline_mgpu``: a scalar argument (a splat FragmentedArray, arg type
    ``plgpu.Layout.WG_SPLAT(shape=())``) -> its one register, an f32 as it is, an integer as an
    MLIR index (or as ``int_type``, e.g. i32)."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import arith, vector

    v = x.registers.flat[0]
    if isinstance(v.type, ir.VectorType):
        v = vector.extract(v, [], [0])
    if v.type == ir.F32Type.get():
        return v
    t = ir.IndexType.get() if int_type is None else int_type
    return v if v.type == t else arith.index_cast(t, v)


def _store_rows(acc, o_gmem, rs_gmem, scale, t0, lo, hi, zstart, n0, m):
    """inline_mgpu: the f32 [64 weight rows, R tokens] accumulator (WGMMA layout) of one chunk,
    columns ``lo <= i < hi`` only, times ``scale`` (and ``rs_gmem[t0 + i]`` [M] if given),
    rounded to bf16, straight into ``o_gmem[t0 + i, n0 + row]`` ([M, N], token-major); columns from
    ``zstart`` on store 0 (tokens past the groups' sum). Scalar global stores: a warp's store
    covers 4 tokens x 8 consecutive weight rows (16 bytes each). ``acc`` and ``scale`` as pairs
    (gate, up): each product scaled and rounded to bf16 as above, then SwiGLU in f32,
    ``g * (1 / (1 + exp(-g))) * u`` (XLA's ``silu(g) * u`` on the bf16 values), rounded to bf16."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import arith, memref, vector
    from jax._src.lib.mlir.dialects import math as mlir_math
    from jax.experimental.mosaic.gpu import fragmented_array as fa
    from jax.experimental.mosaic.gpu import utils as mu
    from jax.experimental.pallas import mosaic_gpu as plgpu

    accs, scales = (acc, scale) if isinstance(acc, tuple) else ((acc,), (scale,))
    nw = len(accs)
    if nw not in (1, 2):
        raise ValueError(f"_store_rows takes one product or a (gate, up) pair, got {nw}")
    splat = plgpu.Layout.WG_SPLAT(shape=())
    refs = (plgpu.RefType(),) * (1 if rs_gmem is None else 2)

    @plgpu.inline_mgpu(arg_types=(*[plgpu.Layout.WGMMA] * nw, refs, *([splat] * (5 + nw))))
    def store(ctx, *args):
        del ctx
        acc_fas, out_refs, scalars = args[:nw], args[nw], args[nw + 1:]
        index = ir.IndexType.get()
        bf16, f32 = ir.BF16Type.get(), ir.F32Type.get()
        gs = [splat_value(x) for x in scalars[:nw]]
        t0_, lo_, hi_, z_, n0_ = (splat_value(x) for x in scalars[nw:])
        zero = arith.constant(bf16, 0.0)
        one = arith.constant(f32, 1.0)
        last = arith.constant(index, m - 1)
        # every value (and its row-scale load, clamped into [0, M): a column past M is never
        # stored) before the first branch, so the loads overlap; then predicated stores
        stores = []
        idxs = fa.WGMMA_LAYOUT.thread_idxs(acc_fas[0].shape)
        for (r, col), *regs in zip(idxs, *(a.registers.flat for a in acc_fas)):
            for i in range(ir.VectorType(regs[0].type).shape[0]):
                c = arith.addi(col, arith.constant(index, i))
                t = arith.addi(t0_, c)
                rs = None if len(out_refs) == 1 else memref.load(out_refs[1],
                                                                 [arith.minsi(t, last)])
                vals = []
                for g, reg in zip(gs, regs):
                    sc = g if rs is None else arith.mulf(g, rs)
                    vals.append(arith.truncf(bf16, arith.mulf(vector.extract(reg, [], [i]), sc)))
                v = vals[0]
                if nw == 2:  # SwiGLU on the bf16 products, in f32
                    gv, uv = (arith.extf(f32, x) for x in vals)
                    sig = arith.divf(one, arith.addf(one, mlir_math.exp(arith.negf(gv))))
                    v = arith.truncf(bf16, arith.mulf(arith.mulf(gv, sig), uv))
                v = arith.select(arith.cmpi(arith.CmpIPredicate.sge, c, z_), zero, v)
                ok = arith.andi(arith.cmpi(arith.CmpIPredicate.sge, c, lo_),
                                arith.cmpi(arith.CmpIPredicate.slt, c, hi_))
                stores.append((ok, v, t, arith.addi(n0_, r)))
        for ok, v, t, nn in stores:
            with mu.when(ok):
                memref.store(v, out_refs[0], [t, nn])

    refs_in = (o_gmem,) if rs_gmem is None else (o_gmem, rs_gmem)
    store(*accs, refs_in, *scales, t0, lo, hi, zstart, n0)


# Whether the grouped wrapper copies x with read_pad rows appended (True, sessions 14-18) or
# passes it as it is (False) and lets TMA's out-of-bounds fill supply the last chunks'
# read-ahead rows. Session 19 (19g, H200, the four 30B decode shapes, side by side): the same
# relative errors, the call 1.8-3.6 us faster (36.3 -> 34.5, 44.6 -> 40.9, 40.3 -> 38.4,
# 48.7 -> 46.8 us), the kernel alone unchanged. Read at trace time.
GROUPED_X_PAD = False


def read_pad(m: int, mp: int) -> int:
    """Rows the wrapper appends to the M sorted x rows: a chunk reads mp + 8 rows from an
    8-aligned start at most mp + 7 rows before M, and TMA tiles come in 8 rows."""
    return -(-(m + mp + 8) // 8) * 8 - m


def appended_rows(m: int, mp: int, pad: bool) -> int:
    """Rows the grouped wrapper appends to the M sorted x rows: :func:`read_pad` with ``pad``;
    without, only what TMA's tiled x needs (a multiple of 8 rows, at least one chunk's mp + 8)
    and the chunks' read-ahead past M comes from TMA's out-of-bounds fill."""
    return read_pad(m, mp) if pad or m < mp + 8 else -m % 8


def program_plan(size, end, last, m, mp):
    """What the program(s) of one expert of the grouped kernel cover, from its group size and
    group end (inclusive cumsum): ``off`` (its first sorted row), ``start8`` (off rounded down to
    8: chunk c reads rows start8 + c mp .. + mp + 8, the 8-aligned start TMA into the swizzled x
    tile needs), ``rows`` (the group size; the ``last`` expert also covers the rows past the
    groups' sum, M - off, which it stores as 0; clipped to [0, M - off], so sizes summing past M
    never store out of bounds) and the number of chunks. Scalars (the kernel's scalar code) or
    arrays (:func:`_grouped_direct_emulated`, the CPU tests): one formula for both."""
    off = end - size
    rows = jnp.maximum(jnp.where(last, m - off, jnp.minimum(size, m - off)), 0)
    return off, jnp.bitwise_and(off, -8), rows, (rows + mp - 1) // mp


def chunk_columns(off, start8, rows, total, c, mp, aoff=None):
    """Chunk c's (x0, t0, lo, hi, zstart): the first x row it reads, the sorted row of its tile
    column 0 (:func:`_store_rows` stores column i at row t0 + i), its stored columns [lo, hi)
    (its own tokens) and the first column that stores 0 (tokens past the groups' sum
    ``total``). Sorted x (``aoff`` None): the chunk reads mp + 8 rows from start8 + c mp, so
    x0 = t0 and lo = off - start8. The aligned x (:func:`aligned_rows`: the expert's rows from
    its 8-aligned offset ``aoff``): mp rows from aoff + c mp, lo = 0. Scalars or arrays, as
    :func:`program_plan`."""
    if aoff is None:
        lo = off - start8
        x0 = start8 + c * mp
        return x0, x0, lo, lo + jnp.minimum(mp, rows - c * mp), total - x0
    t0 = off + c * mp
    return aoff + c * mp, t0, 0 * t0, jnp.minimum(mp, rows - c * mp), total - t0


# The grouped kernel's x: "rows" (the sorted rows as they are; a chunk reads mp + 8 of them from
# an 8-aligned start) or "aligned" (each expert's rows copied to an 8-aligned offset by the
# wrapper, :func:`aligned_rows`; a chunk reads mp rows: a third less x per step at mp 16, and
# mp 8 possible). Read at trace time.
# Session 20 (20d / 20e, H200, side by side): the same outputs bit for bit; the kernel alone
# 4-7% faster at mp 16 (and 9-14% at mp 8 with 216 rows); the call alone 6-8 us slower (its
# gather of M + 7 E rows is an op of its own there); the 4-layer 30B FP4 decode step at 128K
# (mp 8) 4.11 vs 4.20 ms, at 32K 4.48 vs 4.57 and 4.42 vs 4.38 ms (within run-to-run spread):
# in the model the gather fuses with the MoE dispatch's. Hence the default until session 45.
# Session 45 (gpu_session45c.sh / 45d.sh, H100, device time, outputs bit-identical): since session
# 22's one-launch bookkeeping the rows kernel is as fast as the aligned one (2048 x 768: 41.8 /
# 47.4 us against 42.8 / 48.5 at 256 / 1024 rows; 768 x 2048: 41.9 / 48.3 against 41.9 / 47.5)
# and its call 3.4-8.5 us faster (43.3 / 48.7 against 49.6 / 57.3 us; 768 x 2048 43.7 / 49.3
# against 47.1 / 53.8; at 4096 rows the aligned call, mp 56, spends 18.3 us outside its 64.9 us
# kernel at 2048 x 768): the aligned call's bookkeeping kernel and x gather cost more than the 8
# extra rows a chunk reads. Hence "rows". In the model the aligned gather fused with the
# dispatch's, so there the gain is the bookkeeping launch alone (the 4-layer step's A/B:
# bench_rollout --grouped_x_layout, gpu_session46a.sh, not yet run).
GROUPED_X_LAYOUT = "rows"
X_LAYOUTS = ("rows", "aligned")

# Whether the MoE gate / up projections with SwiGLU run as one kernel
# (:func:`fp4_grouped_swiglu_mgpu`: one pipeline streams both weights against one x tile, the
# SwiGLU in the epilogue, one [M, F] bf16 store) instead of two grouped calls and an XLA fusion.
# Read at trace time by ``fp4_matmul.fp4_grouped_swiglu`` (the model's gate / up stage).
# Session 21 (21b, H200, 128 experts x 2048 x 768, side by side): bit-identical to the unfused
# stage; the stage 1.089x / 1.084x at 27 / 32 tokens (mp 8; 64.8 vs 70.6 us), 0.997x at 111
# and 128 (mp 16: the fused kernel alone 3.6% slower, the saved wrapper ops even it out),
# 1.056x at 512 (mp 56); the 4-layer 30B FP4 step at 32K 4.43 / 4.36 ms fused vs 4.49 unfused,
# at 128K 4.22 / 4.24 vs 4.22. Hence the default.
FUSED_SWIGLU = True
# The K step of a grouped program with several weight tiles (the fused gate / up pair, or nt > 1
# tiles per program: GROUPED_TILES / default_tiles): False decodes the next tile under the
# previous tile's wgmma (two decoded A tiles live), True waits for each wgmma first (one live).
# Read at trace time.
# Session 21 (21d, H200, ptxas dumps, fused gate / up): 183 / 123 registers at mp 16 (167 / 111
# at mp 8; the unfused kernel 102 / 96); the serial kernel alone 70.6 vs 80.5 us at 888 rows
# (unfused 76.9), the stage 1.115x the unfused one at 27, 111 and 128 tokens, bit-identical; the
# 4-layer 30B FP4 step at 32K 4.28 vs 4.38 ms (21e). Hence the default.
SERIAL_TILES = True
# Weight tiles of 64 rows (N) per grouped program: each program streams nt adjacent tiles of its
# expert (of each weight, fused) against one x tile, so x is read once per nt x 64 rows and a
# program has more weight bytes in flight (with fewer programs). None: :func:`default_tiles`; an
# int overrides it (1 where it does not divide N). Read at trace time.
GROUPED_TILES: int | None = None
# Narrower chunk widths for the grouped kernel (tokens per wgmma, multiples of 8 below the chunk's
# mp + 8 rows, mp on the aligned layout): a chunk whose stored columns end at or below a width
# runs the K loop with the smallest such width (the x tile, the wgmma's N and the store shrink;
# each width is one more K pipeline in the kernel's code, picked per chunk by a branch). () keeps
# one width. At mean groups of ~32 rows (512 decode tokens over 128 experts, mp 56) a chunk
# computes 64 columns for ~36 used. Read at trace time: a call uses those of its widths below
# its chunk's rows (so one setting serves decode and larger groups); the ``widths`` argument
# overrides it and must fit. Session 46 added it; session 48 (gpu_session46b.sh, H200, device
# time, side by side, maxdiff 0) measured (32, 40, 48) at 512 tokens 7.4% faster at 2048 x 768
# (65.3 -> 60.5 us) and 5.5% at 768 x 2048 (67.0 -> 63.3 us), and 9.4% at 1024 tokens, 2048 x
# 768 (118.3 -> 107.2 us, groups of two chunks; maxdiff 0); (40, 48) and (48,) gained less.
# Only mp 56 chunks (64 rows; mean group > 16) have widths below their rows, so decode calls
# (mp 8 / 16) are unchanged.
GROUPED_WIDTHS: tuple[int, ...] = (32, 40, 48)
# Session 50/51 (H100, 512 tokens): a manual-pipeline grouped kernel (CTAs of 3 warpgroups, each
# its own program and K pipeline; tk 128 x 3 stages, 168 registers: the launch cap) was 4-28%
# slower with the chunk widths (65.6 / 83.7 against 62.8 / 65.5 us at 2048 x 768 / 768 x 2048)
# and 39% on the fused pair; its wgmma left in flight across the next decode (``wgmma_wait(1)``)
# was slower still (wgmmas serialized; 1 warpgroup a CTA: 255 registers, spills). Removed in
# session 51 (commit a51d6f2 has it). The same kernel with one wgmma per 64-column span of each
# K step (``GROUPED_CHUNKED``, so the next span decodes under the previous span's wgmma; the
# dense kernel's ``chunked``) stored the default's output bit for bit and was 3-9% slower (512
# tokens: 66.9 / 67.8 against 63.3 / 65.5 us; 128 tokens: 51.5 against 47.4; the pair 117.6
# against 112.1). Removed in session 52 (commit 6255351 has it). A split K pipeline (the
# weights in a ring of 3-4 stages, x in one of 1-2, each ring with its own barriers: deeper
# weight stages within 2 CTAs an SM, ``GROUPED_X_STEPS``) stored the default's output bit for
# bit and was slower at every shape on an H100 (53a, 512 tokens: 65.0-84.6 against 62.9 us at
# 2048 x 768, 79.3-97.6 against 65.4 at 768 x 2048, the pair 136.8 / 139.9 against 111.2); one
# pipeline of 3 / 4 stages at 128 tokens (mp 16, still 2 CTAs an SM) was 5-13% slower than 2.
# Removed in session 53 (commit 20d67ba has it).


def chunk_rows(mp: int, aligned: bool) -> int:
    """The x rows a grouped chunk reads (the wgmma's N without ``widths``): mp on the aligned
    layout, mp + 8 on the rows layout (its tokens start up to 7 rows into an 8-aligned read)."""
    return mp if aligned else mp + 8


def chunk_width(chunk, widths: tuple[int, ...], r: int):
    """The columns a grouped chunk computes: the smallest of ``widths`` (each < r) that holds its
    stored columns [lo, hi), else r. ``chunk`` is :func:`chunk_columns`' (x0, t0, lo, hi,
    zstart), so the kernel and its emulation derive the width from the same tuple. Scalars (the
    kernel) or arrays (the emulation)."""
    hi, w = chunk[3], r
    for wd in sorted(widths, reverse=True):
        w = jnp.where(hi <= wd, wd, w)
    return w


def check_widths(widths, r: int) -> tuple[int, ...]:
    """``widths`` as a sorted tuple of distinct ints, each a multiple of 8 in [8, r); else a
    ValueError naming the bad one."""
    ws = tuple(sorted({int(w) for w in widths}))
    bad = [w for w in ws if w % 8 or not 8 <= w < r]
    if bad:
        raise ValueError(f"grouped chunk widths {bad}: each must be a multiple of 8 in [8, {r}) "
                         f"(a chunk is {r} rows at this mp and layout)")
    return ws


def default_tiles(n: int, n_weights: int) -> int:
    """Weight tiles per grouped program for N output columns and 1 weight (or the fused pair):
    2 for a single weight with at least 32 tiles per expert, else 1. Session 21 (21f, H200, 128
    experts, device time, side by side, bit-identical): the down projection 768 x 2048 with nt 2
    ran its kernel alone 30.3 / 37.8 us against 31.7 / 41.6 at 216 / 888 rows (the call 37.8 /
    45.6 against 39.4 / 49.3 us), nt 4 35.3 / 43.3; the fused 2048 x 768 pair (12 tiles per
    expert and weight) with nt 2 was 11-16% slower. A single 2048 x 768 weight is not measured.
    (N must also be a multiple of 128.)"""
    return 2 if n_weights == 1 and n // ROWS >= 32 and n % (2 * ROWS) == 0 else 1


def aligned_rows(group_sizes, m: int, mp: int):
    """The aligned x layout for M sorted rows: (aends [E], the inclusive cumsum of each expert's
    covered rows (:func:`program_plan`) rounded up to 8; src [MA], the sorted row each aligned
    row copies (rows between groups copy row 0: they reach only columns that are never
    stored)). MA = the bound M + 7 E rounded up to 8, plus mp - 8 so every chunk's read of mp
    rows stays inside (a chunk starts at aoff + c mp with c mp < rows)."""
    e = group_sizes.shape[0]
    ends = _cumsum_small(group_sizes)
    off, _, rows, _ = program_plan(group_sizes, ends, jnp.arange(e) == e - 1, m, mp)
    arows = (rows + 7) & -8
    aends = _cumsum_small(arows)
    ma = -(-(m + 7 * e) // 8) * 8 + mp - 8
    p = jnp.arange(ma)
    ex = jnp.minimum(jnp.sum(aends[None, :] <= p[:, None], axis=1), e - 1)  # expert of row p
    j = p - (aends - arows)[ex]
    src = jnp.where(j < rows[ex], off[ex] + j, 0)
    return aends, jax.lax.optimization_barrier(src)  # computed once, not inside the gather


# The aligned layout's bookkeeping (:func:`aligned_rows` and the groups' cumsum) as one Pallas
# Triton launch on the GPU (True; the CPU's emulation runs it in interpret mode, a CPU lowering
# for cuda takes the XLA ops) or as XLA ops (False). Session 22's profile of the 30B decode
# step (22b): the XLA version ran as four small fusions per layer (5.4 us together) plus their
# launch gaps; the kernel takes 2.65 us, and the 4-layer step at 32K 2.1% less time (22f / 22g:
# 4.22 / 4.24 / 4.19 vs 4.31 / 4.26 / 4.35 ms). Read at trace time.
ALIGNED_ROWS_KERNEL = True
_PLAN_BLOCK = 16  # aligned rows per program of the bookkeeping kernel (22e: 256 took 72 us:
# each program's serial [256, 128] work, not the launch, set the time)


def _plan_kernel(gs_ref, ends_ref, aends_ref, src_ref, *, m, mp, e, ep):
    """One block of :func:`aligned_rows` (and the groups' inclusive cumsum): every program
    rebuilds the per-expert plan from the [ep] padded group sizes (ep >= e, a power of two)
    and writes its _PLAN_BLOCK entries of src; program 0 writes ends and aends."""
    from jax.experimental import pallas as pl

    i = jnp.arange(ep, dtype=jnp.int32)
    real = i < e
    gs = jnp.where(real, gs_ref[...], 0)
    ends = jnp.cumsum(gs)
    off, _, rows, _ = program_plan(gs, ends, i == e - 1, m, mp)
    rows = jnp.where(real, rows, 0)
    arows = (rows + 7) & -8
    aends = jnp.cumsum(arows)
    astart = aends - arows

    @pl.when(pl.program_id(0) == 0)
    def _():
        ends_ref[...] = ends
        aends_ref[...] = aends

    p = pl.program_id(0) * _PLAN_BLOCK + jnp.arange(_PLAN_BLOCK, dtype=jnp.int32)
    below = (aends[None, :] <= p[:, None]) & real[None, :]
    ex = jnp.minimum(jnp.sum(below.astype(jnp.int32), axis=1), e - 1)  # expert of row p
    mine = i[None, :] == ex[:, None]  # one-hot [block, ep]: that expert's plan entries
    pick = lambda v: jnp.sum(jnp.where(mine, v[None, :], 0), axis=1)  # noqa: E731
    j = p - pick(astart)
    src_ref[...] = jnp.where(j < pick(rows), pick(off) + j, 0)


def aligned_rows_kernel(group_sizes, m: int, mp: int, *, interpret: bool = False):
    """(ends, aends, src): the groups' inclusive cumsum and :func:`aligned_rows`, the same int32
    values, from one Pallas Triton launch (``interpret``: on the CPU, the tests)."""
    from jax.experimental import pallas as pl

    e = group_sizes.shape[0]
    ep = max(16, 1 << (e - 1).bit_length())
    ma = -(-(m + 7 * e) // 8) * 8 + mp - 8
    nb = -(-ma // _PLAN_BLOCK)
    gs = jnp.pad(group_sizes.astype(jnp.int32), (0, ep - e))
    vec = pl.BlockSpec((ep,), lambda b: (0,))
    ends, aends, src = pl.pallas_call(
        functools.partial(_plan_kernel, m=m, mp=mp, e=e, ep=ep),
        grid=(nb,), in_specs=[vec],
        out_specs=[vec, vec, pl.BlockSpec((_PLAN_BLOCK,), lambda b: (b,))],
        out_shape=[jax.ShapeDtypeStruct((ep,), jnp.int32)] * 2
        + [jax.ShapeDtypeStruct((nb * _PLAN_BLOCK,), jnp.int32)],
        interpret=interpret, name="grouped_aligned_rows",
    )(gs)
    return ends[:e], aends[:e], src[:ma]


def _weight_tuple(a):
    return a if isinstance(a, tuple) else (a,)


def _grouped_weights(codes, scales, gscale, tk):
    """The grouped kernels' weight arguments as tuples (one weight or the (gate, up) pair) and
    (E, N, K), after checking that tk tiles K and that a pair's weights share one shape."""
    codes, scales, gscale = _weight_tuple(codes), _weight_tuple(scales), _weight_tuple(gscale)
    e, n, k8 = codes[0].shape
    if 8 * k8 % tk or tk % MG.SPAN:
        raise ValueError(f"K={8 * k8} must be a multiple of tk={tk}, tk a multiple of {MG.SPAN}")
    if any(c.shape != codes[0].shape for c in codes):
        raise ValueError(f"gate and up weights differ in shape: {[c.shape for c in codes]}")
    return codes, scales, gscale, (e, n, 8 * k8)


@functools.partial(jax.jit, static_argnames=("mp", "tk", "steps", "m", "scaled", "aligned",
                                             "serial", "nt", "widths"))
def _grouped_direct(codes, scales, x_sorted, group_sizes, ends, gscale, row_scale, aends=None,
                    *, mp, tk, steps, m, scaled, aligned=False, serial=False, nt=1, widths=()):
    """out [M, N] bf16: each program (expert e, 64 x ``nt`` weight rows) loops over its chunks
    (:func:`program_plan`) and stores its tokens' rows, times ``gscale[e] * 2**SHIFT`` (and
    ``row_scale`` [M] if ``scaled``), straight at their sorted positions
    (:func:`chunk_columns`). x_sorted [M + :func:`read_pad`, K] (or, ``aligned``, the aligned
    x of :func:`aligned_rows` with its ``aends``); ``ends`` the inclusive cumsum of the
    groups. ``codes``, ``scales`` and ``gscale`` as (gate, up) pairs: one pipeline streams both
    weights' tiles against one x tile and the program stores ``silu(x gate) * (x up)``
    (:func:`_store_rows`). ``nt``: adjacent 64-row tiles per program (of each weight), sharing
    the x tile; ``serial``: one decoded tile live at a time (:func:`_k_loop`); ``widths``:
    narrower chunk widths (:func:`chunk_width`), one K pipeline each, picked per chunk."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    codes, scales, gscale, (e, n, k) = _grouped_weights(codes, scales, gscale, tk)
    nw, r = len(codes), chunk_rows(mp, aligned)
    if nt < 1 or n % (ROWS * nt):
        raise ValueError(f"N={n} must be a multiple of {ROWS} x nt={nt} (nt >= 1)")
    aends = ends if aends is None else aends  # (a placeholder the rows layout never reads)
    widths = check_widths(widths, r)

    def body(*refs):
        u_refs, s_refs, g_refs = refs[:nw], refs[nw:2 * nw], refs[2 * nw:3 * nw]
        x_gmem, gs_gmem, ends_gmem, rs_gmem, ae_gmem, o_gmem = refs[3 * nw:]
        ei = jax.lax.axis_index("e")
        ni = jax.lax.axis_index("n")
        n0s = [(ni * nt + j) * ROWS for j in range(nt)]  # the program's tiles' first rows
        off, first8, nrows, nchunks = program_plan(gs_gmem[ei], ends_gmem[ei], ei == e - 1, m,
                                                   mp)
        aoff = ae_gmem[ei] - jnp.bitwise_and(nrows + 7, -8) if aligned else None
        total = ends_gmem[e - 1]
        scale = tuple(g[ei] * 2.0 ** SHIFT for g in g_refs)  # (exact: a power of two)

        def chunk(c, carry):
            ch = chunk_columns(off, first8, nrows, total, c, mp, aoff)
            x0, cols = ch[0], ch[1:]  # cols: t0, lo, hi, zstart
            tiles = [(u, sr, n0) for n0 in n0s for u, sr in zip(u_refs, s_refs)]

            def run(w):  # the chunk's K loop and stores at w columns
                acc = _k_loop(tuple(u.at[ei, pl.ds(n0, ROWS), :] for u, _, n0 in tiles),
                              tuple(sr.at[ei, :, pl.ds(n0, ROWS)] for _, sr, n0 in tiles),
                              x_gmem.at[pl.ds(pl.multiple_of(x0, 8), w), :], k=k, mp=w,
                              tk=tk, steps=steps, serial=serial)
                for j, n0 in enumerate(n0s):  # tile j's products: acc[j * nw:(j + 1) * nw]
                    _store_rows(acc[j * nw:(j + 1) * nw], o_gmem, rs_gmem if scaled else None,
                                scale, *cols, n0, m)

            if not widths:
                run(r)
            else:
                width = chunk_width(ch, widths, r)
                for w in (*widths, r):
                    pl.when(width == w)(functools.partial(run, w))
            return carry

        jax.lax.fori_loop(0, nchunks, chunk, 0)

    return plgpu.kernel(
        body, out_type=jax.ShapeDtypeStruct((m, n), jnp.bfloat16), grid=(e, n // (ROWS * nt)),
        grid_names=("e", "n"),
    )(*codes, *scales, *gscale, x_sorted, group_sizes, ends, row_scale, aends)


def _grouped_direct_emulated(codes, scales, x_sorted, group_sizes, ends, gscale, row_scale,
                             aends=None, *, mp, tk, steps, m, scaled, aligned=False,
                             serial=False, nt=1, widths=()):
    """What :func:`_grouped_direct` stores, in plain JAX (CPU tests of the bookkeeping): every
    (expert, chunk, column) the kernel's loops visit, through the same ``program_plan`` and
    ``chunk_columns``. Rows no chunk stores stay NaN, and a visited chunk that would read past
    x_sorted stores NaN, so a gap in the coverage or a short pad shows; with ``widths`` a chunk
    stores only the columns below its :func:`chunk_width`, so a width too narrow for its
    columns shows the same way. (gate, up) pairs: each product as stored, then the epilogue's
    SwiGLU."""
    del tk, steps, serial, nt  # (the N tiling does not change what a column stores)
    codes, scales, gscale = _weight_tuple(codes), _weight_tuple(scales), _weight_tuple(gscale)
    e, n = codes[0].shape[0], codes[0].shape[1]
    r = chunk_rows(mp, aligned)
    offs, start8, rows, nchunks = program_plan(group_sizes, ends, jnp.arange(e) == e - 1, m, mp)
    aoff = aends - jnp.bitwise_and(rows + 7, -8) if aligned else None
    nc = m // mp + 2  # a static bound on any expert's chunks
    ee, cc, ii = (a.ravel() for a in jnp.meshgrid(jnp.arange(e), jnp.arange(nc), jnp.arange(r),
                                                  indexing="ij"))
    ch = chunk_columns(offs[ee], start8[ee], rows[ee], ends[e - 1], cc, mp,
                       None if aoff is None else aoff[ee])
    x0, t0, lo, hi, zstart = ch
    visited = cc < nchunks[ee]
    live = visited & (ii >= lo) & (ii < hi) & (ii < chunk_width(ch, check_widths(widths, r), r))
    t = t0 + ii
    xr = x_sorted[jnp.clip(x0 + ii, 0, x_sorted.shape[0] - 1)].astype(jnp.float32)
    rs = row_scale[jnp.clip(t, 0, m - 1)] if scaled else 1.0
    ys = []
    for cw, sw, gw in zip(codes, scales, gscale):
        w = MgpuWeights(codes=cw, scales=sw, global_scale=jnp.ones(e, jnp.float32))
        wf = quant.dequantize(mgpu_to_qtensor(w), jnp.float32) * 2.0 ** -SHIFT  # [E, K, N]
        y = jnp.einsum("pk,pkn->pn", xr, wf[ee], precision="highest")
        ys.append((y * (gw[ee] * 2.0 ** SHIFT * rs)[:, None]).astype(jnp.bfloat16))
    y = ys[0]
    if len(ys) == 2:
        gv, uv = (a.astype(jnp.float32) for a in ys)
        y = (gv * (1.0 / (1.0 + jnp.exp(-gv))) * uv).astype(jnp.bfloat16)
    y = jnp.where((ii >= zstart)[:, None], 0.0, y.astype(jnp.float32))
    y = jnp.where((x0 + r > x_sorted.shape[0])[:, None], jnp.nan, y).astype(jnp.bfloat16)
    out = jnp.full((m, n), jnp.nan, jnp.bfloat16)
    return out.at[jnp.where(live, t, m)].set(y, mode="drop")


def default_grouped_knobs(m: int, e: int, k: int,
                          aligned: bool = False) -> tuple[int, int, int]:
    """(mp, tk, steps) for ``m`` sorted rows over ``e`` experts with contraction ``k``. Decode
    (mean group <= 16 rows): mp 16, 2 pipeline stages (session 15 sweep at 888 rows x 2048 x 768:
    the kernel 38.8 us vs 47.2 us with 4 stages, mp 8 and 24 slower); on the ``aligned`` x
    layout mp 8 up to a mean group of 4 rows (20d: the kernel 9-14% faster than mp 16 at 216
    rows over 128 experts, 1.07-1.28x slower at 888). Larger groups: 56 tokens per MMA (64-row
    tiles), so a weight tile is streamed once per 56 tokens, not 16. tk: the largest of 256,
    128, 64 dividing K."""
    mp = 8 if aligned and m <= 4 * e else 16 if m <= 16 * e else 56
    tk = next(t for t in (256, 128, MG.SPAN) if k % t == 0)
    return mp, tk, 2


def fp4_grouped_matmul_mgpu(x: jax.Array, w: MgpuWeights, group_sizes: jax.Array, *,
                            mp: int | None = None, tk: int | None = None,
                            steps: int | None = None, row_scale: jax.Array | None = None,
                            backend: str = "auto", x_pad: bool | None = None,
                            x_layout: str | None = None, nt: int | None = None,
                            widths: tuple[int, ...] | None = None) -> jax.Array:
    """x [M, K] bf16, tokens sorted by expert (``group_sizes`` [E], sum <= M; rows past the sum
    give 0) @ W [E, K, N] (NVFP4, :func:`prepare_mgpu`) -> [M, N] bf16, f32 accumulation; equals
    :func:`fp4_grouped_matmul_mgpu_reference` up to f32 summation order. ``mp`` tokens per MMA
    (a multiple of 8; a group is read in chunks of mp rows, mp + 8 on the rows layout), ``tk`` K
    columns per pipeline
    step, ``steps``
    pipeline stages; unset ones from :func:`default_grouped_knobs`. ``row_scale`` [M, 1] f32
    multiplies the f32 result rows (an activation QTensor's global scale). ``backend``:
    ``"auto"`` (the kernel on a GPU, the reference elsewhere), ``"mgpu"``, ``"reference"``,
    ``"emulate"`` (the wrapper with the kernel replaced by plain JAX that visits the kernel's
    windows: CPU tests). ``x_pad`` (None: ``GROUPED_X_PAD``): copy x with :func:`read_pad`
    rows appended so that every chunk's read stays inside it; False passes x itself and lets
    TMA fill the rows past M (they only reach accumulator columns that are never stored; x is
    still padded to a multiple of 8 rows, which M = tokens x top-k usually is, and to one chunk's
    read; the emulation always pads: its slices clamp instead). ``x_layout`` (None:
    ``GROUPED_X_LAYOUT``): ``"rows"`` (the above) or ``"aligned"`` (the wrapper copies each
    expert's rows to an 8-aligned offset, :func:`aligned_rows`, and a chunk reads mp rows;
    ``x_pad`` does not apply and is refused). ``nt`` (None: ``GROUPED_TILES`` or
    :func:`default_tiles`; 1 where N is not a multiple of 64 nt): 64-row weight tiles per
    program. ``widths`` (None: ``GROUPED_WIDTHS``): narrower chunk widths
    (:func:`chunk_width`; the same values)."""
    return _grouped_call(x, (w,), group_sizes, mp=mp, tk=tk, steps=steps, row_scale=row_scale,
                         backend=backend, x_pad=x_pad, x_layout=x_layout, nt=nt, widths=widths)


def fp4_grouped_swiglu_mgpu_reference(x, w_gate: MgpuWeights, w_up: MgpuWeights, group_sizes,
                                      row_scale=None) -> jax.Array:
    """``silu(x gate) * (x up)`` from the two bf16 products of
    :func:`fp4_grouped_matmul_mgpu_reference`, in f32, rounded to bf16 (the model's unfused
    composition, ``trace_jax.moe``)."""
    g, u = (fp4_grouped_matmul_mgpu_reference(x, w, group_sizes, row_scale).astype(jnp.float32)
            for w in (w_gate, w_up))
    return (jax.nn.silu(g) * u).astype(jnp.bfloat16)


def fp4_grouped_swiglu_mgpu(x: jax.Array, w_gate: MgpuWeights, w_up: MgpuWeights,
                            group_sizes: jax.Array, *, mp: int | None = None,
                            tk: int | None = None, steps: int | None = None,
                            row_scale: jax.Array | None = None, backend: str = "auto",
                            x_layout: str | None = None, nt: int | None = None,
                            widths: tuple[int, ...] | None = None) -> jax.Array:
    """``silu(x @ gate) * (x @ up)`` [M, N] bf16 for rows sorted by expert, in one kernel: each
    program streams its 64 rows of both weights against one x tile (a wgmma per weight) and
    applies the SwiGLU to the two products (each scaled and rounded to bf16 first, as
    :func:`fp4_grouped_swiglu_mgpu_reference`; the f32 ``exp`` and the sums' order may move a
    bf16 rounding). Arguments as :func:`fp4_grouped_matmul_mgpu` (no ``x_pad``: the rows layout
    is always unpadded here); ``w_gate`` and ``w_up`` of one
    shape."""
    if w_gate.shape != w_up.shape:
        raise ValueError(f"gate {w_gate.shape} and up {w_up.shape} weights must have one shape")
    return _grouped_call(x, (w_gate, w_up), group_sizes, mp=mp, tk=tk, steps=steps,
                         row_scale=row_scale, backend=backend, x_pad=None, x_layout=x_layout,
                         nt=nt, widths=widths)


def _grouped_call(x, ws, group_sizes, *, mp, tk, steps, row_scale, backend, x_pad, x_layout,
                  nt, widths=None):
    """The grouped wrapper for one weight or a (gate, up) pair (``ws``): knobs, checks, the x
    layout, then the kernel (or the reference / the emulation)."""
    w = ws[0]
    e, k, n = w.shape
    layout = GROUPED_X_LAYOUT if x_layout is None else x_layout
    if layout not in X_LAYOUTS:
        raise ValueError(f"unknown grouped x layout {layout!r} (use one of {X_LAYOUTS})")
    dmp, dtk, dsteps = default_grouped_knobs(x.shape[0], e, k, layout == "aligned")
    mp = dmp if mp is None else mp
    if mp % 8 or not 8 <= mp <= 256:
        raise ValueError(f"mp={mp} must be a multiple of 8 in [8, 256]")
    tk = dtk if tk is None else tk
    steps = dsteps if steps is None else steps
    if x.ndim != 2 or x.shape[1] != k:
        raise ValueError(f"x must be [M, {k}], got {x.shape}")
    if group_sizes.shape != (e,):
        raise ValueError(f"group_sizes must be [{e}] (one per expert), got {group_sizes.shape}")
    if nt is None:
        nt = default_tiles(n, len(ws)) if GROUPED_TILES is None else GROUPED_TILES
        if not isinstance(nt, int) or nt < 1:
            raise ValueError(f"fp4_matmul_mgpu.GROUPED_TILES={nt!r}: use None or a positive int")
        nt = nt if n % (ROWS * nt) == 0 else 1
    elif nt < 1 or n % (ROWS * nt):
        raise ValueError(f"nt={nt}: N={n} must be a multiple of {ROWS} x nt")
    r = chunk_rows(mp, layout == "aligned")
    widths = check_widths([w for w in GROUPED_WIDTHS if w < r] if widths is None else widths, r)
    m = x.shape[0]
    if row_scale is not None and row_scale.shape != (m, 1):
        raise ValueError(f"row_scale must be [{m}, 1], got {row_scale.shape}")
    if backend not in ("auto", "mgpu", "reference", "emulate"):
        raise ValueError(f"unknown backend {backend!r} (auto, mgpu, reference, emulate)")
    if backend == "reference" or (backend == "auto" and jax.default_backend() != "gpu"):
        if len(ws) == 2:
            return fp4_grouped_swiglu_mgpu_reference(x, *ws, group_sizes, row_scale)
        return fp4_grouped_matmul_mgpu_reference(x, w, group_sizes, row_scale)
    gs = group_sizes.astype(jnp.int32)
    gscale = tuple(v.global_scale.astype(jnp.float32) for v in ws)  # [E] each
    # (an unscaled call passes gscale as a placeholder row scale: the kernel never reads it)
    rs = gscale[0] if row_scale is None else row_scale.astype(jnp.float32).reshape(m)
    f = _grouped_direct_emulated if backend == "emulate" else _grouped_direct
    xp, aends, ends = x.astype(jnp.bfloat16), None, None
    if layout == "aligned":
        if x_pad is not None:
            raise ValueError("x_pad applies to the rows x layout only (x_layout='rows')")
        emulate = backend == "emulate"  # (the kernel in interpret mode)
        if ALIGNED_ROWS_KERNEL and (emulate or jax.default_backend() == "gpu"):
            ends, aends, src = aligned_rows_kernel(gs, m, mp, interpret=emulate)
        else:
            aends, src = aligned_rows(gs, m, mp)
        xp = jnp.take(xp, src, axis=0, mode="clip")  # (src is in [0, M): no fill select)
    else:
        pad = backend == "emulate" or (GROUPED_X_PAD if x_pad is None else x_pad)
        rows = appended_rows(m, mp, pad)
        if rows:
            xp = jnp.pad(xp, ((0, rows), (0, 0)))
    one = len(ws) == 1  # (a single weight passes arrays, a pair tuples)
    codes, scales = tuple(v.codes for v in ws), tuple(v.scales for v in ws)
    ends = _cumsum_small(gs) if ends is None else ends
    return f(codes[0] if one else codes, scales[0] if one else scales, xp, gs, ends,
             gscale[0] if one else gscale, rs, aends, mp=mp,
             tk=min(tk, k), steps=steps, m=m, scaled=row_scale is not None,
             aligned=layout == "aligned", serial=SERIAL_TILES, nt=nt, widths=widths)
