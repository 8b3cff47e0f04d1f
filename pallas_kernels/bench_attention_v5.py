"""FP4-KV decode attention v5 / v6 (K / K and V in the ``kv_layout`` word layout) against v4, in
device time.

  python -m pallas_kernels.bench_attention_v5 [--out DIR] [--quick]

For each (format, batch x context) of the issue-7 table (GQA 32 q / 4 kv heads, head_dim 128,
every sequence at full context): v4 on natural caches, v5 with the K cache converted to the word
layout and v6 with both, each at its tuned default knobs; device time per call of the attention
kernel and its split combine (``devtime.device_seconds``, 5 profiled calls), bandwidth over the
KV bytes the kernel must read against a copy measured the same way, the largest difference from
v4's output (same decoded values, so ~0: only FMA scheduling may differ) and, on the first two
sequences, the relative error against the pure-JAX reference. Writes
``kernels_attention_v5.{md,json}`` to --out.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from pallas_kernels import devtime  # noqa: E402
from pallas_kernels import kv_layout as KL  # noqa: E402
from pallas_kernels.attention_triton import decode_attention_triton, kv_bytes  # noqa: E402
from trace_jax import ops  # noqa: E402
from trace_jax.quant import quantize  # noqa: E402

SHAPES = ((32, 8192), (8, 32768), (32, 32768), (128, 32768), (32, 131072))
HQ, H, D = 32, 4, 128
VERSIONS = ("v4", "v5", "v6")


rel = devtime.relerr


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(_REPO, "experiments", "results"))
    ap.add_argument("--quick", action="store_true", help="two small shapes (a CPU smoke run)")
    ap.add_argument("--formats", default="nvfp4,mxfp4")
    ap.add_argument("--sweep", action="store_true",
                    help="instead: v5 / v6 knob grid (block_k x warps x stages) at B=32 x 32K, "
                         "the best 2 of each re-timed at 128 x 32K and 32 x 128K; writes "
                         "kernels_attention_v5_sweep.*")
    ap.add_argument("--splits", action="store_true",
                    help="instead: NVFP4 v6 at its default knobs over split counts (the programs "
                         "per wave question) and a few block_k / stages variants at 32 x 32K, "
                         "128 x 32K, 32 x 128K; writes kernels_attention_v6_splits.*")
    a = ap.parse_args(argv)
    if a.sweep:
        return sweep(a, argv)
    if a.splits:
        return splits(a, argv)
    shapes = ((2, 256), (1, 512)) if a.quick else SHAPES
    interpret = jax.default_backend() == "cpu"
    bw = devtime.report_copy_bandwidth(1 << (20 if a.quick else 30))
    rows = []
    for fmt in a.formats.split(","):
        for b, s in shapes:
            kq, kk, kv = jax.random.split(jax.random.PRNGKey(b * s), 3)
            q = jax.random.normal(kq, (b, HQ, D), jnp.bfloat16)
            qz = jax.jit(lambda x: quantize(x, fmt, axis=-1, global_scope="row"))
            k = qz(jax.random.normal(kk, (b, H, s, D), jnp.bfloat16))
            v = qz(jax.random.normal(kv, (b, H, s, D), jnp.bfloat16))
            words = jax.jit(KL.to_kv_words)
            kw, vw = words(k), words(v)
            lengths = jnp.full((b,), s, jnp.int32)
            f = jax.jit(lambda q, k, v, L: decode_attention_triton(
                q, k, v, L, sm_scale=D ** -0.5, out_dtype=jnp.float32, interpret=interpret))
            r = 2 if b > 1 else 1
            first = lambda c: jax.tree.map(lambda x: x[:r] if x.shape[0] == b else x, c)  # noqa
            ref = ops.decode_attention_reference(q[:r].astype(jnp.float32), first(k), first(v),
                                                 lengths[:r])
            row = dict(fmt=fmt, batch=b, context=s)
            nb = kv_bytes(b, H, s, D, fmt)
            o4 = None
            for name, kc, vc in (("v4", k, v), ("v5", kw, v), ("v6", kw, vw)):
                o = f(q, kc, vc, lengths)
                o4 = o if o4 is None else o4
                row[f"{name}_max_abs_vs_v4"] = float(jnp.max(jnp.abs(o - o4)))
                row[f"{name}_relerr"] = rel(o[:r], ref)
                t = devtime.device_seconds(f, q, kc, vc, lengths)
                row[f"{name}_us"] = t * 1e6
                row[f"{name}_pct_copy"] = 100 * nb / t / bw
                row[f"{name}_vs_v4"] = row["v4_us"] / row[f"{name}_us"]
            rows.append(row)
            print(f"  {fmt} B={b} ctx={s}: " + "  ".join(
                f"{n} {row[n + '_us']:.1f} us ({row[n + '_pct_copy']:.1f}%, x{row[n + '_vs_v4']:.3f}"
                f", |d| {row[n + '_max_abs_vs_v4']:.0e})" for n in VERSIONS)
                + f"  relerr v6 {row['v6_relerr']:.1e}", flush=True)
            del k, v, kw, vw
    lines = [f"# FP4-KV decode attention v5 vs v4: {jax.devices()[0].device_kind} "
             f"(jax {jax.__version__})", "",
             f"command: `python -m pallas_kernels.bench_attention_v5 {' '.join(argv or sys.argv[1:])}`",
             "", f"GQA {HQ} q / {H} kv heads, head_dim {D}, every sequence at full context; device "
             "time per call (attention kernel + split combine, 5 profiled calls) at each version's "
             f"default knobs; % copy = KV bytes / time against a device-time copy of "
             f"{bw / 1e12:.2f} TB/s; relerr on the first 2 sequences against the pure-JAX "
             "reference (f32 out).", "",
             "| fmt | B x ctx | v4 us (% copy) | v5 us (% copy, x v4) | v6 us (% copy, x v4) | "
             "max abs v5 / v6 - v4 | relerr v4 / v6 |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        cell = lambda n: (f"{r[n + '_us']:.1f} ({r[n + '_pct_copy']:.1f}%"  # noqa: E731
                          + ("" if n == "v4" else f", {r[n + '_vs_v4']:.3f}x") + ")")
        lines.append(f"| {r['fmt']} | {r['batch']} x {max(1, r['context'] // 1024)}K | "
                     f"{cell('v4')} | {cell('v5')} | {cell('v6')} | "
                     f"{r['v5_max_abs_vs_v4']:.1e} / {r['v6_max_abs_vs_v4']:.1e} | "
                     f"{r['v4_relerr']:.1e} / {r['v6_relerr']:.1e} |")
    devtime.write_sweep(a.out, "kernels_attention_v5", lines, rows, bw)
    return 0


GRID = dict(block_k=(32, 64), num_warps=(1, 2), num_stages=(2, 3))


def _caches(fmt, b, s, key):
    kk, kv = jax.random.split(key)
    qz = jax.jit(lambda x: KL.to_kv_words(quantize(x, fmt, axis=-1, global_scope="row")))
    return (qz(jax.random.normal(kk, (b, H, s, D), jnp.bfloat16)),
            qz(jax.random.normal(kv, (b, H, s, D), jnp.bfloat16)))


def sweep(a, argv) -> int:
    """v5 / v6 knobs in device time (see --sweep)."""
    import itertools

    from pallas_kernels.attention_triton import tuned_knobs

    interpret = jax.default_backend() == "cpu"
    (b0, s0), later = ((2, 256), ((1, 512),)) if a.quick else ((32, 32768), ((128, 32768),
                                                                               (32, 131072)))
    grid = {k: v[:2] for k, v in GRID.items()} if a.quick else GRID
    bw = devtime.report_copy_bandwidth(1 << (20 if a.quick else 30))
    rows = []

    def run(fmt, version, b, s, knobs, kw, vw):
        q = jax.random.normal(jax.random.PRNGKey(b), (b, HQ, D), jnp.bfloat16)
        lengths = jnp.full((b,), s, jnp.int32)
        v = vw if version == "v6" else jax.jit(KL.to_natural)(vw)
        f = jax.jit(lambda q, k, v, L: decode_attention_triton(
            q, k, v, L, sm_scale=D ** -0.5, decode=version, interpret=interpret, **knobs))
        try:
            t = devtime.device_seconds(f, q, kw, v, lengths)
        except Exception as e:  # noqa: BLE001  (a config that does not fit / compile)
            print(f"  {fmt} {version} {knobs}: {type(e).__name__}: {str(e)[:120]}", flush=True)
            return
        r = dict(fmt=fmt, version=version, batch=b, context=s, **knobs, us=t * 1e6,
                 pct_copy=100 * kv_bytes(b, H, s, D, fmt) / t / bw,
                 default=tuple(knobs.values()) == tuned_knobs(fmt, version))
        rows.append(r)
        print(f"  {fmt} {version} B={b} ctx={s} {knobs}: {r['us']:.1f} us {r['pct_copy']:.1f}%"
              f"{' (default)' if r['default'] else ''}", flush=True)

    for fmt in a.formats.split(","):
        kw, vw = _caches(fmt, b0, s0, jax.random.PRNGKey(0))
        for version in ("v5", "v6"):
            for vals in itertools.product(*grid.values()):
                run(fmt, version, b0, s0, dict(zip(grid, vals)), kw, vw)
        del kw, vw
        for b, s in later:
            kw, vw = _caches(fmt, b, s, jax.random.PRNGKey(1))
            for version in ("v5", "v6"):
                mine = sorted((r for r in rows if (r["fmt"], r["version"], r["batch"],
                               r["context"]) == (fmt, version, b0, s0)), key=lambda r: r["us"])
                for r in mine[:2]:
                    run(fmt, version, b, s, {k: r[k] for k in grid}, kw, vw)
            del kw, vw
    lines = [f"# FP4-KV decode attention v5 / v6 knob sweep: {jax.devices()[0].device_kind} "
             f"(jax {jax.__version__})", "",
             f"command: `python -m pallas_kernels.bench_attention_v5 {' '.join(argv or sys.argv[1:])}`",
             "", f"device time per call (kernel + split combine); % copy = KV bytes / time against "
             f"a device-time copy of {bw / 1e12:.2f} TB/s; KV caches in the kv_words layout (v5 "
             "reads V natural).", "",
             "| fmt | version | B x ctx | block_k | warps | stages | us | % copy | default |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["fmt"], r["batch"] * r["context"], r["version"],
                                         r["us"])):
        lines.append(f"| {r['fmt']} | {r['version']} | {r['batch']} x {max(1, r['context'] // 1024)}K"
                     f" | {r['block_k']} | {r['num_warps']} | {r['num_stages']} | {r['us']:.1f} | "
                     f"{r['pct_copy']:.1f} | {'yes' if r['default'] else ''} |")
    devtime.write_sweep(a.out, "kernels_attention_v5_sweep", lines, rows, bw)
    return 0


# (session 14a, experiments/gpu_sessions/gpu_session14a.sh; 14b measured split counts that do not
# divide the blocks at commit 286fe87, NOTES_attention.md)
SPLITS = {(128, 32768): (2, 4, 8, 16, 32), (32, 131072): (8, 16, 32, 64, 128),
          (32, 32768): (8, 16, 32, 64)}
VARIANTS = (dict(block_k=16, num_stages=3), dict(block_k=16, num_stages=4),
            dict(block_k=32, num_stages=4), dict(block_k=16, num_stages=2))


def splits(a, argv) -> int:
    """NVFP4 v6: split counts and knob variants in device time (see --splits). Each row times
    the whole call (kernel + split combine) and the attention kernel alone."""
    import tempfile

    from experiments import profile_summary as PS
    from pallas_kernels.attention_triton import default_splits, tuned_knobs

    interpret = jax.default_backend() == "cpu"
    table = {(2, 256): (1, 2), (1, 512): (2, 4)} if a.quick else SPLITS
    variants = VARIANTS
    bw = devtime.report_copy_bandwidth(1 << (20 if a.quick else 30))
    bk0, nw0, ns0 = tuned_knobs("nvfp4", "v6")
    rows = []
    for (b, s), ps in table.items():
        kw, vw = _caches("nvfp4", b, s, jax.random.PRNGKey(2))
        q = jax.random.normal(jax.random.PRNGKey(b), (b, HQ, D), jnp.bfloat16)
        lengths = jnp.full((b,), s, jnp.int32)
        auto = default_splits(b, H, s // bk0, bk0, "v6", nw0)
        configs = [dict(num_splits=p) for p in ps if p != auto] + [dict()]  # dict(): the default
        configs += [dict(v) for v in variants]
        ref = None
        for knobs in configs:
            f = jax.jit(lambda q, k, v, L, kn=tuple(knobs.items()): decode_attention_triton(
                q, k, v, L, sm_scale=D ** -0.5, decode="v6", out_dtype=jnp.float32,
                interpret=interpret, **dict(kn)))
            try:
                o = f(q, kw, vw, lengths)
                with tempfile.TemporaryDirectory(prefix="devtime_") as tmp:
                    summ = PS.profile_calls(lambda: f(q, kw, vw, lengths), 5, tmp)
                t = devtime.selected_seconds(summ)
                try:
                    tk = devtime.selected_seconds(summ, "decode_attention")
                except RuntimeError:  # the kernel's name did not reach the profile
                    tk = float("nan")
            except Exception as e:  # noqa: BLE001  (a config that does not fit / compile)
                print(f"  B={b} ctx={s} {knobs}: {type(e).__name__}: {str(e)[:120]}", flush=True)
                continue
            ref = o if ref is None else ref
            p = knobs.get("num_splits", auto)
            bk = knobs.get("block_k", bk0)
            r = dict(batch=b, context=s, num_splits=p, block_k=bk,
                     num_stages=knobs.get("num_stages", ns0), programs=b * H * p, us=t * 1e6,
                     kernel_us=tk * 1e6, pct_copy=100 * kv_bytes(b, H, s, D, "nvfp4") / t / bw,
                     max_abs_vs_first=float(jnp.max(jnp.abs(o - ref))),
                     default=not knobs)
            rows.append(r)
            print(f"  B={b} ctx={s} {knobs} (P={p}, {r['programs']} programs): {r['us']:.1f} us "
                  f"(kernel {r['kernel_us']:.1f}) {r['pct_copy']:.1f}%"
                  f"{' (default)' if r['default'] else ''}", flush=True)
        del kw, vw
    lines = [f"# NVFP4 v6 decode attention: split counts and knob variants, "
             f"{jax.devices()[0].device_kind} (jax {jax.__version__})", "",
             f"command: `python -m pallas_kernels.bench_attention_v5 {' '.join(argv or sys.argv[1:])}`",
             "", "device time per call (kernel + split combine) and of the attention kernel "
             f"alone; % copy = KV bytes / call time against a device-time copy of "
             f"{bw / 1e12:.2f} TB/s; warps {nw0}; KV caches in the kv_words layout.", "",
             "| B x ctx | splits | programs | block_k | stages | us | kernel us | % copy | "
             "max abs vs row 1 | default |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ctx = f"{r['context'] // 1024}K" if r["context"] >= 1024 else str(r["context"])
        lines.append(f"| {r['batch']} x {ctx} | {r['num_splits']} | "
                     f"{r['programs']} | {r['block_k']} | {r['num_stages']} | {r['us']:.1f} | "
                     f"{r['kernel_us']:.1f} | {r['pct_copy']:.1f} | {r['max_abs_vs_first']:.1e} "
                     f"| {'yes' if r['default'] else ''} |")
    devtime.write_sweep(a.out, "kernels_attention_v6_splits", lines, rows, bw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
