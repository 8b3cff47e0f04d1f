"""NVFP4 KV-cache decode attention in Pallas Mosaic GPU (written in session 17, first run and tuned
on the H200 in session 18: exact; 1.07x / 1.36x the Triton v6 kernel at 32 x 8K / 8 x 128K,
0.89-0.91x at 32K with 32+ sequences). The model uses it when
``trace_jax.attention.FP4_CACHE_LAYOUT == "mgpu"`` (not the default). It lowers for sm_90 on a
CPU machine (``tests/test_mgpu_kv_layout.py``). Design and measurements: NOTES_attention
(sessions 16-18). Caches in :mod:`pallas_kernels.mgpu_kv_layout` (``MgpuKV``).

One warpgroup per (split, kv head, sequence), 64 cache rows per pipeline step (``sub`` tiles of
64 with ``sub > 1``); per 64-row tile:

* S^T [64 rows, Gq = 8] = K [64, D] Q^T: K decoded into wgmma's register A operand by the FP4
  matmul's ``_decode_tile``; Q^T the transposed view of the [8, D] Q tile in shared memory.
* The scores scaled by K's per-row global scale, rows past the sequence masked (in a step that
  has such rows: full steps run a copy of the body without masks), the online softmax over the
  rows (a cross-warp max; the sum kept per row and reduced once); P times V's per-row global
  scale.
* P^T [8, 64] in two bf16 terms (hi + lo: f32 accuracy of P, as the Triton kernel; ``p_terms=1``
  keeps hi alone) stored into 128-byte-swizzled shared-memory tiles by scalar stores
  (``_store_pt``; Mosaic GPU has no register transpose for this layout).
* O^T [D, 8] += V^T [D, 64] P^T: V^T decoded into the A operand from the token-major V words,
  each code pair times its own two block scales (``_decode_v``), rows past the sequence given a
  zero multiplier (their scales may be NaN).

Per split it writes the unnormalised O^T [D, 8] f32 (times 2**-SHIFT), the running max (base 2)
and sum; :func:`decode_attention_mgpu` merges the splits in XLA. NVFP4, head_dim 128 or any
multiple of 64, up to 8 query heads per kv head.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import attention_triton as AT
from pallas_kernels import fp4_matmul_mgpu as FM
from pallas_kernels import kv_layout as KL
from pallas_kernels import mgpu_kv_layout as MK

ROWS = 64  # cache rows per pipeline step (wgmma's M for S^T, its K for O^T)
GQ = 8  # query heads per kv head on wgmma's N side (fewer are padded)

_DECODE4_ASM = f"""{{
.reg .b32 a;
and.b32 a, $4, {KL.P_MASK:#010x};
mul.rn.bf16x2 $0, a, $5;
shf.l.wrap.b32 a, $4, $4, {KL.ROTATIONS[1]};
and.b32 a, a, {KL.P_MASK:#010x};
mul.rn.bf16x2 $1, a, $6;
shf.l.wrap.b32 a, $4, $4, {KL.ROTATIONS[2]};
and.b32 a, a, {KL.P_MASK:#010x};
mul.rn.bf16x2 $2, a, $7;
and.b32 a, $4, {KL.HOLE_MASK:#010x};
mul.lo.u32 a, a, {KL.MUL:#x};
and.b32 a, a, {KL.P_MASK:#010x};
mul.rn.bf16x2 $3, a, $8;
}}"""  # one word + one bf16x2 multiplier per pair -> its 4 bf16x2 pairs (kv_layout's bit order)


def _decode_v(vw, vs_ref, valid, d):
    """inline_mgpu: V^T [d, 64] bf16 (WGMMA layout, the A operand) from the step's V words
    [d, 8] uint32 (WGMMA layout) and scale-code words ``vs_ref`` [d / 16, 16] uint32 (shared
    memory; ``mgpu_kv_layout``'s permuted order: a thread's 8 codes for word e are words
    2 (2 q + e) and + 1 of its 16-dim block's row). Rows >= ``valid`` get a zero multiplier
    (``valid`` None: every row is valid, no masking code)."""
    import jax.experimental.mosaic.gpu as mgpu
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import arith, gpu, llvm, memref, vector
    from jax.experimental.mosaic.gpu import fragmented_array as fa
    from jax.experimental.mosaic.gpu import utils as mu
    from jax.experimental.pallas import mosaic_gpu as plgpu

    masked = valid is not None
    arg_types = (plgpu.Layout.WGMMA, plgpu.RefType()) + (
        (plgpu.Layout.WG_SPLAT(shape=()),) if masked else ())

    @plgpu.inline_mgpu(
        arg_types=arg_types,
        return_type=plgpu.ShapeDtypeStruct((d, ROWS), jnp.bfloat16, layout=plgpu.Layout.WGMMA))
    def dec(ctx, u_fa, s_ref, *valid_fa):
        del ctx
        i32 = ir.IntegerType.get_signless(32)
        index = ir.IndexType.get()
        bf2 = ir.VectorType.get((2,), ir.BF16Type.get())
        struct4 = llvm.StructType.get_literal([i32] * 4)
        struct2 = llvm.StructType.get_literal([i32] * 2)
        c = lambda v: arith.constant(index, v)  # noqa: E731
        ci = lambda v: arith.constant(i32, v)  # noqa: E731
        tid = arith.index_cast(i32, gpu.thread_id(gpu.Dimension.x))
        warp = arith.index_cast(index, arith.andi(arith.shrui(tid, ci(5)), ci(3)))
        q = arith.andi(tid, ci(3))
        if masked:  # t = valid - 2 q: row 32 e + 8 p + 2 q + h is valid iff 32 e + 8 p + h < t
            t = arith.subi(FM.splat_value(valid_fa[0], i32), arith.shli(q, ci(1)))
        out = np.empty(fa.WGMMA_LAYOUT.registers_shape((d, ROWS)), dtype=object)
        qi = arith.index_cast(index, q)
        for e in range(2):
            keep = []
            for p in range(4) if masked else ():
                m = ci(0)
                for h in range(2):
                    ok = arith.cmpi(arith.CmpIPredicate.slt, ci(32 * e + 8 * p + h), t)
                    m = arith.ori(m, arith.select(ok, ci(0xFFFF if h == 0 else -65536), ci(0)))
                keep.append(m)
            col = arith.addi(arith.muli(qi, c(4)), c(2 * e))  # words 2 (2 q + e), + 1
            for mt in range(d // 64):
                blk = arith.addi(c(4 * mt), warp)  # the thread's 16-dim block of rows d
                mults = []
                for wd in range(2):
                    sw = memref.load(s_ref, [blk, arith.addi(col, c(wd))])
                    sp = llvm.inline_asm(struct2, [sw], FM._SCALE_ASM, "=r,=r,r")
                    mults += [llvm.extractvalue(i32, sp, (i,)) for i in range(2)]
                if masked:
                    mults = [arith.andi(mv, k) for mv, k in zip(mults, keep)]
                for h in range(2):  # rows r and r + 8 of the thread (same 16-dim block)
                    word = vector.extract(u_fa.registers[mt, 0, 0, 0, h, 0, 0, 0, 0], [], [e])
                    dd = llvm.inline_asm(struct4, [word, *mults], _DECODE4_ASM,
                                         "=r,=r,=r,=r,r,r,r,r,r")
                    for p in range(4):
                        out[mt, 4 * e + p, 0, 0, h, 0, 0, 0, 0] = mu.bitcast(
                            llvm.extractvalue(i32, dd, (p,)), bf2)
        return mgpu.FragmentedArray(_registers=out, _layout=fa.WGMMA_LAYOUT, _is_signed=None)

    return dec(vw, vs_ref, *(() if valid is None else (valid,)))


def _mask_rows(x, valid, fill):
    """inline_mgpu: f32 [64, n] (WGMMA layout) with rows >= ``valid`` replaced by ``fill``."""
    import jax.experimental.mosaic.gpu as mgpu
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import arith, vector
    from jax.experimental.mosaic.gpu import fragmented_array as fa
    from jax.experimental.pallas import mosaic_gpu as plgpu

    @plgpu.inline_mgpu(
        arg_types=(plgpu.Layout.WGMMA, plgpu.Layout.WG_SPLAT(shape=())),
        return_type=plgpu.ShapeDtypeStruct(x.shape, jnp.float32, layout=plgpu.Layout.WGMMA))
    def mask(ctx, x_fa, valid_fa):
        del ctx
        i32 = ir.IntegerType.get_signless(32)
        nv = FM.splat_value(valid_fa, i32)
        f32 = ir.F32Type.get()
        fv = arith.constant(f32, fill)
        out = np.empty(x_fa.registers.shape, dtype=object)
        for idx, ((r, _), reg) in zip(np.ndindex(*x_fa.registers.shape),
                                      zip(fa.WGMMA_LAYOUT.thread_idxs(x_fa.shape),
                                          x_fa.registers.flat)):
            ok = arith.cmpi(arith.CmpIPredicate.slt, arith.index_cast(i32, r), nv)
            n = ir.VectorType(reg.type).shape[0]
            vals = [arith.select(ok, vector.extract(reg, [], [i]), fv) for i in range(n)]
            out[idx] = vector.from_elements(reg.type, vals)
        return mgpu.FragmentedArray(_registers=out, _layout=fa.WGMMA_LAYOUT, _is_signed=None)

    return mask(x, valid)


def _store_pt(p, pt_ref):
    """inline_mgpu: f32 [64 rows, 8 heads] (WGMMA layout) -> bf16 P^T [8, 64] in a 128-byte
    swizzled (8, 64) shared-memory tile (the wgmma B operand's layout; swizzle applied here:
    16-byte chunk t // 8 of row g goes to chunk (t // 8) ^ (g % 8))."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import arith, memref, vector
    from jax.experimental.mosaic.gpu import fragmented_array as fa
    from jax.experimental.pallas import mosaic_gpu as plgpu

    tiles = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))

    @plgpu.inline_mgpu(arg_types=(plgpu.Layout.WGMMA, plgpu.RefType(transforms=tiles)))
    def store(ctx, p_fa, ref):  # ref: memref [1, 1, 8, 64]
        del ctx
        index = ir.IndexType.get()
        i32 = ir.IntegerType.get_signless(32)
        bf16 = ir.BF16Type.get()
        c = lambda v: arith.constant(index, v)  # noqa: E731
        ci = lambda v: arith.constant(i32, v)  # noqa: E731
        for (r, col), reg in zip(fa.WGMMA_LAYOUT.thread_idxs(p_fa.shape), p_fa.registers.flat):
            r, col = arith.index_cast(i32, r), arith.index_cast(i32, col)
            for i in range(ir.VectorType(reg.type).shape[0]):
                g = arith.addi(col, ci(i))
                v = arith.truncf(bf16, vector.extract(reg, [], [i]))
                chunk = arith.xori(arith.shrui(r, ci(3)), arith.andi(g, ci(7)))
                pos = arith.ori(arith.shli(chunk, ci(3)), arith.andi(r, ci(7)))
                memref.store(v, ref, [c(0), c(0), arith.index_cast(index, g),
                                      arith.index_cast(index, pos)])

    store(p, pt_ref)


@functools.partial(jax.jit, static_argnames=("p", "steps", "scale", "sub", "lazy_sum", "p_terms",
                                             "fast_full", "approx", "no_auto_barriers"))
def _attention_t(q, kc, ks, kg, vc, vs, vg, lengths, *, p, steps, scale, sub=1, lazy_sum=True,
                 p_terms=2, fast_full=True, approx=True, no_auto_barriers=True):
    """Split partials: O^T [B, H, P, D, 8] f32 (unnormalised, times 2**-SHIFT), running max
    (base 2) and sum [B, H, P, 8] f32. A pipeline step takes ``sub`` 64-row tiles (their S^T
    wgmmas issued together, one softmax reduction); ``lazy_sum`` keeps the softmax sum per row
    (a [64, 8] carry) and reduces it once at the end instead of every step. ``p_terms``: P
    enters O^T as bf16 hi + lo (2: f32 accuracy) or hi alone (1: bf16 P, half the wgmmas).
    ``fast_full``: steps whose rows are all valid run a copy of the body without the row masks
    (a ``lax.cond``); ``approx``: Mosaic's ``approx_math`` (``ex2.approx``);
    ``no_auto_barriers``: its ``unsafe_no_auto_barriers`` (this body never reads what the same
    thread wrote: P^T is read by wgmma after ``commit_smem``, the outputs by TMA). The defaults
    are the fastest f32-P set of session 18d."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    b, h, s, d8 = kc.shape
    d = 8 * d8
    chunk = s // p
    blk = ROWS * sub
    if p_terms not in (1, 2):
        raise ValueError(f"p_terms must be 1 or 2, got {p_terms}")
    if chunk % blk:
        raise ValueError(f"a split's {chunk} rows are not a multiple of the step's {blk}")
    tiles = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))
    wg, row = plgpu.Layout.WGMMA, plgpu.Layout.WGMMA.reduce(1)

    def body(q_gmem, kc_gmem, ks_gmem, kg_gmem, vc_gmem, vs_gmem, vg_gmem, len_gmem,
             o_gmem, m_gmem, l_gmem, q_smem, pt_hi, pt_lo, o_smem, ml_smem, bar):
        pi, hi_, bi = (jax.lax.axis_index(a) for a in ("p", "h", "b"))
        start = pi * chunk
        n = jnp.clip(len_gmem[bi] - start, 0, chunk)
        nblk = jnp.maximum((n + blk - 1) // blk, 1)  # an empty split runs one masked step
        plgpu.copy_gmem_to_smem(q_gmem.at[bi, hi_], q_smem, bar)
        plgpu.barrier_wait(bar)
        rows = pl.ds(start, chunk)
        tile = lambda j: pl.ds(j * ROWS, ROWS)  # noqa: E731  (sub-tile j of a step)

        def step(idx, kc_s, ks_s, kg_s, vc_s, vs_s, vg_s, carry):
            valid = n - idx[0] * blk
            run = functools.partial(step_rows, kc_s, ks_s, kg_s, vc_s, vs_s, vg_s, carry)
            if not fast_full:
                return run(valid)
            return jax.lax.cond(valid >= blk, lambda: run(None), lambda: run(valid))

        def step_rows(kc_s, ks_s, kg_s, vc_s, vs_s, vg_s, carry, valid):
            """One step; rows >= ``valid`` masked (None: all rows valid, no masking)."""
            m, l, o = carry
            mask = (lambda x, j, fill: x) if valid is None else (  # noqa: E731
                lambda x, j, fill: _mask_rows(x, valid - j * ROWS, fill))

            def scores(*acc_refs):
                for j, acc_ref in enumerate(acc_refs):
                    uw = plgpu.load(kc_s.at[tile(j)], layout=wg, optimized=True)
                    srows = [plgpu.load(ks_s.at[t, tile(j)], layout=row) for t in range(d // 64)]
                    plgpu.wgmma(acc_ref, FM._decode_tile(uw, srows, d), q_smem.T)
                plgpu.wgmma_wait(0)
                return [a[...] for a in acc_refs]

            scs = pl.run_scoped(scores, *[plgpu.ACC((ROWS, GQ), jnp.float32)] * sub)
            scs = [mask(sc * (plgpu.load(kg_s.at[tile(j)], layout=row) * scale)[:, None], j,
                        -math.inf) for j, sc in enumerate(scs)]
            mx = functools.reduce(jnp.maximum, scs)
            m_new = jnp.maximum(m, jnp.max(mx, axis=0))
            alpha = jnp.exp2(m - m_new)
            prs = [jnp.exp2(sc - m_new[None, :]) for sc in scs]
            psum = functools.reduce(jnp.add, prs)
            l = l * (alpha[None, :] if lazy_sum else alpha) + (
                psum if lazy_sum else jnp.sum(psum, axis=0))
            for j, pr in enumerate(prs):
                vgr = plgpu.load(vg_s.at[tile(j)], layout=row)
                pr = mask(pr * vgr[:, None], j, 0.0)  # (a stale row's vg may be NaN)
                p_hi = pr.astype(jnp.bfloat16).astype(jnp.float32)
                _store_pt(pr, pt_hi.at[j])
                if p_terms == 2:
                    _store_pt(pr - p_hi, pt_lo.at[j])
            plgpu.commit_smem()

            def pv(acc_ref):
                for j in range(sub):
                    vw = plgpu.load(vc_s.at[:, pl.ds(j * ROWS // 8, ROWS // 8)], layout=wg,
                                    optimized=False)
                    av = _decode_v(vw, vs_s.at[:, pl.ds(j * ROWS // 4, ROWS // 4)],
                                   None if valid is None else valid - j * ROWS, d)
                    plgpu.wgmma(acc_ref, av, pt_hi.at[j].T)
                    if p_terms == 2:
                        plgpu.wgmma(acc_ref, av, pt_lo.at[j].T)
                plgpu.wgmma_wait(0)

            o = pl.run_state(pv)(plgpu.ACC.init(o * alpha[None, :]))
            return m_new, l, o

        init = (jnp.full((GQ,), AT._NEG, jnp.float32),
                jnp.zeros((ROWS, GQ) if lazy_sum else (GQ,), jnp.float32),
                jnp.zeros((d, GQ), jnp.float32))
        m, l, o = plgpu.emit_pipeline(
            step, grid=(nblk,), max_concurrent_steps=steps, init_carry=init,
            in_specs=[plgpu.BlockSpec((blk, d8), lambda i: (i, 0)),
                      plgpu.BlockSpec((d // 64, blk), lambda i: (0, i)),
                      plgpu.BlockSpec((blk,), lambda i: (i,)),
                      plgpu.BlockSpec((d, blk // 8), lambda i: (0, i)),
                      plgpu.BlockSpec((d // 16, blk // 4), lambda i: (0, i)),
                      plgpu.BlockSpec((blk,), lambda i: (i,))],
        )(kc_gmem.at[bi, hi_, rows, :], ks_gmem.at[bi, hi_, :, rows], kg_gmem.at[bi, hi_, rows],
          vc_gmem.at[bi, hi_, :, pl.ds(start // 8, chunk // 8)],
          vs_gmem.at[bi, hi_, :, pl.ds(start // 4, chunk // 4)], vg_gmem.at[bi, hi_, rows])
        o_smem[...] = o
        ml_smem[0] = m
        ml_smem[1] = jnp.sum(l, axis=0) if lazy_sum else l
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(o_smem, o_gmem.at[bi, hi_, pi])
        plgpu.copy_smem_to_gmem(ml_smem.at[0], m_gmem.at[bi, hi_, pi])
        plgpu.copy_smem_to_gmem(ml_smem.at[1], l_gmem.at[bi, hi_, pi])
        plgpu.wait_smem_to_gmem(0)

    f32 = jnp.float32
    return plgpu.kernel(
        body,
        out_type=(jax.ShapeDtypeStruct((b, h, p, d, GQ), f32),
                  jax.ShapeDtypeStruct((b, h, p, GQ), f32),
                  jax.ShapeDtypeStruct((b, h, p, GQ), f32)),
        grid=(p, h, b), grid_names=("p", "h", "b"),
        compiler_params=plgpu.CompilerParams(approx_math=approx,
                                             unsafe_no_auto_barriers=no_auto_barriers),
        scratch_types=[plgpu.SMEM((GQ, d), jnp.bfloat16, transforms=tiles),
                       plgpu.SMEM((sub, GQ, ROWS), jnp.bfloat16, transforms=tiles),
                       plgpu.SMEM((sub, GQ, ROWS), jnp.bfloat16, transforms=tiles),
                       plgpu.SMEM((d, GQ), f32), plgpu.SMEM((2, GQ), f32),
                       plgpu.Barrier(num_arrivals=1)],
    )(q, kc, ks, kg, vc, vs, vg, lengths)


def partials_reference(q_BxHxGxD, cache: MK.MgpuKV, lengths, *, p: int, scale: float):
    """What :func:`_attention_t` computes, in plain JAX (f32, from the dequantized caches): per
    split of S / ``p`` rows, O^T [B, H, P, D, G] = sum over its valid rows of 2**(s - m) * v *
    2**-SHIFT, m [B, H, P, G] = max(_NEG, the rows' s) and l = sum 2**(s - m), where s = k . q *
    ``scale`` * 2**-SHIFT (``scale`` as the kernel takes it: base 2, times 2**SHIFT). A debugging
    reference for the kernel's partials; ``attention_triton.combine`` of them is the attention.
    Rows past a sequence's length contribute nothing, whatever they hold (as in the kernel)."""
    from trace_jax import quant

    k, v = (quant.dequantize(t, jnp.float32) for t in MK.from_mgpu_kv(cache))
    b, h, s, d = cache.shape
    chunk = s // p
    sc = jnp.einsum("bhsd,bhgd->bhsg", k, q_BxHxGxD.astype(jnp.float32)) * (
        scale * 2.0 ** -FM.SHIFT)
    rows = jnp.arange(s)
    ok = rows[None, :] < jnp.asarray(lengths, jnp.int32)[:, None]  # [B, S]
    v = jnp.where(ok[:, None, :, None], v, 0.0)  # stale rows may hold anything (NaN included)
    sc = jnp.where(ok[:, None, :, None], sc, -jnp.inf).reshape(b, h, p, chunk, -1)
    m = jnp.maximum(jnp.max(sc, axis=3), AT._NEG)  # [B, H, P, G]
    pr = jnp.exp2(sc - m[:, :, :, None, :])
    o = jnp.einsum("bhpcg,bhpcd->bhpdg", pr, v.reshape(b, h, p, chunk, d)) * 2.0 ** -FM.SHIFT
    return o, m, jnp.sum(pr, axis=3)


def decode_attention_mgpu_reference(q, cache: MK.MgpuKV, lengths, *, sm_scale=None):
    """The pure-JAX reference on the natural caches (``mgpu_kv_layout.from_mgpu_kv``)."""
    from pallas_kernels.decode_attention import decode_attention_reference

    k, v = MK.from_mgpu_kv(cache)
    return decode_attention_reference(q, k, v, lengths, sm_scale=sm_scale)


def decode_attention_mgpu(q, cache: MK.MgpuKV, lengths, *, sm_scale=None,
                          num_splits: int | None = None, steps: int = 2, sub: int = 1,
                          lazy_sum: bool = True, p_terms: int = 2, fast_full: bool = True,
                          approx: bool = True, no_auto_barriers: bool = True,
                          backend: str = "auto") -> jax.Array:
    """q [B, Hq, D] bf16 over an NVFP4 cache in the Mosaic layout -> [B, Hq, D] bf16 (f32 math).
    ``steps``: pipeline depth; the other knobs are :func:`_attention_t`'s, defaulting to the
    fastest f32-P set measured (session 18d: 835 us at 111 x 32K, Triton v6 ~735);
    ``num_splits`` None: :func:`default_splits`.
    ``backend="auto"``: the kernel on a GPU, the reference elsewhere; ``"mgpu"`` forces the
    kernel."""
    b, hq, d = q.shape
    bc, h, s, dc = cache.shape
    if (bc, dc) != (b, d) or hq % h or hq // h > GQ:
        raise ValueError(f"q {q.shape} does not match the cache {cache.shape} (at most {GQ} "
                         "query heads per kv head)")
    sm_scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    if backend == "reference" or (backend == "auto" and jax.default_backend() != "gpu"):
        return decode_attention_mgpu_reference(q, cache, lengths, sm_scale=sm_scale)
    g = hq // h
    p = num_splits or default_splits(b, h, s, sub)
    qg, kw = kernel_args(q, cache, sm_scale, p)
    o, m, l = _attention_t(qg, *kernel_caches(cache), jnp.asarray(lengths, jnp.int32),
                           steps=steps, sub=sub, lazy_sum=lazy_sum,
                           p_terms=p_terms, fast_full=fast_full, approx=approx,
                           no_auto_barriers=no_auto_barriers, **kw)
    out = AT.combine(jnp.swapaxes(o, -1, -2), m, l) * 2.0 ** FM.SHIFT  # [B, H, 8, D]
    return out[:, :, :g].reshape(b, hq, d).astype(jnp.bfloat16)


# The split rule's bounds (session 18f's sweep of 2..64 splits at 32 x 8K, 32 x 32K, 111 x 32K
# and 8 x 128K: the fastest counts were 4, 32, 8 and 64; this rule picks 4, 16, 8 and 64, each
# within 1.1% of the fastest). 2 programs fit an SM (18c: 195 registers per thread, sub 2).
# The rule takes divisors only: a block count without small divisors (e.g. a prime) gets few
# splits (a ragged last split is not implemented), so contexts that are multiples of a power of
# two times 64 rows split best.
SPLIT_PROGRAMS = 4096  # at most about this many programs (B * H * splits)
SPLIT_MIN_STEPS = 32  # at least this many 64-row steps per split (when the context has them)


def default_splits(b: int, h: int, s: int, sub: int = 1) -> int:
    """Splits per (sequence, kv head): the largest divisor of the S / (64 ``sub``) step blocks
    with at most ``SPLIT_PROGRAMS`` programs in all (or 1 split) and at least
    ``SPLIT_MIN_STEPS`` 64-row blocks per split (or 1 split when the context is shorter)."""
    blocks = s // (ROWS * sub)
    cap = max(1, min(SPLIT_PROGRAMS // (b * h), blocks * sub // SPLIT_MIN_STEPS))
    return max(p for p in range(1, cap + 1) if blocks % p == 0)


def kernel_args(q, cache: MK.MgpuKV, sm_scale: float, p: int):
    """(q as [B, H, 8, D] bf16 with padded heads, the kernel's static keywords)."""
    b, hq, d = q.shape
    h = cache.shape[1]
    if (cache.shape[2] // ROWS) % p:
        raise ValueError(f"{p} splits do not divide the cache's {cache.shape[2] // ROWS} "
                         f"{ROWS}-row blocks")
    qg = jnp.pad(q.reshape(b, h, hq // h, d), ((0, 0), (0, 0), (0, GQ - hq // h), (0, 0)))
    return qg.astype(jnp.bfloat16), dict(p=p, scale=sm_scale * AT.LOG2E * 2.0 ** FM.SHIFT)


def kernel_caches(cache: MK.MgpuKV) -> tuple[jax.Array, ...]:
    """The cache arrays in :func:`_attention_t`'s argument order (V scales as uint32 words)."""
    b, h, s, d = cache.shape
    vs32 = jax.lax.bitcast_convert_type(
        cache.v_scales.reshape(b, h, d // 16, s // 4, 4), jnp.uint32)
    return (cache.k_codes, cache.k_scales, cache.k_gscale, cache.v_codes, vs32, cache.v_gscale)
