"""Benchmark the FP4 matmul kernels against XLA bf16 baselines on one GPU (see PERFORMANCE.md).

  PYTHONUNBUFFERED=1 python -m pallas_kernels.bench_matmul [--out DIR] [--quick]

Each timed call is one jit of R calls over R separately allocated copies of the weights (R from
the bf16 weight's size: >= 256 MiB of rotated bf16 weights, 2 <= R <= 32; the FP4 copies use the
same R, so at the small 2048 x 768 shapes their rotated set (R x 0.9 MB) fits in L2); time per
matmul = median over 20 repeats / R. The same run measures the device copy bandwidth and checks
every kernel against the pure-JAX reference.
Bytes counted: weight codes + block scales (or bf16 weights) + x (bf16; NVFP4 codes + scales +
row scales for the W4A4 row) + out (bf16); grouped: only the experts with a non-empty group.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import fp4_matmul as fm
from pallas_kernels import matmul_triton as mt
from trace_jax import e2m1, quant

T0 = time.time()
ROT_BYTES = 256 << 20
L2_GUARD_S = float(os.environ.get("BENCH_TIME_LIMIT_S", "240"))


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


def rot_time(fn, ws, x):
    """Median time of one fn(x, w) over r separately allocated weight copies, all called inside
    one jit (no lax.scan: slicing a stacked operand for a custom call materializes a copy)."""
    r = len(ws)

    @jax.jit
    def run(x, ws):
        return [fn(x, w) for w in ws]

    return timeit(run, x, ws) / r


def rot_device_time(fn, ws, x):
    """``--device-time``: device seconds of one fn(x, w) (the rotated calls of ``rot_time``,
    profiled; pallas_kernels.devtime), or None when the flag is off."""
    if not DEVICE_TIME:
        return None
    from pallas_kernels.devtime import device_seconds

    run = jax.jit(lambda x, ws: [fn(x, w) for w in ws])
    return device_seconds(run, x, ws) / len(ws)


def copies(tree, r):
    """r distinct device copies of a pytree of arrays."""
    return [jax.tree.map(lambda a: a + jnp.zeros((), a.dtype) if i else a, tree) for i in range(r)]


def w4a4_bytes(weight_bytes: int, m: int, k: int, n: int) -> int:
    """Bytes of a W4A4 dense call: the FP4 weight, x as an NVFP4 activation QTensor (codes, one
    E4M3 scale per 16 values, an f32 global scale per row) and the bf16 output."""
    return int(weight_bytes) + m * k // 2 + m * k // 16 + 4 * m + 2 * m * n


def rotations(bf16_bytes):
    return int(min(32, max(2, -(-ROT_BYTES // bf16_bytes))))


ROWS: list[dict] = []
LOG = None
DEVICE_TIME = False  # --device-time
DEV_COPY_BPS = None  # the device-time copy bandwidth (set in main with --device-time)


def record(device_s=None, **row):
    """Append a row; ``device_s`` (device seconds per call) adds device_us and device_pct_copy
    (against the device-time copy bandwidth)."""
    if device_s is not None:
        row.update(device_us=device_s * 1e6, device_pct_copy=100 * row["bytes"] / device_s
                   / DEV_COPY_BPS)
    ROWS.append(row)
    line = json.dumps(row)
    print(line, flush=True)
    if LOG:
        with open(LOG, "a") as f:
            f.write(line + "\n")


def guard(what):
    if time.time() - T0 > L2_GUARD_S:
        print(f"time guard: skipping {what}", flush=True)
        return True
    return False


def decode_exact():
    """GPU check of the inline-asm decode: identity x times weights holding every code with
    scales from e4m3 subnormal to 448 (nvfp4) / 2**-40..2**40 (mxfp4): output must equal the
    dequantized weights bit for bit."""
    rng = np.random.default_rng(0)
    k, n = 256, 64
    for fmt in ("nvfp4", "mxfp4"):
        codes = rng.integers(0, 16, (k, n)).astype(np.float32)
        vals = np.asarray(e2m1.decode(jnp.asarray(codes, jnp.uint8)))
        blk = quant.get_format(fmt).block_size
        if fmt == "nvfp4":
            sc = rng.choice([2.0 ** -9, 2.0 ** -7 * 3, 0.5, 1.0, 13.0, 448.0], (k // blk, n))
        else:
            sc = 2.0 ** rng.integers(-40, 40, (k // blk, n)).astype(np.float64)
        w = (vals * np.repeat(sc, blk, axis=0)).astype(np.float32)
        q = quant.quantize(jnp.asarray(w), fmt, axis=-2)
        fw = fm.prepare_weights(q)
        ref = np.asarray(quant.dequantize(q), np.float32)
        x = jnp.eye(k, dtype=jnp.bfloat16)
        out = np.asarray(jax.jit(lambda x, w: mt.dense(x, w, mt.Config(bm=16, bn=64, bk=256)))(
            x, fw), np.float32)
        bad = int(np.sum(out != ref.astype(jnp.bfloat16).astype(np.float32)))
        record(kind="decode_exact", k=k, n=n, m=k, fmt=fmt, variant="identity", us=0.0, bytes=0,
               gbps=0.0, pct_copy=0.0, speedup=0.0, rel_err=float(bad), mismatches=bad,
               zeros_half=int(np.sum((ref == 0.5 * np.repeat(sc, blk, 0)) & (out == 0))))


def bench_dense(k, n, ms, fmts, bw):
    key = jax.random.key(k * 7 + n)
    w32 = jax.random.normal(key, (k, n), jnp.float32)
    wb = w32.astype(jnp.bfloat16)
    r = rotations(wb.nbytes)
    wbs = [(wb * (1 + 0.01 * i)).astype(jnp.bfloat16) for i in range(r)]
    fws = {}
    for fmt in fmts:
        q = quant.quantize(w32, fmt, axis=-2)
        fw = fm.prepare_weights(q)
        fws[fmt] = (fw, copies(fw, r))
        if fm.mosaic_fits(fmt, k, n):  # the Mosaic GPU kernel's layout (prepare_mgpu)
            wm = fm.prepare_expert_weights(q, "mosaic")
            fws["mosaic"] = (wm, copies(wm, r))
    for m in ms:
        if guard(f"dense {k}x{n} M={m}"):
            return
        x = jax.random.normal(jax.random.fold_in(key, m), (m, k), jnp.float32).astype(jnp.bfloat16)
        io = m * k * 2 + m * n * 2
        t_bf = rot_time(lambda x, w: jnp.dot(x, w, preferred_element_type=jnp.float32)
                        .astype(jnp.bfloat16), wbs, x)
        b = wb.nbytes + io
        td = rot_device_time(lambda x, w: jnp.dot(x, w, preferred_element_type=jnp.float32)
                             .astype(jnp.bfloat16), wbs, x)
        record(device_s=td, kind="dense", k=k, n=n, m=m, fmt="bf16", variant="xla_dot", us=t_bf * 1e6,
               bytes=b, gbps=b / t_bf / 1e9, pct_copy=100 * b / t_bf / bw, speedup=1.0, rel_err=0.0)
        for fmt in fmts:
            fw, fwr = fws[fmt]
            ref = fm.fp4_matmul_reference(x, fw)
            b = fw.nbytes + io
            for i, (name, cfg) in enumerate(dense_variants(m, k, n, fmt)):
                try:
                    if cfg is None:
                        f = lambda x, w: fm.fp4_matmul(x, w, backend="triton")  # noqa: E731
                    elif cfg == "qtensor":  # the prefill path before dequantize_planes
                        f = _prefill_via_qtensor
                    else:
                        f = lambda x, w, cfg=cfg: mt.dense(x, w, cfg)  # noqa: E731
                    out = jax.jit(f)(x, fw)
                    err = rel_err(out, ref)
                    t = rot_time(f, fwr, x)
                    # device time for the default (first) variant and the public dispatch
                    td = rot_device_time(f, fwr, x) if cfg in (None, "qtensor") or i == 0 \
                        else None
                except Exception as e:  # noqa: BLE001 - report and continue
                    print(f"FAILED dense {k}x{n} M={m} {fmt} {name}: {type(e).__name__}: "
                          f"{str(e)[:600]}", flush=True)
                    continue
                record(device_s=td, kind="dense", k=k, n=n, m=m, fmt=fmt, variant=name, us=t * 1e6, bytes=b,
                       gbps=b / t / 1e9, pct_copy=100 * b / t / bw, speedup=t_bf / t, rel_err=err)
            if fmt == "nvfp4" and "mosaic" in fws and m < fm.PREFILL_M:
                wm, wmr = fws["mosaic"]
                f = lambda x, w: fm.fp4_matmul(x, w, backend="triton")  # noqa: E731
                try:
                    err = rel_err(jax.jit(f)(x, wm), ref)
                    t = rot_time(f, wmr, x)
                    td = rot_device_time(f, wmr, x)
                except Exception as e:  # noqa: BLE001 - report and continue
                    print(f"FAILED dense {k}x{n} M={m} mosaic: {type(e).__name__}: "
                          f"{str(e)[:600]}", flush=True)
                else:
                    b = wm.nbytes + io
                    record(device_s=td, kind="dense", k=k, n=n, m=m, fmt=fmt,
                           variant="mosaic (default splits)", us=t * 1e6, bytes=b,
                           gbps=b / t / 1e9, pct_copy=100 * b / t / bw, speedup=t_bf / t,
                           rel_err=err)
            if fmt == "nvfp4" and m in (8,) and k == 2048:
                try:
                    xq = quant.quantize(x.astype(jnp.float32), "nvfp4", global_scope="row")
                    ref4 = fm.fp4_matmul_reference(xq, fw)
                    f = lambda x, w: fm.fp4_matmul(x, w, backend="triton")  # noqa: E731
                    out = jax.jit(f)(xq, fw)
                    t = rot_time(f, fwr, xq)
                    b4 = w4a4_bytes(fw.nbytes, m, k, n)
                except Exception as ex:  # noqa: BLE001
                    print(f"FAILED w4a4 {k}x{n} M={m}: {type(ex).__name__}: {str(ex)[:300]}",
                          flush=True)
                    continue
                record(kind="dense", k=k, n=n, m=m, fmt="nvfp4-w4a4", variant="auto",
                       us=t * 1e6, bytes=b4, gbps=b4 / t / 1e9, pct_copy=100 * b4 / t / bw,
                       speedup=t_bf / t, rel_err=rel_err(out, ref4))


def _prefill_via_qtensor(x, w):
    """The large-M path as it was before session 9: dequantize through the unpacked QTensor
    (``fm.dequantize_bf16``), then the XLA bf16 GEMM and the f32 global-scale epilogue."""
    xb, g = mt.x_bf16(x)
    wb = fm.dequantize_bf16(dataclasses.replace(w, global_scale=jnp.ones_like(w.global_scale)))
    out = jnp.dot(xb, wb, preferred_element_type=jnp.float32)
    return (out * (g * w.global_scale.reshape(1, 1))).astype(jnp.bfloat16)


def dense_variants(m, k, n, fmt):
    """(name, Config | None = the public fp4_matmul dispatch)."""
    if m >= fm.PREFILL_M:
        out = [("auto(dequant+xla)", None), ("dequant_bf16+xla", "qtensor")]
        if m <= 512 and fmt == "nvfp4":
            out.append(("kernel_bm64_bn128", mt.Config(bm=64, bn=128, bk=256)))
        return out
    d = mt.default_config(m, k, n, grouped=False)
    sched = f"p{d.programs}" if d.programs else f"s{d.split_k}"  # stream-K programs / split-K
    out = [(f"bm{d.bm}_bn{d.bn}_bk{d.bk}_{sched}", d)]
    if fmt != "nvfp4" or k < 8192:
        return out
    if m > 32:
        out.append(("bm32_bn128", dataclasses.replace(d, bm=32)))
    else:
        out.append(("bn64_bk512", dataclasses.replace(d, bn=64, bk=512)))
        out.append(("bn256_w8", dataclasses.replace(d, bn=256, num_warps=8)))
        out.append(("bn128_st4", dataclasses.replace(d, num_stages=4)))
    return out


def route(tokens, e, topk, key):
    logits = jax.random.normal(key, (tokens, e))
    _, idx = jax.lax.top_k(logits, topk)
    return jnp.bincount(idx.reshape(-1), length=e).astype(jnp.int32)


# persistent grouped kernels (Config.programs): (programs, num_stages) for bf16 and (bn, programs,
# num_stages) for FP4; the flat (tile, K step) loop's indirect item loads take pipeline stages,
# so num_stages s gives (s - 1) // 2 weight buffers (sm_90 compile check)
PERSISTENT_BF16 = [(264, 7), (528, 7), (264, 10)]
PERSISTENT_FP4 = [(64, 264, 5), (64, 264, 7), (64, 528, 7), (64, 132, 7), (128, 264, 7)]


def bench_tables(common, gs, m):
    """The grouped wrappers' item and row-expert tables alone (group sizes as a jit argument, as
    in the model), loop-free (now) vs the binary-search loop (before session 5's fix): what one
    grouped call spends before its kernel starts."""
    orig = mt._searchsorted_right

    def tables(g):
        return mt._items_for_groups(g, m, 16), mt._row_expert(g, m)

    times = {}
    for name, fn in (("compare_all", orig), ("binary_search_loop", lambda a, v: jnp.searchsorted(
            a, v, side="right"))):
        mt._searchsorted_right = fn
        try:
            times[name] = timeit(jax.jit(tables), gs)
        finally:
            mt._searchsorted_right = orig
    for name, t in times.items():
        record(**dict(common, kind="grouped_tables"), fmt="-", variant=name, us=t * 1e6, bytes=0,
               gbps=0.0, pct_copy=0.0, speedup=times["binary_search_loop"] / t, rel_err=0.0)


def bench_grouped(k, n, token_counts, e, topk, bw):
    key = jax.random.key(k + 3 * n)
    w32 = jax.random.normal(key, (e, k, n), jnp.float32)
    wb = w32.astype(jnp.bfloat16)
    q = quant.quantize(w32, "nvfp4", axis=-2)
    fw = fm.prepare_weights(q)
    wm = fm.prepare_expert_weights(q, "mosaic") if fm.mosaic_fits("nvfp4", k, n) else None
    del w32, q
    r = 2
    wbs = [wb, (wb * 1.01).astype(jnp.bfloat16)]
    fws = copies(fw, r)
    wms = copies(wm, r) if wm is not None else None
    per_e_fp4 = fw.nbytes / e
    if not fm.bf16_kernel_fits(k, n):  # bf16_grouped_matmul would run ragged_dot, unlabelled
        raise ValueError(f"the bf16 grouped kernel does not tile K={k}, N={n}")
    for tok in token_counts:
        if guard(f"grouped {k}x{n} T={tok}"):
            return
        gs = route(tok, e, topk, jax.random.fold_in(key, tok))
        m = tok * topk
        touched = int(jnp.sum(gs > 0))
        x = jax.random.normal(jax.random.fold_in(key, 1000 + tok), (m, k)).astype(jnp.bfloat16)
        io = m * k * 2 + m * n * 2
        t_bf = rot_time(lambda x, w: jax.lax.ragged_dot(x, w, gs), wbs, x)
        bb = touched * k * n * 2 + io
        common = dict(kind="grouped", k=k, n=n, m=m, tokens=tok, experts_touched=touched)
        bench_tables(common, gs, m)
        td = rot_device_time(lambda x, w: jax.lax.ragged_dot(x, w, gs), wbs, x)
        record(device_s=td, **common, fmt="bf16", variant="ragged_dot", us=t_bf * 1e6, bytes=bb,
               gbps=bb / t_bf / 1e9, pct_copy=100 * bb / t_bf / bw, speedup=1.0, rel_err=0.0)
        ref_b = jax.lax.ragged_dot(x, wb, gs, preferred_element_type=jnp.float32)
        db = mt.Config(bm=16 if m <= 2048 else 32, bn=64, bk=64, num_warps=4, num_stages=4)
        for name, cfg in [("pallas_grouped_default", None), ("pallas_grouped", db)] + [
                (f"pallas_grouped_p{p}_st{st}", dataclasses.replace(db, programs=p, num_stages=st))
                for p, st in PERSISTENT_BF16]:
            try:
                f = lambda x, w, cfg=cfg: fm.bf16_grouped_matmul(  # noqa: E731
                    x, w, gs, cfg=cfg, backend="triton")
                err = rel_err(jax.jit(f)(x, wb), ref_b)
                t = rot_time(f, wbs, x)
                td = rot_device_time(f, wbs, x) if cfg is None else None
                record(device_s=td, **common, fmt="bf16", variant=name, us=t * 1e6, bytes=bb,
                       gbps=bb / t / 1e9, pct_copy=100 * bb / t / bw, speedup=t_bf / t,
                       rel_err=err)
            except Exception as ex:  # noqa: BLE001
                print(f"FAILED bf16 grouped {k}x{n} T={tok} {name}: {type(ex).__name__}: "
                      f"{str(ex)[:600]}", flush=True)
        ref = fm.fp4_grouped_matmul_reference(x, fw, gs)
        b = int(touched * per_e_fp4) + io
        d = dataclasses.replace(mt.default_config(m, k, n, grouped=True), programs=0,
                                bn=64, num_stages=3)  # the one-program-per-tile kernel
        vs = [("default", None), (f"bm{d.bm}_bn{d.bn}", d),
              ("bn128", dataclasses.replace(d, bn=128)),
              ("bn256_w8", dataclasses.replace(d, bn=256, num_warps=8))]
        vs += [(f"bn{bn}_p{p}_st{st}", dataclasses.replace(d, bn=bn, programs=p, num_stages=st))
               for bn, p, st in PERSISTENT_FP4]
        if wms is not None:  # the Mosaic GPU kernel: the rollout's expert kernel
            vs = [("mosaic (rollout default)", "mosaic")] + vs
        for name, cfg in vs:
            try:
                ws = wms if cfg == "mosaic" else fws
                cfg = None if cfg == "mosaic" else cfg
                f = lambda x, w, cfg=cfg: fm.fp4_grouped_matmul(  # noqa: E731
                    x, w, gs, cfg=cfg, backend="triton")
                out = jax.jit(f)(x, ws[0])
                err = rel_err(out, ref)
                t = rot_time(f, ws, x)
                td = rot_device_time(f, ws, x) if cfg is None else None
            except Exception as ex:  # noqa: BLE001
                print(f"FAILED grouped {k}x{n} T={tok} {name}: {type(ex).__name__}: "
                      f"{str(ex)[:600]}", flush=True)
                continue
            record(device_s=td, **common, fmt="nvfp4", variant=name, us=t * 1e6, bytes=b, gbps=b / t / 1e9,
                   pct_copy=100 * b / t / bw, speedup=t_bf / t, rel_err=err)
        # what the model would do without the kernel: dequantize the touched experts + ragged_dot
        if tok not in (32, 512):
            continue
        try:
            f = lambda x, w: jax.lax.ragged_dot(x, fm.dequantize_bf16(w), gs)  # noqa: E731
            err = rel_err(jax.jit(f)(x, fws[0]), ref)
            t = rot_time(f, fws, x)
            record(**common, fmt="nvfp4", variant="dequant+ragged_dot", us=t * 1e6, bytes=b,
                   gbps=b / t / 1e9, pct_copy=100 * b / t / bw, speedup=t_bf / t, rel_err=err)
        except Exception as ex:  # noqa: BLE001
            print(f"FAILED dequant+ragged {type(ex).__name__}: {str(ex)[:300]}", flush=True)


def table(rows, bw):
    lines = [f"copy bandwidth (read+write, 2 GiB f32): {bw / 1e12:.3f} TB/s"
             + (f"; device-time copy bandwidth {DEV_COPY_BPS / 1e12:.3f} TB/s (device columns: "
                "the call's kernels from a profile, no launch or host time)" if DEV_COPY_BPS
                else ""), "",
             "| kind | K x N | M | fmt | variant | time us | GB/s | % copy | x bf16 | rel err "
             "| device us (% copy) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mm = f"{r['m']}" + (f" ({r['tokens']}t,{r['experts_touched']}e)" if "tokens" in r else "")
        dev = (f"{r['device_us']:.1f} ({r['device_pct_copy']:.1f})" if "device_us" in r
               else "-")
        lines.append(f"| {r['kind']} | {r['k']}x{r['n']} | {mm} | {r['fmt']} | {r['variant']} | "
                     f"{r['us']:.1f} | {r['gbps']:.0f} | {r['pct_copy']:.1f} | "
                     f"{r['speedup']:.2f} | {r['rel_err']:.1e} | {dev} |")
    return "\n".join(lines)


def main():
    global LOG
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sections", default="exact,dense,grouped,small",
                    help="comma list of: exact (decode identity), dense (8192x28672), grouped, "
                         "small (dense expert shapes)")
    ap.add_argument("--dense_m", default="1,8,32,64,512,4096",
                    help="rows M of the dense 8192 x 28672 section")
    ap.add_argument("--device-time", action="store_true",
                    help="also the device time (profile) of each kind's baseline and default rows")
    a = ap.parse_args()
    global DEVICE_TIME, DEV_COPY_BPS
    DEVICE_TIME = a.device_time
    sec = set(a.sections.split(","))
    os.makedirs(a.out, exist_ok=True)
    LOG = os.path.join(a.out, "kernels_matmul.jsonl")
    dev = jax.devices()[0]
    print(f"jax {jax.__version__} device {dev.device_kind}", flush=True)
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s", flush=True)
    if DEVICE_TIME:
        from pallas_kernels.devtime import copy_bandwidth_device

        DEV_COPY_BPS = copy_bandwidth_device(1 << 29)
        print(f"copy bandwidth (device time) {DEV_COPY_BPS / 1e12:.3f} TB/s", flush=True)
    if "exact" in sec:
        decode_exact()
    if "dense" in sec:
        bench_dense(8192, 28672, [int(v) for v in a.dense_m.split(",") if v],
                    ["nvfp4", "mxfp4"], bw)
    if "grouped" in sec:
        bench_grouped(2048, 768, [32, 128, 512], 128, 8, bw)
        bench_grouped(768, 2048, [32, 512], 128, 8, bw)
    if "small" in sec:
        bench_dense(2048, 768, [1, 8, 64, 4096], ["nvfp4"], bw)
        bench_dense(768, 2048, [1, 64, 4096], ["nvfp4"], bw)
    bw2 = copy_bandwidth()
    md = table(ROWS, bw) + f"\n\ncopy bandwidth re-measured at the end: {bw2 / 1e12:.3f} TB/s\n"
    meta = dict(jax=jax.__version__, device=dev.device_kind, copy_bw=bw, copy_bw_end=bw2,
                copy_bw_device=DEV_COPY_BPS,
                command=" ".join(["python -m pallas_kernels.bench_matmul", *sys.argv[1:]]),
                wall_s=time.time() - T0)
    with open(os.path.join(a.out, "kernels_matmul.json"), "w") as f:
        json.dump(dict(meta=meta, rows=ROWS), f, indent=1)
    with open(os.path.join(a.out, "kernels_matmul.md"), "w") as f:
        f.write(f"# FP4 matmul kernels on {dev.device_kind} (jax {jax.__version__})\n\n{md}")
    print(md, flush=True)
    bad = [r for r in ROWS if r["kind"] != "decode_exact" and not (r["rel_err"] < 1e-2)]
    bad += [r for r in ROWS if r["kind"] == "decode_exact" and r["mismatches"]]
    if bad:
        print(f"CORRECTNESS FAILURES: {len(bad)}", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
