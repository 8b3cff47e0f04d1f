"""Benchmark + GPU correctness for decode attention, KV append and quantize-with-hint (one H200).

    PYTHONUNBUFFERED=1 python -m pallas_kernels.bench_attention [--out DIR] [--quick]

Protocol (../shared/docs/PERFORMANCE.md): random data, correctness against the pure-JAX reference
in the same run (relative error; NaN fails), warm-up, block_until_ready, median of >= 20 timed
calls, copy bandwidth measured in the same run. Attention rows: GQA 32q/4kv head_dim 128, all
lengths = context; KV bytes = the K and V bytes of the valid rows. Baseline: the shipped
jax.experimental.pallas.ops.gpu.decode_attention.gqa (bf16, its [B, S, H, D] layout).
Writes kernels_attention.{json,md} to --out and prints the markdown table last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels.attention_triton import decode_attention_triton, kv_bytes, tuned_knobs
from pallas_kernels.decode_attention import decode_attention_reference
from pallas_kernels.kv_append import append_kv
from pallas_kernels.quantize_hint import (default_knobs, quantize_with_hint_reference,
                                         quantize_with_hint_triton)
from trace_jax.quant import quantize

warnings.filterwarnings("ignore")
TINY = "--tiny" in sys.argv  # CPU smoke test of this script: tiny shapes, interpret mode
# --device-time: beside each main-table time, the call's device time from a profile
# (pallas_kernels.devtime) and its % of a device-time copy bandwidth
DEVICE_TIME = "--device-time" in sys.argv
DEV = {}  # "copy_Bps": the device-time copy bandwidth, set in main()
if TINY:
    import functools as _ft

    decode_attention_triton = _ft.partial(decode_attention_triton, interpret=True)
    quantize_with_hint_triton = _ft.partial(quantize_with_hint_triton, interpret=True)


def timeit(f, *args, reps=20, warm=2):
    for _ in range(warm):
        jax.block_until_ready(f(*args))
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def copy_bandwidth():
    x = jax.random.normal(jax.random.PRNGKey(0), (1024 * 1024 * (1 if TINY else 1024),), jnp.float32)
    f = jax.jit(lambda a: a * 1.0001)
    t = timeit(f, x, reps=10)
    x_bytes = x.nbytes
    del x
    return 2 * x_bytes / t


def rel(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if not np.all(np.isfinite(a)):
        return float("nan")
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def make_cache(key, b, h, s, d, fmt):
    x = jax.random.normal(key, (b, h, s, d), jnp.bfloat16)
    if fmt == "bf16":
        return x
    q = jax.jit(lambda a: quantize(a, fmt, axis=-1, global_scope="row"))(x)
    del x
    return q


def attention_rows(ctxs, batches, cfgs, bw, quick, deadline=float("inf"), rows=None,
                   on_row=None):
    from jax.experimental.pallas.ops.gpu import decode_attention as shipped

    hq, h, d = 32, 4, 128
    rows = [] if rows is None else rows
    budget = 10e9  # bytes of bf16 KV allowed per config (sizes the batch)
    for s in ctxs:
        for b in batches:
            if kv_bytes(b, h, s, d, "bf16") > budget:
                continue
            if time.time() > deadline:
                print("time budget spent: attention row", b, s, "skipped", flush=True)
                continue
            kq, kk, kv = jax.random.split(jax.random.PRNGKey(s + b), 3)
            q = jax.random.normal(kq, (b, hq, d), jnp.bfloat16)
            lengths = jnp.full((b,), s, jnp.int32)
            res = {"batch": b, "context": s}
            # baseline: shipped bf16 Pallas gqa (BSHD layout)
            kb = make_cache(kk, b, h, s, d, "bf16")
            vb = make_cache(kv, b, h, s, d, "bf16")
            ks, vs = jnp.swapaxes(kb, 1, 2), jnp.swapaxes(vb, 1, 2)
            base = jax.jit(lambda q, k, v, L: shipped.gqa(q, k, v, kv_seq_len=L, interpret=TINY))
            t_base = timeit(base, q, ks, vs, lengths)
            del ks, vs
            res["shipped_bf16_us"] = t_base * 1e6
            keys = [k for k in ("bf16", "nvfp4", "nvfp4_v4", "nvfp4_v2", "mxfp4", "mxfp4_v4",
                                "mxfp4_v2") if k in cfgs]
            for fmt in keys:
                cfmt = fmt.split("_")[0]
                if fmt == "bf16":
                    kc, vc = kb, vb
                elif fmt == cfmt:
                    kc = jax.jit(lambda a: quantize(a, cfmt, axis=-1, global_scope="row"))(kb)
                    vc = jax.jit(lambda a: quantize(a, cfmt, axis=-1, global_scope="row"))(vb)
                cfg = cfgs[fmt]
                f = jax.jit(lambda q, k, v, L, cfg=cfg: decode_attention_triton(
                    q, k, v, L, sm_scale=d ** -0.5, **cfg))
                out = f(q, kc, vc, lengths)
                if True:  # relerr on the first 2 sequences at every shape (cheap)
                    refb = min(b, 2)
                    ref = decode_attention_reference(
                        q[:refb], jax.tree.map(lambda a: a[:refb] if a.shape[0] == b else a, kc),
                        jax.tree.map(lambda a: a[:refb] if a.shape[0] == b else a, vc),
                        lengths[:refb])
                    res[f"{fmt}_relerr"] = rel(out[:refb].astype(jnp.float32),
                                               ref.astype(jnp.float32))
                t = timeit(f, q, kc, vc, lengths)
                nbytes = kv_bytes(b, h, s, d, cfmt)
                if DEVICE_TIME and not fmt.endswith("_v2"):
                    from pallas_kernels.devtime import device_seconds

                    td = device_seconds(f, q, kc, vc, lengths)
                    res[f"{fmt}_device_us"] = td * 1e6
                    res[f"{fmt}_device_pct_copy"] = 100 * nbytes / td / DEV["copy_Bps"]
                res[f"{fmt}_us"] = t * 1e6
                res[f"{fmt}_TBps"] = nbytes / t / 1e12
                res[f"{fmt}_pct_copy"] = 100 * nbytes / t / bw
                res[f"{fmt}_vs_shipped"] = t_base / t
                if fmt.endswith("_v2"):  # the last variant of this format
                    del kc, vc
            for fmt in keys[1:]:
                res[f"{fmt}_vs_our_bf16"] = res["bf16_us"] / res[f"{fmt}_us"]
            for fmt in ("nvfp4", "mxfp4"):
                if f"{fmt}_v2_us" in res:
                    res[f"{fmt}_v3_vs_v2"] = res[f"{fmt}_v2_us"] / res[f"{fmt}_us"]
                if f"{fmt}_v4_us" in res:  # v4 runs the tuned v3 config with decode="v4"
                    res[f"{fmt}_v4_vs_v3"] = res[f"{fmt}_us"] / res[f"{fmt}_v4_us"]
            del kb, vb
            rows.append(res)
            print(json.dumps(res), flush=True)
            if on_row:
                on_row()
    return rows


V2_CFG = dict(decode="v2", block_k=32, num_warps=1, num_stages=2, split_target=8192)
# v3 knobs: (block_k, num_warps, num_stages, split_target, chains)
V3_GRID = [(16, 1, 2, 8192, 1), (32, 1, 2, 8192, 1), (16, 1, 2, 4096, 1), (16, 1, 3, 8192, 1),
           (16, 1, 2, 16384, 1), (32, 2, 2, 4096, 1), (32, 4, 2, 2048, 1), (64, 4, 2, 2048, 1),
           (64, 2, 2, 4096, 1), (16, 1, 2, 8192, 2), (128, 4, 2, 2048, 1), (32, 4, 3, 2048, 1),
           (64, 4, 3, 1024, 1), (32, 1, 2, 2048, 1)]


# v4 only, beyond V3_GRID: neighbours of session 4's default (block_k 128, 4 warps, split target
# 2048, already in V3_GRID; session 5's sweep ran it twice, 484 and 585 us) and of the current
# defaults (attention_triton.tuned_knobs: NVFP4 32/1/3, MXFP4 64/2/2)
V4_EXTRA = [(128, 4, 3, 2048, 1), (64, 2, 3, 4096, 1), (32, 2, 3, 4096, 1), (32, 1, 3, 8192, 1),
            (128, 8, 2, 1024, 1)]


def sweep(bw, deadline=float("inf"), decode="v3"):
    """Tune the kernels on B=32, 32K for each cache format: bf16 (its known best), FP4 v2 (its
    known best, for the side-by-side) and the v3 knob grid; every config's output is checked
    against the pure-JAX reference on the first 2 sequences. ``decode``: the FP4 kernel version
    the knob grid is swept for (v3 or v4)."""
    b, hq, h, s, d = (2, 32, 4, 256, 128) if TINY else (32, 32, 4, 32768, 128)
    q = jax.random.normal(jax.random.PRNGKey(1), (b, hq, d), jnp.bfloat16)
    lengths = jnp.full((b,), s, jnp.int32)
    kb = make_cache(jax.random.PRNGKey(2), b, h, s, d, "bf16")
    vb = make_cache(jax.random.PRNGKey(3), b, h, s, d, "bf16")
    best, log = {}, []
    for fmt in ("bf16", "nvfp4", "mxfp4"):
        if time.time() > deadline and fmt in best:
            continue
        if fmt == "bf16":
            kc, vc = kb, vb
        else:
            kc = jax.jit(lambda a: quantize(a, fmt, axis=-1, global_scope="row"))(kb)
            vc = jax.jit(lambda a: quantize(a, fmt, axis=-1, global_scope="row"))(vb)
        bt = None
        if fmt == "bf16":
            grid = [dict(block_k=128, num_warps=8, num_stages=2, split_target=2048)]
        else:
            grid = [dict(V2_CFG)] + [
                dict(decode=decode, block_k=bk, num_warps=nw, num_stages=ns, split_target=tgt,
                     chains=ch) for bk, nw, ns, tgt, ch in V3_GRID + (
                         V4_EXTRA if decode == "v4" else [])]
            if TINY:
                grid = grid[:3] + [c for c in grid if c.get("chains") == 2]
            ref = decode_attention_reference(
                q[:2], jax.tree.map(lambda a: a[:2] if a.shape[0] == b else a, kc),
                jax.tree.map(lambda a: a[:2] if a.shape[0] == b else a, vc), lengths[:2])
        for cfg in grid:
                    if time.time() > deadline and fmt in best and fmt + "_v2" in best:
                        print("time budget spent: sweep stops", fmt, flush=True)
                        break
                    relerr = None
                    try:
                        f = jax.jit(lambda q, k, v, L, cfg=cfg: decode_attention_triton(
                            q, k, v, L, sm_scale=d ** -0.5, **cfg))
                        out = f(q, kc, vc, lengths)
                        if fmt != "bf16":
                            relerr = rel(out[:2].astype(jnp.float32), ref.astype(jnp.float32))
                        t = timeit(f, q, kc, vc, lengths, reps=10, warm=1)
                    except Exception as e:  # noqa: BLE001
                        log.append({"fmt": fmt, **cfg, "error": repr(e)[:200]})
                        print("sweep fail", fmt, cfg, repr(e)[:300], flush=True)
                        continue
                    pct = 100 * kv_bytes(b, h, s, d, fmt) / t / bw
                    log.append({"fmt": fmt, **cfg, "us": t * 1e6, "pct_copy": pct,
                                "relerr": relerr})
                    print("sweep", fmt, cfg, f"{t * 1e6:.0f} us {pct:.1f}% relerr {relerr}",
                          flush=True)
                    if cfg.get("decode") == "v2":
                        best[fmt + "_v2"] = cfg
                    elif relerr is not None and not relerr < 2e-2:
                        print("sweep: config rejected (inexact)", fmt, cfg, flush=True)
                    elif bt is None or t < bt:
                        bt, best[fmt] = t, cfg
    return best, log


def variants_rows(best, bw):
    """B=32, 32K (8K on --tiny): cost of precision="f32" (P split in two bf16 MMAs) vs "bf16",
    and the v1 decode, each with the best config of its format."""
    b, hq, h, s, d = (2, 32, 4, 256, 128) if TINY else (32, 32, 4, 32768, 128)
    q = jax.random.normal(jax.random.PRNGKey(1), (b, hq, d), jnp.bfloat16)
    lengths = jnp.full((b,), s, jnp.int32)
    kb = make_cache(jax.random.PRNGKey(2), b, h, s, d, "bf16")
    vb = make_cache(jax.random.PRNGKey(3), b, h, s, d, "bf16")
    rows = []
    for fmt in ("bf16", "nvfp4", "mxfp4"):
        kc = kb if fmt == "bf16" else quantize(kb, fmt, axis=-1, global_scope="row")
        vc = vb if fmt == "bf16" else quantize(vb, fmt, axis=-1, global_scope="row")
        for name, extra in (("f32P", dict(precision="f32")), ("bf16P", dict(precision="bf16")),
                            ("v1_bf16P", dict(precision="bf16", decode="v1"))):
            if fmt == "bf16" and name == "v1_bf16P":
                continue
            cfg = dict(best[fmt], **extra)
            if name == "v1_bf16P":
                cfg.update(block_k=64, num_warps=4, num_stages=2)  # v1's tuned config
            f = jax.jit(lambda q, k, v, L, cfg=cfg: decode_attention_triton(
                q, k, v, L, sm_scale=d ** -0.5, **cfg))
            try:
                t = timeit(f, q, kc, vc, lengths)
            except Exception as e:  # noqa: BLE001
                print("variant fail", fmt, name, repr(e)[:300], flush=True)
                continue
            row = {"fmt": fmt, "variant": name, "us": t * 1e6,
                   "pct_copy": 100 * kv_bytes(b, h, s, d, fmt) / t / bw}
            rows.append(row)
            print("variant", row, flush=True)
    return rows


def v3_check():
    """GPU correctness of the v3 and v4 kernels: ragged lengths (1 row, a partial block, full),
    several configs, f32 output, against the pure-JAX reference (f32 out), v2, and v4 vs v3."""
    b, hq, h, s, d = (4, 32, 4, (512 if TINY else 32768), 128)
    q = jax.random.normal(jax.random.PRNGKey(31), (b, hq, d), jnp.bfloat16)
    lengths = jnp.asarray([1, 1000, s - 13, s], jnp.int32)
    kb = jax.random.normal(jax.random.PRNGKey(32), (b, h, s, d), jnp.float32) * 2
    vb = jax.random.normal(jax.random.PRNGKey(33), (b, h, s, d), jnp.float32)
    from trace_jax import ops
    out = {}
    for fmt in ("nvfp4", "mxfp4"):
        kc = quantize(kb, fmt, axis=-1, global_scope="row")
        vc = quantize(vb, fmt, axis=-1, global_scope="row")
        ref = ops.decode_attention_reference(q.astype(jnp.float32), kc, vc, lengths)
        v2 = decode_attention_triton(q, kc, vc, lengths, sm_scale=d ** -0.5, decode="v2",
                                     out_dtype=jnp.float32)
        out[f"{fmt}_v2_vs_ref"] = rel(v2, ref)
        for cfg in (dict(), dict(block_k=16), dict(block_k=16, chains=2),
                    dict(block_k=64, num_warps=4, num_splits=4)):
            # explicit knobs: v3 and v4 default to different tilings (then their split
            # combines differ in the last bits), and this check wants the same arithmetic
            knobs = dict(zip(("block_k", "num_warps", "num_stages"),
                             tuned_knobs(fmt, "v3")), **cfg)
            got = decode_attention_triton(q, kc, vc, lengths, sm_scale=d ** -0.5, decode="v3",
                                          out_dtype=jnp.float32, **knobs)
            name = "_".join(f"{k}{v}" for k, v in cfg.items()) or "default"
            out[f"{fmt}_v3_{name}_vs_ref"] = rel(got, ref)
            out[f"{fmt}_v3_{name}_vs_v2"] = rel(got, v2)
            g4 = decode_attention_triton(q, kc, vc, lengths, sm_scale=d ** -0.5, decode="v4",
                                         out_dtype=jnp.float32, **knobs)
            out[f"{fmt}_v4_{name}_vs_ref"] = rel(g4, ref)
            out[f"{fmt}_v4_{name}_vs_v3"] = rel(g4, got)  # expected 0 (same arithmetic)
    print("v3_check", json.dumps(out), flush=True)
    return out


def long_context_check():
    """128K context: kernel vs f32 reference vs float64 numpy (one sequence, 32q/4kv)."""
    b, hq, h, s, d = 2, 32, 4, (1024 if TINY else 131072), 128
    q = jax.random.normal(jax.random.PRNGKey(9), (b, hq, d), jnp.bfloat16)
    lengths = jnp.asarray([s, s - 1001], jnp.int32)
    out = {}
    kb = make_cache(jax.random.PRNGKey(10), b, h, s, d, "bf16")
    vb = make_cache(jax.random.PRNGKey(11), b, h, s, d, "bf16")
    for fmt in ("bf16", "nvfp4", "mxfp4"):
        kc = kb if fmt == "bf16" else quantize(kb, fmt, axis=-1, global_scope="row")
        vc = vb if fmt == "bf16" else quantize(vb, fmt, axis=-1, global_scope="row")
        got = decode_attention_triton(q, kc, vc, lengths, sm_scale=d ** -0.5)
        ref = decode_attention_reference(q, kc, vc, lengths)
        # float64 on the host for sequence 1 (length s - 1001), dequantized cache
        from trace_jax.quant import dequantize
        kf = np.asarray(dequantize(kc) if fmt != "bf16" else kc.astype(jnp.float32))[1]
        vf = np.asarray(dequantize(vc) if fmt != "bf16" else vc.astype(jnp.float32))[1]
        n = int(lengths[1])
        qf = np.asarray(q[1], np.float64).reshape(h, hq // h, d)
        sc = np.einsum("hgd,hsd->hgs", qf, kf[:, :n].astype(np.float64)) / np.sqrt(d)
        p = np.exp(sc - sc.max(-1, keepdims=True))
        o64 = np.einsum("hgs,hsd->hgd", p, vf[:, :n].astype(np.float64)) / p.sum(-1)[..., None]
        o64 = o64.reshape(hq, d)
        out[fmt] = {"kernel_vs_ref_f32": rel(got.astype(jnp.float32), ref.astype(jnp.float32)),
                    "kernel_vs_f64": rel(got[1].astype(jnp.float32), o64),
                    "ref_vs_f64": rel(ref[1].astype(jnp.float32), o64)}
        # before the bf16 output rounding: the kernel's own accuracy, P in f32 (split) vs bf16
        from trace_jax import ops
        ref32 = ops.decode_attention_reference(q[1:].astype(jnp.float32),
                                               jax.tree.map(lambda a: a[1:] if a.shape[0] == b else a, kc),
                                               jax.tree.map(lambda a: a[1:] if a.shape[0] == b else a, vc),
                                               lengths[1:])
        out[fmt]["ref_f32out_vs_f64"] = rel(ref32[0], o64)
        for prec in ("f32", "bf16"):
            g32 = decode_attention_triton(q, kc, vc, lengths, sm_scale=d ** -0.5,
                                          precision=prec, out_dtype=jnp.float32)
            out[fmt][f"kernel_f32out_{prec}P_vs_f64"] = rel(g32[1], o64)
        if fmt != "bf16":  # ("kernel_*" above = the default decode: v4 at head_dim 128)
            for dec in ("v2", "v3", "v4"):
                g32 = decode_attention_triton(q, kc, vc, lengths, sm_scale=d ** -0.5,
                                              decode=dec, out_dtype=jnp.float32)
                out[fmt][f"{dec}_f32out_f32P_vs_f64"] = rel(g32[1], o64)
        print("long128k", fmt, out[fmt], flush=True)
    return out


def append_rows():
    b, h, s, d = (2, 4, 256, 128) if TINY else (32, 4, 32768, 128)
    rows = []
    for fmt in ("bf16", "nvfp4"):
        cache = make_cache(jax.random.PRNGKey(4), b, h, s, d, fmt)
        new = jax.random.normal(jax.random.PRNGKey(5), (b, h, 1, d), jnp.bfloat16)
        pos = jnp.full((b,), s // 2, jnp.int32)
        step = jax.jit(append_kv, donate_argnums=0)
        for _ in range(3):
            cache = step(cache, new, pos)
        jax.block_until_ready(cache)
        ts = []
        for _ in range(20):
            t = time.perf_counter()
            cache = step(cache, new, pos)
            jax.block_until_ready(cache)
            ts.append(time.perf_counter() - t)
        cache_bytes = sum(x.nbytes for x in jax.tree.leaves(cache))
        rows.append({"fmt": fmt, "batch": b, "S": s, "append_us": statistics.median(ts) * 1e6,
                     "cache_MB": cache_bytes / 1e6})
        print("append", rows[-1], flush=True)
        del cache
    return rows


def quantize_rows(bw, rows=None, on_row=None):
    """Quantize-with-hint timing and bit identity per shape; each row is appended to ``rows`` and
    handed to ``on_row`` as it is measured (a time limit then keeps the rows done so far)."""
    rows = [] if rows is None else rows
    u8 = lambda a: np.asarray(jax.lax.bitcast_convert_type(a, jnp.uint8))  # noqa: E731
    shapes = ((8192, 2048), (32768, 2048), (65536, 4096)) if not TINY else ((8192, 2048), (64, 768))
    for (m, k) in shapes:
        if TINY and m == 8192:
            m = 16
        for fmt, scope in (("nvfp4", "row"), ("mxfp4", "row"), ("nvfp4", "tensor")):
            x = jax.random.normal(jax.random.PRNGKey(m + k), (m, k), jnp.float32)
            x = (x * jnp.exp(2 * jax.random.normal(jax.random.PRNGKey(1), (m, 1)))).astype(
                jnp.bfloat16)
            if k == 2048:  # edge rows: zeros, NaN, Inf, tiny, exact ties
                x = x.at[0].set(0).at[1, 5].set(jnp.nan).at[2, 9].set(jnp.inf)
                x = x.at[3].set(1e-38).at[4, :8].set(jnp.asarray(
                    [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0], jnp.bfloat16))
            best = None
            # the defaults (v3, one walk) and v2's tuned configs (two walks); the knob sweep in
            # device time is pallas_kernels/sweep_quantize.py
            kd = default_knobs(k)
            for bm, nw, kc, one in ((kd["block_m"], kd["num_warps"], kd["chunk_k"], True),
                                    (8, 4, 256, False), (16, 8, 512, False)):
                    if TINY and bm > m:
                        continue
                    f = jax.jit(lambda x, bm=bm, nw=nw, kc=kc, one=one: quantize_with_hint_triton(
                        x, fmt, global_scope=scope, block_m=bm, num_warps=nw, chunk_k=kc,
                        single_walk=one))
                    try:
                        t = timeit(f, x)
                    except Exception as e:  # noqa: BLE001
                        print("qh fail", bm, nw, repr(e)[:300], flush=True)
                        continue
                    if best is None or t < best[0]:
                        best = (t, bm, nw, f)
            t, bm, nw, f = best
            qr, hr = jax.jit(lambda x: quantize_with_hint_reference(x, fmt, global_scope=scope))(x)
            qk, hk = f(x)
            same = {
                "codes": bool(np.array_equal(qk.codes, qr.codes)),
                "scales": bool(np.array_equal(u8(qk.scales), u8(qr.scales))),
                "global": bool(np.array_equal(  # bit patterns (NaN rows included)
                    np.asarray(qk.global_scale, np.float32).view(np.uint32),
                    np.asarray(qr.global_scale, np.float32).view(np.uint32))),
                "bits": bool(np.array_equal(hk.bits, hr.bits)),
            }
            if not all(same.values()):
                bad = np.nonzero((np.asarray(qk.codes) != np.asarray(qr.codes)).any(1))[0]
                same["bad_rows"] = bad[:10].tolist()
            if fmt == "nvfp4" and not all(same.values()):
                same["diagnosis"] = e4m3_diagnosis(x, qr, qk, scope)
                fv = jax.jit(lambda x, bm=bm, nw=nw: quantize_with_hint_triton(
                    x, fmt, global_scope=scope, block_m=bm, num_warps=nw, e4m3="via_f16"))
                q2, h2 = fv(x)
                same["via_f16_identical"] = bool(
                    np.array_equal(q2.codes, qr.codes) and np.array_equal(h2.bits, hr.bits)
                    and np.array_equal(u8(q2.scales), u8(qr.scales)))
            nbytes = m * k * 2 + m * k // 2 + m * k // quantize_block(fmt) + m * k // 8 + 4 * m
            tr = timeit(jax.jit(lambda x: quantize_with_hint_reference(
                x, fmt, global_scope=scope)), x)
            row = {"M": m, "K": k, "fmt": fmt, "scope": scope, "block_m": bm, "num_warps": nw,
                   "us": t * 1e6, "TBps": nbytes / t / 1e12, "pct_copy": 100 * nbytes / t / bw,
                   "xla_ref_us": tr * 1e6, "bit_identical": same}
            if DEVICE_TIME:
                from pallas_kernels.devtime import device_seconds

                td = device_seconds(f, x)
                row.update(device_us=td * 1e6, device_pct_copy=100 * nbytes / td / DEV["copy_Bps"])
            rows.append(row)
            print("qh", json.dumps(row), flush=True)
            if on_row is not None:
                on_row()
    return rows


def e4m3_diagnosis(x, qr, qk, scope):
    """Where nvfp4 block scales differ: recompute raw = amax_b * (1 / (6 g)) in numpy (IEEE f32)
    and round it to e4m3 once (ml_dtypes) or through f16; count which matches the GPU reference
    and which the kernel."""
    import ml_dtypes
    xf = np.asarray(x, np.float32)
    g = np.asarray(qr.global_scale, np.float32)
    g = np.broadcast_to(g, (xf.shape[0], 1))
    inv = (np.float32(1) / (np.float32(6) * g)).astype(np.float32)
    amax_b = np.abs(xf.reshape(xf.shape[0], -1, 16)).max(-1)
    raw = np.minimum(amax_b * inv, np.float32(448)).astype(np.float32)
    direct = raw.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    via16 = raw.astype(np.float16).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    ref = np.asarray(jax.lax.bitcast_convert_type(qr.scales, jnp.uint8))
    ker = np.asarray(jax.lax.bitcast_convert_type(qk.scales, jnp.uint8))
    ok = np.isfinite(raw)
    return {"ref_ne_direct": int(((ref != direct) & ok).sum()),
            "ref_ne_via_f16": int(((ref != via16) & ok).sum()),
            "kernel_ne_direct": int(((ker != direct) & ok).sum()),
            "kernel_ne_via_f16": int(((ker != via16) & ok).sum()),
            "ref_ne_kernel": int((ref != ker).sum())}


def quantize_block(fmt):
    return 16 if fmt == "nvfp4" else 32


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "experiments/results"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--skip", default="")
    ap.add_argument("--sweep-seconds", type=float, default=1e9,
                    help="stop the sweep (after the v2 config and one v3 config per format) "
                         "once this much time has passed since the start")
    ap.add_argument("--sweep-decode", default="v3", choices=["v3", "v4"],
                    help="FP4 kernel version whose knobs the sweep tunes")
    ap.add_argument("--max-seconds", type=float, default=1e9,
                    help="skip the remaining sections once this much time has passed")
    ap.add_argument("--device-time", action="store_true",
                    help="also each main-table call's device time (profile) vs a device-time "
                         "copy bandwidth")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    info = {"device": str(jax.devices()[0].device_kind), "jax": jax.__version__,
            "command": " ".join(sys.argv)}
    bw = copy_bandwidth()
    info["copy_TBps"] = bw / 1e12
    print("copy bandwidth TB/s", bw / 1e12, flush=True)
    if DEVICE_TIME:
        from pallas_kernels.devtime import copy_bandwidth_device

        DEV["copy_Bps"] = copy_bandwidth_device(1 << (20 if TINY else 30))
        info["copy_device_TBps"] = DEV["copy_Bps"] / 1e12
        print("copy bandwidth (device time) TB/s", DEV["copy_Bps"] / 1e12, flush=True)
    res = {"info": info}
    skip = a.skip.split(",")

    def save():
        info["elapsed_s"] = time.time() - t0
        with open(os.path.join(a.out, "kernels_attention.json"), "w") as f:
            json.dump(res, f, indent=1)
        with open(os.path.join(a.out, "kernels_attention.md"), "w") as f:
            f.write(to_markdown(res))

    def want(name):
        if name in skip:
            return False
        if time.time() - t0 > a.max_seconds:
            print("time budget spent: skipping", name, flush=True)
            res.setdefault("skipped", []).append(name)
            return False
        return True

    if want("v3check"):
        res["v3_check"] = v3_check()
        save()
    best = {"bf16": dict(block_k=128, num_warps=8, num_stages=2, split_target=2048),
            "nvfp4": dict(decode="v3"), "mxfp4": dict(decode="v3"),
            "nvfp4_v2": dict(decode="v2"), "mxfp4_v2": dict(decode="v2")}
    if want("sweep"):
        best, log = sweep(bw, deadline=t0 + a.sweep_seconds, decode=a.sweep_decode)
        res["sweep"] = log
    for fmt in ("nvfp4", "mxfp4"):  # v4 side by side: the tuned v3 config's knobs when a v3
        if best.get(fmt, {}).get("decode") == "v3":  # sweep ran, else v4's own defaults
            best[fmt + "_v4"] = {**best[fmt], "decode": "v4"}
    res["best_cfg"] = best
    print("best", best, flush=True)
    save()
    if want("attention"):
        ctxs = (32768, 131072, 8192) if not TINY else (256,)  # most important first (time guard)
        batches = ((8, 32, 128) if not a.quick else (8,)) if not TINY else (2,)
        res["attention"] = []
        attention_rows(ctxs, batches, best, bw, a.quick, deadline=t0 + a.max_seconds,
                       rows=res["attention"], on_row=save)
        save()
    if want("long"):
        res["long_context_128k"] = long_context_check()
        save()
    if want("qh"):
        res["quantize_hint"] = []
        quantize_rows(bw, rows=res["quantize_hint"], on_row=save)
        save()
    if want("variants"):
        res["variants"] = variants_rows(best, bw)
        save()
    if want("append"):
        res["append"] = append_rows()
        save()
    save()
    print(to_markdown(res))


def to_markdown(res):
    i = res["info"]
    lines = [f"# Decode attention / quantize-with-hint on {i['device']} (jax {i['jax']})", "",
             f"copy bandwidth {i['copy_TBps']:.2f} TB/s; command `{i['command']}`; "
             f"best configs {res.get('best_cfg')}", "",
             "FP4 columns: the tuned kernel (`best_cfg`: v3, swept or with its defaults), v4 "
             "(`decode=\"v4\"` with the swept v3 knobs, or with its own defaults when no sweep "
             "ran; `best_cfg` lists what each column ran) and the v2 kernel (`_v2`).", "",
             "| B | ctx | shipped bf16 us | our bf16 us (%copy) | nvfp4 us (%copy, x shipped, "
             "x our bf16) | nvfp4 v4 us (%copy) | nvfp4 v2 us (%copy) | mxfp4 us (%copy, x "
             "shipped, x our bf16) | mxfp4 v4 us (%copy) | mxfp4 v2 us (%copy) | relerr "
             "bf16/nv/nv_v4/nv_v2/mx/mx_v4/mx_v2 |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def cell(r, f, full=True):
        if f"{f}_us" not in r:
            return "-"
        c = f"{r[f + '_us']:.0f} ({r[f + '_pct_copy']:.0f}%"
        if full:
            c += f", {r[f + '_vs_shipped']:.2f}x, {r[f + '_vs_our_bf16']:.2f}x"
        return c + ")"

    for r in sorted(res.get("attention", []), key=lambda r: (r["context"], r["batch"])):
        err = "/".join(f"{r.get(f + '_relerr', float('nan')):.1e}"
                       for f in ("bf16", "nvfp4", "nvfp4_v4", "nvfp4_v2", "mxfp4", "mxfp4_v4",
                                 "mxfp4_v2"))
        lines.append(
            f"| {r['batch']} | {r['context']} | {r['shipped_bf16_us']:.0f} | "
            f"{cell(r, 'bf16', False)} | {cell(r, 'nvfp4')} | {cell(r, 'nvfp4_v4', False)} | "
            f"{cell(r, 'nvfp4_v2', False)} | {cell(r, 'mxfp4')} | {cell(r, 'mxfp4_v4', False)} | "
            f"{cell(r, 'mxfp4_v2', False)} | {err} |")
    dev = [r for r in res.get("attention", []) if "nvfp4_device_us" in r or "bf16_device_us" in r]
    if dev:
        lines += ["", f"Device time (profile of 5 calls: the kernels only, no launch or host "
                  f"time) vs a device-time copy bandwidth of {i['copy_device_TBps']:.2f} TB/s:", "",
                  "| B | ctx | " + " | ".join(f"{f} device us (%copy)" for f in
                                               ("bf16", "nvfp4", "nvfp4_v4", "mxfp4", "mxfp4_v4"))
                  + " |", "|---|---|---|---|---|---|---|"]
        for r in sorted(dev, key=lambda r: (r["context"], r["batch"])):
            cells = [f"{r[f + '_device_us']:.0f} ({r[f + '_device_pct_copy']:.0f}%)"
                     if f + "_device_us" in r else "-"
                     for f in ("bf16", "nvfp4", "nvfp4_v4", "mxfp4", "mxfp4_v4")]
            lines.append(f"| {r['batch']} | {r['context']} | " + " | ".join(cells) + " |")
    if "sweep" in res:
        lines += ["", "Sweep (B=32, 32K; us, %copy, relerr of the first 2 sequences vs the "
                  "reference):", ""]
        for r in res["sweep"]:
            cfg = {k: v for k, v in r.items() if k not in ("fmt", "us", "pct_copy", "relerr")}
            if "us" in r:
                lines.append(f"- {r['fmt']} {cfg}: {r['us']:.0f} us ({r['pct_copy']:.0f}%), "
                             f"relerr {r.get('relerr')}")
            else:
                lines.append(f"- {r['fmt']} {cfg}: error")
    if "v3_check" in res:
        lines += ["", "v3 GPU check (ragged lengths 1/1000/S-13/S, S=32K, f32 out, rel. L2): "
                  + ", ".join(f"{k} {v:.1e}" for k, v in res["v3_check"].items())]
    if "variants" in res:
        lines += ["", "B=32, 32K: precision / decode variants (us, %copy):", ""]
        for r in res["variants"]:
            lines.append(f"- {r['fmt']} {r['variant']}: {r['us']:.0f} us ({r['pct_copy']:.0f}%)")
    if "skipped" in res:
        lines += ["", f"skipped (time budget): {res['skipped']}"]
    if "long_context_128k" in res:
        lines += ["", "128K context accuracy (rel. L2 error):", ""]
        for f, v in res["long_context_128k"].items():
            lines.append(f"- {f}: " + ", ".join(f"{k} {x:.2e}" for k, x in v.items()))
    if "append" in res:
        lines += ["", "append_kv (jit, donated cache, 1 new token):", ""]
        for r in res["append"]:
            lines.append(f"- {r['fmt']} B={r['batch']} S={r['S']} cache {r['cache_MB']:.0f} MB: "
                         f"{r['append_us']:.1f} us")
    if "quantize_hint" in res:
        lines += ["", "| quantize_with_hint M x K | fmt/scope | us | TB/s | %copy | device us "
                  "(%copy, device) | XLA ref us | bit-identical |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in res["quantize_hint"]:
            d = (f"{r['device_us']:.1f} ({r['device_pct_copy']:.0f}%)" if "device_us" in r
                 else "-")
            lines.append(f"| {r['M']}x{r['K']} | {r['fmt']}/{r['scope']} | {r['us']:.1f} | "
                         f"{r['TBps']:.2f} | {r['pct_copy']:.0f}% | {d} | {r['xla_ref_us']:.1f} | "
                         f"{r['bit_identical']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
