"""Benchmark the FP4 matmul kernels against XLA bf16 baselines on one GPU (see PERFORMANCE.md).

  PYTHONUNBUFFERED=1 python -m pallas_kernels.bench_matmul [--out DIR] [--quick]

Each timed call is a jitted lax.scan over R copies of the weights (R chosen so the rotated bf16
weights exceed L2 by >= 4x, R <= 64); time per matmul = median over 20 repeats / R. The same run
measures the device copy bandwidth and checks every kernel against the pure-JAX reference.
Bytes counted: weight codes + block scales (or bf16 weights) + x (bf16) + out (bf16); grouped: only
the experts with a non-empty group.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import fp4_matmul as fm
from pallas_kernels import matmul_triton as mt
from trace_jax import quant

T0 = time.time()
ROT_BYTES = 256 << 20
L2_GUARD_S = float(os.environ.get("BENCH_TIME_LIMIT_S", "470"))


def timeit(f, *args, n=20):
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def copy_bandwidth():
    x = jax.random.normal(jax.random.key(0), (1 << 29,), jnp.float32)  # 2 GiB
    f = jax.jit(lambda a: a * 1.0001)
    t = timeit(f, x)
    return 2 * x.nbytes / t


def rel_err(out, ref):
    out = np.asarray(out, np.float32)
    ref = np.asarray(ref, np.float32)
    if not np.all(np.isfinite(out)):
        return float("nan")
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))


def scan_time(fn, ws, x, r):
    """Median time of one fn(x, w) over a scan of r stacked weights."""

    @jax.jit
    def run(x, ws):
        def body(c, w):
            return c, fn(x, w)

        return jax.lax.scan(body, 0, ws)[1]

    return timeit(run, x, ws) / r


def stack(tree, r):
    return jax.tree.map(lambda a: jnp.stack([a] * r) if r > 1 else a[None], tree)


def rotations(bf16_bytes):
    return int(min(64, max(2, -(-ROT_BYTES // bf16_bytes))))


ROWS: list[dict] = []


def record(**row):
    ROWS.append(row)
    print(json.dumps(row), flush=True)


def bench_dense(k, n, ms, fmts, variants, bw):
    key = jax.random.key(k * 7 + n)
    w32 = jax.random.normal(key, (k, n), jnp.float32)
    wb = w32.astype(jnp.bfloat16)
    r = rotations(wb.nbytes)
    wbs = jnp.stack([wb * (1 + 0.01 * i) for i in range(r)]).astype(jnp.bfloat16)
    for m in ms:
        if time.time() - T0 > L2_GUARD_S:
            print(f"time guard: skipping dense {k}x{n} M={m}", flush=True)
            return
        x = jax.random.normal(jax.random.fold_in(key, m), (m, k), jnp.float32).astype(jnp.bfloat16)
        io = m * k * 2 + m * n * 2
        t_bf = scan_time(lambda x, w: jnp.dot(x, w, preferred_element_type=jnp.float32)
                         .astype(jnp.bfloat16), wbs, x, r)
        b = wb.nbytes + io
        record(kind="dense", k=k, n=n, m=m, fmt="bf16", variant="xla_dot", us=t_bf * 1e6,
               bytes=b, gbps=b / t_bf / 1e9, pct_copy=100 * b / t_bf / bw, speedup=1.0, rel_err=0.0)
        for fmt in fmts:
            fw = fm.prepare_weights(quant.quantize(w32, fmt, axis=-2))
            ref = fm.fp4_matmul_reference(x, fw)
            b = fw.nbytes + io
            fws = stack(fw, r)
            for name, cfg in variants(m, k, n, fmt):
                try:
                    out = jax.jit(lambda x, w, cfg=cfg: mt.dense(x, w, cfg))(x, fw)
                    err = rel_err(out, ref)
                    t = scan_time(lambda x, w, cfg=cfg: mt.dense(x, w, cfg), fws, x, r)
                except Exception as e:  # noqa: BLE001 - report and continue
                    print(f"FAILED dense {k}x{n} M={m} {fmt} {name}: {type(e).__name__}: "
                          f"{str(e)[:300]}", flush=True)
                    continue
                record(kind="dense", k=k, n=n, m=m, fmt=fmt, variant=name, us=t * 1e6, bytes=b,
                       gbps=b / t / 1e9, pct_copy=100 * b / t / bw, speedup=t_bf / t, rel_err=err)
            if fmt == "nvfp4" and m in (8, 64) and k == 2048:
                try:
                    xq = quant.quantize(x.astype(jnp.float32), "nvfp4", global_scope="row")
                    ref4 = fm.fp4_matmul_reference(xq, fw)
                    out = jax.jit(lambda x, w: fm.fp4_matmul(x, w, backend="triton"))(xq, fw)
                    t = scan_time(lambda x, w: fm.fp4_matmul(x, w, backend="triton"), fws, xq, r)
                except Exception as ex:  # noqa: BLE001
                    print(f"FAILED w4a4 {k}x{n} M={m}: {type(ex).__name__}: {str(ex)[:300]}",
                          flush=True)
                    continue
                record(kind="dense", k=k, n=n, m=m, fmt="nvfp4-w4a4", variant="default",
                       us=t * 1e6, bytes=b, gbps=b / t / 1e9, pct_copy=100 * b / t / bw,
                       speedup=t_bf / t, rel_err=rel_err(out, ref4))


def dense_variants(m, k, n, fmt):
    d = mt.default_config(m, k, n, grouped=False)
    out = [("default", d)]
    if fmt != "nvfp4":
        return out
    if m <= 64:
        out.append(("bn64_w4", mt.Config(bm=d.bm, bn=64, bk=128, split_k=d.split_k, num_warps=4,
                                         num_stages=4)))
        out.append(("bk256_w8", mt.Config(bm=d.bm, bn=128, bk=256,
                                          split_k=max(1, d.split_k // 2), num_warps=8,
                                          num_stages=3)))
    else:
        out.append(("bm128_bn256_w8", mt.Config(bm=128, bn=256, bk=64, split_k=1, num_warps=8,
                                                num_stages=3)))
    return out


def route(tokens, e, topk, key):
    logits = jax.random.normal(key, (tokens, e))
    _, idx = jax.lax.top_k(logits, topk)
    return jnp.bincount(idx.reshape(-1), length=e).astype(jnp.int32)


def bench_grouped(k, n, token_counts, e, topk, bw):
    key = jax.random.key(k + 3 * n)
    w32 = jax.random.normal(key, (e, k, n), jnp.float32)
    wb = w32.astype(jnp.bfloat16)
    fw = fm.prepare_weights(quant.quantize(w32, "nvfp4", axis=-2))
    del w32
    r = 2
    wbs = jnp.stack([wb, wb * 1.01]).astype(jnp.bfloat16)
    fws = stack(fw, r)
    per_e_fp4 = fw.nbytes / e
    for tok in token_counts:
        if time.time() - T0 > L2_GUARD_S:
            print(f"time guard: skipping grouped {k}x{n} T={tok}", flush=True)
            return
        gs = route(tok, e, topk, jax.random.fold_in(key, tok))
        m = tok * topk
        touched = int(jnp.sum(gs > 0))
        x = jax.random.normal(jax.random.fold_in(key, 1000 + tok), (m, k)).astype(jnp.bfloat16)
        io = m * k * 2 + m * n * 2
        t_bf = scan_time(lambda x, w: jax.lax.ragged_dot(x, w, gs), wbs, x, r)
        b = touched * k * n * 2 + io
        record(kind="grouped", k=k, n=n, m=m, tokens=tok, experts_touched=touched, fmt="bf16",
               variant="ragged_dot", us=t_bf * 1e6, bytes=b, gbps=b / t_bf / 1e9,
               pct_copy=100 * b / t_bf / bw, speedup=1.0, rel_err=0.0)
        ref = fm.fp4_grouped_matmul_reference(x, fw, gs)
        b = int(touched * per_e_fp4) + io
        d = mt.default_config(m, k, n, grouped=True)
        for name, cfg in [("default", d),
                          ("bm32", mt.Config(bm=32, bn=d.bn, bk=128, num_warps=4, num_stages=4)),
                          ("bn64", mt.Config(bm=16, bn=64, bk=128, num_warps=4, num_stages=4))]:
            try:
                out = jax.jit(lambda x, w, cfg=cfg: mt.grouped(x, w, gs, cfg))(x, fw)
                err = rel_err(out, ref)
                t = scan_time(lambda x, w, cfg=cfg: mt.grouped(x, w, gs, cfg), fws, x, r)
            except Exception as ex:  # noqa: BLE001
                print(f"FAILED grouped {k}x{n} T={tok} {name}: {type(ex).__name__}: "
                      f"{str(ex)[:300]}", flush=True)
                continue
            record(kind="grouped", k=k, n=n, m=m, tokens=tok, experts_touched=touched,
                   fmt="nvfp4", variant=name, us=t * 1e6, bytes=b, gbps=b / t / 1e9,
                   pct_copy=100 * b / t / bw, speedup=t_bf / t, rel_err=err)


def table(rows, bw):
    lines = [f"copy bandwidth (read+write, 2 GiB f32): {bw / 1e12:.3f} TB/s", "",
             "| kind | K x N | M | fmt | variant | time us | GB/s | % copy | x bf16 | rel err |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mm = f"{r['m']}" + (f" ({r['tokens']}t,{r['experts_touched']}e)" if "tokens" in r else "")
        lines.append(f"| {r['kind']} | {r['k']}x{r['n']} | {mm} | {r['fmt']} | {r['variant']} | "
                     f"{r['us']:.1f} | {r['gbps']:.0f} | {r['pct_copy']:.1f} | "
                     f"{r['speedup']:.2f} | {r['rel_err']:.1e} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    dev = jax.devices()[0]
    print(f"jax {jax.__version__} device {dev.device_kind}", flush=True)
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s", flush=True)
    dec = [1, 8, 32, 64]
    pre = [512, 4096]
    bench_grouped(2048, 768, [32, 128, 512], 128, 8, bw)
    bench_grouped(768, 2048, [32, 512], 128, 8, bw)
    bench_dense(8192, 28672, dec + pre, ["nvfp4", "mxfp4"], dense_variants, bw)
    bench_dense(2048, 768, dec + pre, ["nvfp4"], dense_variants, bw)
    bench_dense(768, 2048, dec + pre, ["nvfp4"], dense_variants, bw)
    bw2 = copy_bandwidth()
    md = table(ROWS, bw) + f"\n\ncopy bandwidth re-measured at the end: {bw2 / 1e12:.3f} TB/s\n"
    meta = dict(jax=jax.__version__, device=dev.device_kind, copy_bw=bw, copy_bw_end=bw2,
                command="PYTHONUNBUFFERED=1 python -m pallas_kernels.bench_matmul",
                wall_s=time.time() - T0)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "kernels_matmul.json"), "w") as f:
        json.dump(dict(meta=meta, rows=ROWS), f, indent=1)
    with open(os.path.join(a.out, "kernels_matmul.md"), "w") as f:
        f.write(f"# FP4 matmul kernels on {dev.device_kind} (jax {jax.__version__})\n\n{md}")
    print(md, flush=True)
    bad = [r for r in ROWS if not (r["rel_err"] < 1e-2)]
    if bad:
        print(f"CORRECTNESS FAILURES: {len(bad)}", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
