"""The Mosaic GPU FP4 matmul prototype (``pallas_kernels.fp4_matmul_mgpu``) on one GPU: exactness
against the pure-JAX reference and device time against the Pallas-Triton FP4 kernel and the XLA
bf16 dot at the issue-6 decode shapes; then a (tk, pipeline steps) sweep at 8192 x 28672.

  python experiments/check_mgpu_matmul.py [--out DIR] [--sweep]
  python experiments/check_mgpu_matmul.py --grouped [--sweep | --prefill]   # the MoE kernel
  python experiments/check_mgpu_matmul.py --summary DIR/kernels_matmul_mgpu.json  # a dense run

Per row: time per call (device time of all its kernels, 5 profiled calls), bytes the FP4 kernel
streams (codes + scales) / time as % of a copy measured the same way, relative error (Frobenius)
against ``fp4_matmul_mgpu_reference`` (dequantize to f32 + f32 dot, cast to bf16). GPU only.
The sweep's ``diag=raw_scales`` row skips the scale conversion; ``--diag`` times the dense kernel
with parts left out (``fp4_matmul_mgpu._DIAG``: wrong values, timing probes).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import os
import re
import sys
import time
import traceback

import jax
import jax.numpy as jnp

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)
from pallas_kernels import devtime  # noqa: E402
from pallas_kernels import fp4_matmul as fm  # noqa: E402
from pallas_kernels import fp4_matmul_mgpu as FM  # noqa: E402
from trace_jax.quant import quantize  # noqa: E402

SHAPES = ((8192, 28672), (2048, 768), (768, 2048))
MS = (1, 8, 32, 64)


rel = devtime.relerr

# The plain dense kernel's trace-time knobs (fp4_matmul_mgpu): what maxdiff_t1 compares against.
_PLAIN = dict(_DIAG=None, DENSE_OUT_SCOPED=True, DENSE_TOKEN_MAJOR=False)


@contextlib.contextmanager
def _knobs(**values):
    """fp4_matmul_mgpu's module knobs set to ``values`` inside, restored after (an exception
    included). The inner jits' caches are cleared on both sides: a knob that their static
    arguments do not carry (``_DIAG``, read when the K loop traces) would
    otherwise reuse another config's trace."""
    old = {name: getattr(FM, name) for name in values}

    for name, v in values.items():
        setattr(FM, name, v)
    FM.clear_trace_caches()
    try:
        yield
    finally:
        for name, v in old.items():
            setattr(FM, name, v)
        FM.clear_trace_caches()

# --summary: the knob columns that a dense row may carry, (column, short name), in print order
# (fused: 28e's runs; diag: a timing probe, empty for the kernel itself)
_KNOBS = (("tk", "tk"), ("steps", "st"), ("splits", "sp"), ("tiles", "t"), ("serial", "ser"),
          ("out_scoped", "sc"), ("fused", "fu"), ("token_major", "tm"), ("diag", "diag"))


def summary_lines(path: str) -> list[str]:
    """A dense run's JSON (this script's output) as one line per row, sorted by shape, M and
    time: the knobs, time, % of copy, relerr, the max difference from tiles 1 and the bf16
    dot's time where measured."""
    import json

    with open(path) as f:
        rows = json.load(f)["rows"]
    out = []
    for r in sorted(rows, key=lambda r: (r["k"], r["n"], r["m"], r["mgpu_us"])):
        knobs = " ".join(f"{short}={int(r[c]) if isinstance(r[c], bool) else r[c]}"
                         for c, short in _KNOBS if r.get(c, "") != "")
        bf16 = r.get("bf16_us")
        out.append(f"{r['k']}x{r['n']} M={r['m']:>3} {knobs} {r['mgpu_us']:7.2f} us "
                   f"{r['mgpu_pct_copy']:5.1f}% err={r['mgpu_relerr']:.1e} "
                   f"d1={r.get('maxdiff_t1')}" + (f" bf16={bf16:.1f}" if bf16 else ""))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(_REPO, "experiments", "results"))
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--tk", default="",
                    help="dense: K per pipeline step, a list, e.g. 128,256 (default: "
                         "fp4_matmul_mgpu.default_dense_tk by M)")
    ap.add_argument("--steps", default="",
                    help="pipeline stages (default: fp4_matmul_mgpu.default_steps by M); dense: "
                         "a list, e.g. 2,3,4")
    ap.add_argument("--chunked", action="store_true",
                    help="dense only: one wgmma per 64-column span of a K step")
    ap.add_argument("--shapes", default="",
                    help="K x N shapes instead of the issue's, e.g. 8192x25344,8192x28672 (with "
                         "--grouped: per expert, e.g. 768x2048)")
    ap.add_argument("--ms", default="", help="dense token counts instead of 1,8,32,64")
    ap.add_argument("--splits", default="1",
                    help="dense: K splits per 64 weight rows to time, e.g. auto,1,2 (auto: "
                         "fp4_matmul_mgpu.default_splits; column splits)")
    ap.add_argument("--baselines", default="triton,bf16",
                    help="which baselines to time beside the Mosaic kernel ('' = none; "
                         "--grouped times only triton, the Triton grouped kernel, and "
                         "without it leaves out the W4A4 rows)")
    ap.add_argument("--prefill", action="store_true",
                    help="with --grouped: prefill-sized calls (2048, 8192 tokens), a knob sweep "
                         "for large groups; writes kernels_matmul_mgpu_grouped_prefill.*")
    ap.add_argument("--no-x-pad", action="store_true",
                    help="with --grouped: also time the Mosaic kernel on the rows layout "
                         "without the read pad (x_pad=False: TMA fills the rows past M), column "
                         "mgpu_nopad (compare with --x-layout rows and GROUPED_X_PAD)")
    ap.add_argument("--aligned", action="store_true",
                    help="with --grouped: the Mosaic kernel on the aligned x layout (mp 16 and "
                         "8: columns mgpu_al16 / mgpu_al8, max diff vs the rows layout) beside "
                         "the rows layout; no Triton or W4A4 rows")
    ap.add_argument("--tokens", default="",
                    help="with --grouped: token counts instead of %s (each routed to top-%d of "
                         "%d experts), e.g. 32,128,512" % (",".join(map(str, TOKENS)), TOPK, E))
    ap.add_argument("--x-layout", default=None, choices=list(FM.X_LAYOUTS),
                    help="with --grouped: the Mosaic kernel's x layout (default: "
                         "fp4_matmul_mgpu.GROUPED_X_LAYOUT; --aligned compares rows with aligned)")
    ap.add_argument("--tiles", default="",
                    help="dense: 64-row weight tiles per CTA to time, e.g. 1,2,4 (default: "
                         "fp4_matmul_mgpu.default_dense_tiles; every row but the plain kernel's "
                         "(1 tile, tile stores, XLA-summed partials) gets maxdiff_t1, its "
                         "largest difference from the plain kernel at the same splits and tk). "
                         "With --grouped: also time the Mosaic kernel with these 64-row weight "
                         "tiles per program, e.g. 2,4 (columns mgpu_nt2, ...; fp4_matmul_mgpu."
                         "GROUPED_TILES)")
    ap.add_argument("--serial", default="0",
                    help="dense, tiles > 1: fp4_matmul_mgpu.DENSE_SERIAL_TILES values to time, "
                         "e.g. 1,0 (0: the next tile decodes under the previous tile's wgmma)")
    ap.add_argument("--out-scoped", default="1",
                    help="dense: fp4_matmul_mgpu.DENSE_OUT_SCOPED values to time, e.g. 1,0")
    ap.add_argument("--token-major", default="auto",
                    help="dense: fp4_matmul_mgpu.DENSE_TOKEN_MAJOR values to time, e.g. 0,1 "
                         "(1: partials stored [splits, M, N] from registers, no transpose; "
                         "auto: default_token_major)")
    ap.add_argument("--diag", default="",
                    help="also time each dense config (with --grouped: the first Mosaic "
                         "config, columns mgpu_<probe>) with these timing probes, e.g. "
                         "no_decode,stream_only,weights_only,x_only (fp4_matmul_mgpu.DIAGS; "
                         "wrong values: their relerr and maxdiff_t1 are not judged); with "
                         "--grouped a stream probe may cap the CTAs an SM holds of it, e.g. "
                         "stream_only:2 (column mgpu_stream_only_c2; fp4_matmul_mgpu._DIAG_CTAS)")
    ap.add_argument("--max-seconds", type=float, default=1e9,
                    help="skip the configs (dense) or columns (--grouped) left after this many "
                         "seconds (the results so far are still written)")
    ap.add_argument("--breakdown", action="store_true",
                    help="dense: also the Mosaic kernel alone (kernel_us) and the call with x "
                         "padded to a multiple of 8 rows by XLA (padded_us: the wrapper before "
                         "session 26) with its max |difference| from the call (padded_maxdiff)")
    ap.add_argument("--summary", metavar="JSON", default=None,
                    help="instead: print a dense run's JSON (kernels_matmul_mgpu.json) as one "
                         "line per row")
    ap.add_argument("--knobs", default="",
                    help="with --grouped: (mp, tk, steps) triples to time instead of the "
                         "library's pick, e.g. 56:256:2,40:256:2 (columns mgpu_mp56_tk256_s2, "
                         "...; each later one with its maxdiff against the first, the one --tiles, "
                         "--widths and --diag use)")
    ap.add_argument("--widths", default="",
                    help="with --grouped: also time the first Mosaic config with these narrower "
                         "chunk widths (fp4_matmul_mgpu.GROUPED_WIDTHS), sets separated by ';', "
                         "e.g. '32,40,48;40' (columns mgpu_w32_40_48, mgpu_w40, each with "
                         "maxdiff against the first Mosaic config)")
    ap.add_argument("--grouped", action="store_true",
                    help="instead: the grouped (MoE) kernel at the 30B decode shapes (128 experts, "
                         "top-8) against the Triton grouped kernel; writes kernels_matmul_mgpu_grouped.*")
    a = ap.parse_args(argv)
    try:
        probes = parse_probes(a.diag)
    except ValueError as e:
        ap.error(f"--diag: {e}")
    if any(ctas for _, ctas in probes) and not a.grouped:
        ap.error("--diag: a stream probe's CTA cap (probe:N) is for --grouped only")
    if a.knobs:
        parse_knobs(a.knobs)  # (a malformed list stops here, before any GPU work)
    if not re.fullmatch(r"(\d+(,\d+)*)?(;\d+(,\d+)*)*", a.widths):
        ap.error(f"--widths {a.widths!r}: expected ';'-separated lists of ints, e.g. '32,40;48'")
    if a.widths and a.knobs:  # each set must fit the first config's chunk rows
        r = FM.chunk_rows(parse_knobs(a.knobs)[0][0], grouped_layout(a) == "aligned")
        for ws in parse_widths(a.widths):
            try:
                FM.check_widths(ws, r)
            except ValueError as e:
                ap.error(f"--widths {a.widths!r}: {e}")
    if a.summary:
        print("\n".join(summary_lines(a.summary)))
        return 0
    if a.grouped:
        return grouped(a, argv)
    bw = devtime.report_copy_bandwidth(1 << 30)
    rows = []

    def timed(name, f, *args, **row):
        try:
            t = devtime.device_seconds(f, *args)
        except Exception as e:  # noqa: BLE001  (a config that does not compile: report, go on)
            print(f"  {name} {row}: {type(e).__name__}: {str(e)[:400]}", flush=True)
            traceback.print_exc(limit=3)
            return None
        return t

    shapes = ([tuple(int(v) for v in kn.split("x")) for kn in a.shapes.split(",")] if a.shapes
              else SHAPES[:1] if a.sweep else SHAPES)
    ms = tuple(int(v) for v in a.ms.split(",")) if a.ms else (1, 8) if a.sweep else MS
    splits = [None if v == "auto" else int(v) for v in a.splits.split(",")]
    tiles = [int(v) for v in a.tiles.split(",")] if a.tiles else [None]
    serials = [v == "1" for v in a.serial.split(",")]
    scopeds = [v == "1" for v in a.out_scoped.split(",")]
    tmajors = [None if v == "auto" else v == "1" for v in a.token_major.split(",")]
    diags = [None] + [v for v in a.diag.split(",") if v]
    deadline = time.time() + a.max_seconds
    baselines = [b for b in a.baselines.split(",") if b]
    for k, n in shapes:
        q = jax.jit(lambda w: quantize(w, "nvfp4", axis=-2, global_scope="tensor"))(
            jax.random.normal(jax.random.PRNGKey(k + n), (k, n), jnp.float32))
        wm, wt = jax.jit(FM.prepare_mgpu)(q), jax.jit(fm.prepare_weights)(q)
        wb = jax.jit(lambda q: fm.dequantize_bf16(fm.prepare_weights(q)))(q)
        nbytes = wm.nbytes
        for m in ms:
            x = jax.random.normal(jax.random.PRNGKey(m), (m, k), jnp.bfloat16)
            ref = jax.jit(FM.fp4_matmul_mgpu_reference)(x, wm)
            mp = max(8, -(-m // 8) * 8)
            stepss = [int(v) for v in a.steps.split(",")] if a.steps else [FM.default_steps(mp)]
            configs = ([(*c, False, None, 1, None, True, True, False)
                        for c in itertools.product((256, 512), (2, 3, 4))]
                       + [(256, 4, False, "raw_scales", 1, None, True, True, False)] if a.sweep
                       else [(min(tk, k // (sp or 1)), steps, a.chunked, dg, sp, tl, se, sc,
                              tm)
                             for tm in tmajors for sc in scopeds
                             for sp in splits for tl in tiles
                             for se in serials for steps in stepss
                             for tk in ([int(v) for v in a.tk.split(",")] if a.tk
                                        else [FM.default_dense_tk(mp)])
                             for dg in diags])
            plains = {}  # (splits, tk) -> the plain call's output (maxdiff_t1)

            def plain_out(sp, tk, steps):
                """The output of the plain kernel (1 tile, tile stores, XLA-summed partials)
                at these splits and tk: what every other variant must equal bit for bit."""
                if (sp, tk) not in plains:
                    with _knobs(**_PLAIN):
                        plains[(sp, tk)] = FM.fp4_matmul_mgpu(x, wm, tk=tk, steps=steps,
                                                              splits=sp, tiles=1,
                                                              backend="mgpu")
                return plains[(sp, tk)]

            based = a.sweep  # the baselines, once per shape and M, beside the first row
            for tk, steps, chunked, diag, sp, tl, se, sc, tm in configs:
                auto = sp is None  # the default rule's choice (column auto_splits)
                if auto:
                    sp = FM.default_splits(n, k, mp, tk, steps)
                tl = FM.default_dense_tiles(n, mp) if tl is None else tl
                if tl == 1 and se != serials[0]:
                    continue  # serial is moot with one tile: time it once
                if k % (tk * sp) or n % (FM.ROWS * tl) or \
                        FM.dense_smem(mp, tk, steps, tl, scoped=sc) > FM._SMEM_PER_SM:
                    continue
                if time.time() > deadline:
                    print(f"  time budget spent: skipping K={k} N={n} M={m} tk={tk} "
                          f"steps={steps} splits={sp} tiles={tl}", flush=True)
                    continue
                plain = tl == 1 and sc and tm is False and not diag
                f = jax.jit(lambda x, w, tk=tk, steps=steps, chunked=chunked, sp=sp, tl=tl:
                            FM.fp4_matmul_mgpu(x, w, tk=tk, steps=steps, chunked=chunked,
                                               splits=sp, tiles=tl, backend="mgpu"))
                with _knobs(_DIAG=diag, DENSE_SERIAL_TILES=se, DENSE_OUT_SCOPED=sc,
                            DENSE_TOKEN_MAJOR=tm):
                    try:
                        out = f(x, wm)
                        err = rel(out, ref)
                    except Exception as e:  # noqa: BLE001
                        print(f"  mgpu K={k} N={n} M={m} tk={tk} steps={steps}: "
                              f"{type(e).__name__}: {str(e)[:1500]}", flush=True)
                        traceback.print_exc(limit=4)
                        continue
                    t = timed("mgpu", f, x, wm, k=k, n=n, m=m)
                if t is None:
                    continue
                if plain:
                    plains.setdefault((sp, tk), out)
                d1 = None if plain or diag else float(jnp.max(jnp.abs(
                    out.astype(jnp.float32) - plain_out(sp, tk, steps).astype(jnp.float32))))
                row = dict(k=k, n=n, m=m, tk=tk, steps=steps, chunked=chunked, splits=sp,
                           auto_splits=auto, tiles=tl, serial=se, out_scoped=sc,
                           token_major=FM.default_token_major(mp) if tm is None else tm,
                           ctas=(n // (FM.ROWS * tl)) * sp, diag=diag or "",
                           mgpu_us=t * 1e6, mgpu_pct_copy=100 * nbytes / t / bw,
                           mgpu_relerr=err, maxdiff_t1=d1)
                if a.breakdown:
                    row.update(_breakdown(f, x, wm, tk=tk, steps=steps, chunked=chunked,
                                          splits=sp, nbytes=nbytes, bw=bw))
                if not based:
                    based = True
                    if "triton" in baselines:
                        ft = jax.jit(lambda x, w: fm.fp4_matmul(x, w, backend="triton"))
                        tt = timed("triton", ft, x, wt)
                        row.update(triton_us=tt and tt * 1e6,
                                   triton_relerr=rel(ft(x, wt), ref),
                                   mgpu_vs_triton=tt and tt / t)
                    if "bf16" in baselines:
                        tb = timed("bf16", jax.jit(lambda x, w: jnp.dot(x, w)), x, wb)
                        row.update(bf16_us=tb and tb * 1e6, mgpu_vs_bf16=tb and tb / t)
                rows.append(row)
                print("  " + "  ".join(f"{kk}={v:.4g}" if isinstance(v, float) else f"{kk}={v}"
                                       for kk, v in row.items()), flush=True)
    stem = "kernels_matmul_mgpu" + ("_sweep" if a.sweep else "")
    lines = devtime.sweep_header(
        "Mosaic GPU FP4 matmul prototype", "python experiments/check_mgpu_matmul.py",
        f"device time per call; % copy = FP4 codes + scales / time against a device-time copy of "
        f"{bw / 1e12:.2f} TB/s; relerr vs dequantize + f32 dot; ctas = (N / 64) x splits.",
        argv) + devtime.table_lines(rows)
    devtime.write_sweep(a.out, stem, lines, rows, bw)
    return 0


def _padded_call(x, w, *, tk, steps, chunked, splits):
    """``fp4_matmul_mgpu`` as it was up to session 25: x padded to a multiple of 8 rows by XLA
    (a launch of its own) before the kernel."""
    m, mp = x.shape[0], max(8, -(-x.shape[0] // 8) * 8)
    xp = jnp.pad(x.astype(jnp.bfloat16), ((0, mp - m), (0, 0)))
    out_t = FM._matmul_t(w.codes, w.scales, xp, tk=tk, steps=steps, chunked=chunked,
                         splits=splits)
    out = jnp.sum(out_t, axis=0)[:, :m].T * (w.global_scale * (2.0 ** FM.SHIFT))
    return out.astype(jnp.bfloat16)


def _breakdown(f, x, w, *, tk, steps, chunked, splits, nbytes, bw) -> dict:
    """--breakdown columns for one dense call ``f(x, w)``: the kernel alone, the XLA-padded
    wrapper's time and its largest difference from ``f``."""
    row = {}
    try:
        t = devtime.device_seconds(f, x, w, kernel="body")
        row.update(kernel_us=t * 1e6, kernel_pct_copy=100 * nbytes / t / bw)
        fp = jax.jit(functools.partial(_padded_call, tk=tk, steps=steps, chunked=chunked,
                                       splits=splits))
        row["padded_maxdiff"] = float(jnp.max(jnp.abs(
            fp(x, w).astype(jnp.float32) - f(x, w).astype(jnp.float32))))
        tp = devtime.device_seconds(fp, x, w)
        row.update(padded_us=tp * 1e6, padded_pct_copy=100 * nbytes / tp / bw)
    except Exception as e:  # noqa: BLE001
        devtime.report_failure(f"breakdown M={x.shape[0]}", e)
    return row


GROUPED = ((2048, 768), (768, 2048))
GROUPED_KNOBS = ((16, 256, 2), (8, 256, 2), (24, 256, 2), (16, 256, 4))  # (mp, tk, steps), --sweep
# --sweep at K = 768 (the down projection: 3 pipeline steps of tk 256 per chunk by default):
# the K step and the stages, at the default mp (decode rows: 16)
DOWN_KNOBS = ((16, 256, 2), (16, 256, 3), (16, 128, 2), (16, 128, 3), (16, 128, 4),
              (16, 384, 2), (16, 192, 3))
PREFILL_KNOBS = ((16, 256, 2), (56, 256, 2), (120, 256, 2), (120, 128, 3), (240, 128, 2))
TOKENS = (27, 111)
PREFILL_TOKENS = (2048, 8192)  # --prefill: 16K and 64K routed rows (mean group 128 / 512)
E, TOPK = 128, 8


def parse_probes(spec: str) -> list[tuple[str, int | None]]:
    """``"no_decode,stream_only:2"`` -> [("no_decode", None), ("stream_only", 2)]: --diag's
    timing probes (fp4_matmul_mgpu.DIAGS), a stream probe optionally with the CTAs an SM may
    hold of it (fp4_matmul_mgpu._DIAG_CTAS, column suffix _c2). ValueError names a bad entry."""
    out = []
    for part in filter(None, spec.split(",")):
        probe, _, ctas = part.partition(":")
        if probe not in FM.DIAGS:
            raise ValueError(f"unknown probe {probe!r}; expected some of {list(FM.DIAGS)}")
        if ctas and (probe not in FM.STREAM_PROBES or not ctas.isdigit() or int(ctas) < 1):
            raise ValueError(f"{part!r}: a CTA cap is a positive integer after a stream probe "
                             f"({', '.join(FM.STREAM_PROBES)})")
        out.append((probe, int(ctas) if ctas else None))
    return out


def parse_knobs(spec: str) -> tuple[tuple[int, int, int], ...]:
    """``"56:256:2,40:256:2"`` -> ((56, 256, 2), (40, 256, 2)): --knobs' (mp, tk, steps)."""
    try:
        knobs = tuple(tuple(int(v) for v in t.split(":")) for t in spec.split(",") if t)
    except ValueError:
        knobs = ()
    if not knobs or any(len(t) != 3 or t[0] % 8 or min(t) < 1 for t in knobs):
        raise SystemExit(f"--knobs {spec!r}: expected mp:tk:steps triples, mp a multiple of 8, "
                         "e.g. 56:256:2,40:256:2")
    return knobs


def grouped_layout(a) -> str:
    """The x layout of --grouped's Mosaic columns: rows beside --aligned's columns, else
    --x-layout or the library's default."""
    return "rows" if a.aligned else a.x_layout or FM.GROUPED_X_LAYOUT


def parse_widths(spec: str) -> tuple[tuple[int, ...], ...]:
    """``"32,40;48"`` -> ((32, 40), (48,)): --widths' sets (the syntax checked by main)."""
    return tuple(tuple(int(v) for v in t.split(",")) for t in spec.split(";") if t)


def grouped(a, argv) -> int:
    from pallas_kernels.bench_matmul import route

    bw = devtime.report_copy_bandwidth(1 << 30)
    rows = []
    suffix = "_prefill" if a.prefill else "_sweep" if a.sweep else ""
    deadline = time.time() + a.max_seconds

    def save(rows_now, echo=True):
        lines = devtime.sweep_header(
            "Mosaic GPU FP4 grouped matmul prototype", "python experiments/check_mgpu_matmul.py",
            f"{E} experts, top-{TOPK} random routing; device time per call (all kernels of the "
            f"call); % copy = codes + scales of the experts with tokens / time against a "
            f"device-time copy of {bw / 1e12:.2f} TB/s; relerr vs dequantize + f32 ragged_dot.",
            argv) + devtime.table_lines(rows_now)
        devtime.write_sweep(a.out, "kernels_matmul_mgpu_grouped" + suffix, lines, rows_now, bw,
                            echo=echo)

    shapes = ([tuple(int(v) for v in kn.split("x")) for kn in a.shapes.split(",")] if a.shapes
              else GROUPED)
    for k, n in shapes:
        q = jax.jit(lambda w: quantize(w, "nvfp4", axis=-2, global_scope="tensor"))(
            jax.random.normal(jax.random.PRNGKey(k), (E, k, n), jnp.float32))
        wm, wt = jax.jit(FM.prepare_mgpu)(q), jax.jit(fm.prepare_weights)(q)
        tokens = tuple(int(v) for v in a.tokens.split(",")) if a.tokens else None
        for t in tokens or (PREFILL_TOKENS if a.prefill else TOKENS[-1:] if a.sweep else TOKENS):
            gs = route(t, E, TOPK, jax.random.PRNGKey(t))
            m = t * TOPK
            x = jax.random.normal(jax.random.PRNGKey(m), (m, k), jnp.bfloat16)
            ref = jax.jit(FM.fp4_grouped_matmul_mgpu_reference)(x, wm, gs)
            touched = int(jnp.sum(gs > 0))
            nbytes = touched * k * n * 9 // 16  # codes + scales of the experts with tokens
            row = dict(k=k, n=n, tokens=t, rows=m, experts_touched=touched,
                       max_group=int(jnp.max(gs)))
            runs = [] if a.aligned or "triton" not in a.baselines.split(",") else [
                ("triton", jax.jit(lambda x, w, g: fm.fp4_grouped_matmul(
                    x, w, g, backend="triton")), wt, None, None)]
            lay = grouped_layout(a)
            knobs = (parse_knobs(a.knobs) if a.knobs else PREFILL_KNOBS if a.prefill else
                     (DOWN_KNOBS if k == 768 else GROUPED_KNOBS) if a.sweep else
                     (FM.default_grouped_knobs(m, E, k, lay == "aligned"),))
            # with --widths every other Mosaic column runs one width (not GROUPED_WIDTHS), so the
            # width columns compare with a single-width kernel
            base_ws = () if a.widths else None
            mp0, tk0, steps0 = knobs[0]
            base = "mgpu" if len(knobs) == 1 else f"mgpu_mp{mp0}_tk{tk0}_s{steps0}"
            for i, (mp, tk, steps) in enumerate(knobs):
                name = "mgpu" if len(knobs) == 1 else f"mgpu_mp{mp}_tk{tk}_s{steps}"
                runs.append((name, jax.jit(lambda x, w, g, mp=mp, tk=tk, steps=steps:
                                           FM.fp4_grouped_matmul_mgpu(
                                               x, w, g, mp=mp, tk=tk, steps=steps,
                                               backend="mgpu", x_layout=lay, widths=base_ws)),
                             wm, "body", None))
                if i == 0:  # the width columns right after their baseline: a timeout keeps them
                    for ws in parse_widths(a.widths):
                        runs.append((f"mgpu_w{'_'.join(map(str, ws))}", jax.jit(
                            lambda x, w, g, ws=ws: FM.fp4_grouped_matmul_mgpu(
                                x, w, g, mp=mp0, tk=tk0, steps=steps0, backend="mgpu",
                                x_layout=lay, widths=ws)), wm, "body", None))
            row["default_nt"] = (FM.default_tiles(n, 1) if FM.GROUPED_TILES is None  # the mgpu
                                 else FM.GROUPED_TILES)  # column's tiles per program
            for nt in (int(v) for v in filter(None, a.tiles.split(","))):
                if n % (64 * nt) == 0:
                    runs.append((f"mgpu_nt{nt}", jax.jit(
                        lambda x, w, g, nt=nt: FM.fp4_grouped_matmul_mgpu(
                            x, w, g, mp=mp0, tk=tk0, steps=steps0, backend="mgpu",
                            x_layout=lay, nt=nt, widths=base_ws)), wm, "body", None))
            if a.no_x_pad:
                runs.append(("mgpu_nopad", jax.jit(lambda x, w, g: FM.fp4_grouped_matmul_mgpu(
                    x, w, g, backend="mgpu", x_pad=False, x_layout="rows")), wm, "body", None))
            if a.aligned:
                for amp in (16, 8):
                    runs.append((f"mgpu_al{amp}", jax.jit(
                        lambda x, w, g, amp=amp: FM.fp4_grouped_matmul_mgpu(
                            x, w, g, mp=amp, backend="mgpu", x_layout="aligned")), wm, "body",
                        None))
            for probe, ctas in parse_probes(a.diag):  # timing probes of the first config
                runs.append((f"mgpu_{probe}" + (f"_c{ctas}" if ctas else ""), jax.jit(
                    lambda x, w, g: FM.fp4_grouped_matmul_mgpu(
                        x, w, g, mp=mp0, tk=tk0, steps=steps0, backend="mgpu",
                        x_layout=lay, widths=base_ws)), wm, "body",
                    {"_DIAG": probe, "_DIAG_CTAS": ctas}))
            first = None  # the first Mosaic config's output (--aligned, --widths compare
            # with it; their maxdiff is NaN where it did not run)
            for name, f, w, kname, knobs in runs:  # (knobs: module knobs set while it runs)
                if time.time() > deadline:
                    print(f"  time budget spent: skipping {name} K={k} N={n} T={t}", flush=True)
                    continue
                try:
                    with _knobs(**knobs) if knobs else contextlib.nullcontext():
                        out = f(x, w, gs)
                        row[f"{name}_relerr"] = rel(out, ref)
                        if name == base:
                            first = out
                        # (the width columns mgpu_w32..., not the probe mgpu_weights_only)
                        if a.aligned or re.match(r"mgpu_w\d", name) or (
                                name.startswith("mgpu_mp") and name != base):
                            row[f"{name}_maxdiff"] = float("nan") if first is None else float(
                                jnp.max(jnp.abs(out.astype(jnp.float32)
                                                - first.astype(jnp.float32))))
                        tt = devtime.device_seconds(f, x, w, gs)
                        if kname:  # the Mosaic kernel alone (without the wrapper's XLA ops)
                            row[f"{name}_kernel_us"] = 1e6 * devtime.device_seconds(
                                f, x, w, gs, kernel=kname)
                except Exception as e:  # noqa: BLE001
                    devtime.report_failure(f"{name} K={k} N={n} T={t}", e)
                    continue
                devtime.record_time(row, name, tt, nbytes, bw)
                save(rows + [row], echo=False)  # (a timeout keeps what was timed)
            if "mgpu_us" in row and "triton_us" in row:
                row["mgpu_vs_triton"] = row["triton_us"] / row["mgpu_us"]
            FM.GROUPED_X_LAYOUT = lay  # (the W4A4 rows go through the library's default)
            if not (a.sweep or a.prefill or a.aligned or a.knobs) and time.time() <= deadline \
                    and "triton" in a.baselines.split(","):
                # W4A4 through the library entry point
                xq = quantize(x.astype(jnp.float32), "nvfp4", global_scope="row")
                ref4 = fm.fp4_grouped_matmul_reference(xq, wt, gs)
                for name, w in (("triton", wt), ("mgpu", wm)):  # the model's W4A4 call, timed
                    # (backend "triton": the kernels, never the reference off a GPU)
                    f4 = jax.jit(functools.partial(fm.fp4_grouped_matmul, backend="triton"))
                    row[f"{name}_w4a4_relerr"] = rel(f4(xq, w, gs), ref4)
                    row[f"{name}_w4a4_us"] = 1e6 * devtime.device_seconds(f4, xq, w, gs)
            rows.append(row)
            print(devtime.format_row(row), flush=True)
    save(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
