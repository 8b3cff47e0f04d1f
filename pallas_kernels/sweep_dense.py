"""Device-time sweep of the dense FP4 decode matmul (issue 6): split-K vs stream-K, tile knobs.

  python -m pallas_kernels.sweep_dense [--out DIR] [--max-seconds S] [--quick]

Why: session 9 measured the default dense kernel at 42-43% of the device copy bandwidth for
M <= 8 (8192 x 28672, NVFP4) and 28% / 16% at M = 32 / 64, but only its default config in
device time; the variants were timed per call, where ~100 us of launch and host time hide the
kernel. The static SASS (``matmul_compilecheck``) counts ~1,180 instructions per warp per K step
(~4.6 per weight element): at the H200's ~1e12 warp instructions/s the M = 1 call issues for
~34 us against ~31 us of memory time, so the kernel is issue-bound about as much as it is
bandwidth-bound. Here every config is timed by the device time of the whole call (the kernel
plus the split-K / stream-K sum), checked against the reference, and reported against a device
copy bandwidth measured the same way.

Phase 1: the split-K grid (bn x split x stages) and the stream-K grid (``Config.programs``: equal
work per program, no partial wave) at M = 1 and 8. Phase 2: the default and the best phase-1
configs at M = 1, 8, 32, 64 (with bm 32 for M >= 32).
Writes ``kernels_matmul_dense_sweep.{md,json}`` to --out.

``--grid warps`` (session 12) sweeps the knobs session 11 held fixed instead: warps per program
(2, 4, 8) and K per step (256, 512), around the split-K and stream-K defaults. Session 11's
Nsight Compute profile found 4 warps per scheduler (108 registers, 53 KB of shared memory per
4-warp program) with no eligible warp on 40% of cycles: more, thinner warps per SM is the
direct lever. Writes ``kernels_matmul_dense_warps.{md,json}``.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from pallas_kernels import devtime  # noqa: E402
from pallas_kernels import fp4_matmul as fm  # noqa: E402
from pallas_kernels import matmul_triton as mt  # noqa: E402
from trace_jax import quant  # noqa: E402

K, N = 8192, 28672
PHASE1_M = (1, 8)
PHASE2_M = (1, 8, 32, 64)


def grid(m: int, quick: bool):
    """Phase-1 configs: stream-K, then split-K (one program per (rows, N tile, K slice))."""
    d = mt.default_config(m, K, N, grouped=False)
    cut = (lambda v: v[:2]) if quick else (lambda v: v)
    for bn, per_sm, stages in itertools.product(cut((128, 64)), cut((3, 2, 4)), cut((3, 4, 5))):
        yield dataclasses.replace(d, bn=bn, split_k=1, num_stages=stages,
                                  programs=per_sm * mt._sm_count())
    for bn, split, stages in itertools.product(cut((128, 64, 256)), cut((2, 1, 4, 8)),
                                               cut((3, 4))):
        yield dataclasses.replace(d, bn=bn, split_k=split, num_stages=stages, programs=0)


def warps_grid(m: int, quick: bool):
    """``--grid warps`` phase-1 configs: warps x BK around the split-K and stream-K defaults
    (bn 128 / 3 stages, which session 11 found best with 4 warps, plus bn 256 and 2 stages for
    8 warps, whose programs hold half the registers per thread)."""
    d = mt.default_config(m, K, N, grouped=False)
    cut = (lambda v: v[:1]) if quick else (lambda v: v)
    split = [(w, bk, 128, s, 3) for w in (8, 2, 4) for bk in (256, 512) for s in cut((4, 2))]
    split += [(8, bk, bn, s, st) for bk in cut((256, 512)) for bn, st in ((256, 3), (128, 2))
              for s in cut((2, 4))]
    for warps, bk, bn, s, stages in split:
        yield dataclasses.replace(d, num_warps=warps, bk=bk, bn=bn, split_k=s,
                                  num_stages=stages, programs=0)
    for warps, bk, per_sm, stages in itertools.product(cut((8, 4)), cut((256, 512)), (3, 4, 2),
                                                       cut((3, 4))):
        yield dataclasses.replace(d, num_warps=warps, bk=bk, bn=128, split_k=1,
                                  num_stages=stages, programs=per_sm * mt._sm_count())


def name(cfg: mt.Config) -> str:
    kind = f"streamk p{cfg.programs}" if cfg.programs else f"split{cfg.split_k}"
    bk = "" if cfg.bk == 256 else f" bk{cfg.bk}"
    return f"bm{cfg.bm} bn{cfg.bn}{bk} {kind} s{cfg.num_stages} w{cfg.num_warps}"


def main(argv=None) -> int:
    ap = devtime.sweep_parser(__doc__, 540.0, "2 values per knob (smoke runs)")
    ap.add_argument("--grid", choices=("tiles", "warps"), default="tiles",
                    help="phase-1 knobs: tiles (session 11) or warps x BK (session 12)")
    a = ap.parse_args(argv)
    phase1 = grid if a.grid == "tiles" else warps_grid
    stem = "kernels_matmul_dense_sweep" if a.grid == "tiles" else "kernels_matmul_dense_warps"
    t0 = time.time()
    dev = jax.devices()[0]
    bw = devtime.report_copy_bandwidth()
    key = jax.random.key(0)
    w = fm.prepare_weights(quant.quantize(jax.random.normal(key, (K, N)), "nvfp4", axis=-2))
    xs = {m: jax.random.normal(jax.random.fold_in(key, m), (m, K)).astype(jnp.bfloat16)
          for m in PHASE2_M}
    refs = {m: np.asarray(fm.fp4_matmul_reference(x, w), np.float32) for m, x in xs.items()}
    rows = []

    def measure(m, cfg, phase):
        x, ref = xs[m], refs[m]
        f = jax.jit(lambda x, w: mt.dense(x, w, cfg))
        try:
            out = np.asarray(f(x, w), np.float32)
            t = devtime.device_seconds(f, x, w)
        except Exception as e:  # noqa: BLE001  (a config that does not compile / fit)
            print(f"  M={m} {name(cfg)}: {type(e).__name__}: {str(e)[:160]}", flush=True)
            return
        err = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
        if not err < 1e-2:
            raise SystemExit(f"M={m} {name(cfg)}: wrong output (rel err {err:.2e})")
        nbytes = w.nbytes + x.nbytes + 2 * m * N
        r = dict(phase=phase, m=m, cfg=dataclasses.asdict(cfg), name=name(cfg), us=t * 1e6,
                 tbs=nbytes / t / 1e12, pct_copy=100 * nbytes / t / bw, err=err,
                 default=cfg == mt.default_config(m, K, N, grouped=False))
        rows.append(r)
        print(f"  M={m:3d} {r['name']:34s} {r['us']:8.1f} us {r['tbs']:5.2f} TB/s "
              f"{r['pct_copy']:5.1f}% err {err:.1e}{'  (default)' if r['default'] else ''}",
              flush=True)

    for m in PHASE1_M:
        d = mt.default_config(m, K, N, grouped=False)
        print(f"phase 1: M={m}, default {name(d)}", flush=True)
        measure(m, d, 1)
        for cfg in phase1(m, a.quick):
            if time.time() - t0 > a.max_seconds * 0.35 * (PHASE1_M.index(m) + 1):
                print("  (phase-1 time budget spent)", flush=True)
                break
            if cfg != d:
                measure(m, cfg, 1)
    p1 = sorted((r for r in rows if r["phase"] == 1), key=lambda r: r["us"])
    best = []
    for r in p1:  # the fastest distinct knob sets over both M
        c = mt.Config(**r["cfg"])
        if all(c != b for b in best):
            best.append(c)
        if len(best) == a.top:
            break
    print(f"phase 2: default + {[name(c) for c in best]} at M = {PHASE2_M}", flush=True)
    for m in PHASE2_M:
        d = mt.default_config(m, K, N, grouped=False)
        cands = [d] + [dataclasses.replace(b, bm=bm) for b in best for bm in {16, d.bm}]
        for cfg in [c for i, c in enumerate(cands) if c not in cands[:i]]:
            if time.time() - t0 > a.max_seconds:
                print("  (time budget spent)", flush=True)
                break
            if not any(r["phase"] == 1 and r["m"] == m and r["name"] == name(cfg) for r in rows):
                measure(m, cfg, 2)

    lines = [f"# FP4 dense decode matmul knob sweep: {dev.device_kind} (jax {jax.__version__})",
             "",
             f"command: `python -m pallas_kernels.sweep_dense {' '.join(argv or sys.argv[1:])}`",
             "", f"device copy bandwidth {bw / 1e12:.2f} TB/s (device time of an f32 pass); "
             f"times are the device time per call of the whole jitted call (kernel + partial "
             f"sums; 5 profiled calls); NVFP4 {K} x {N}; bytes = codes + scales + x + out.", "",
             "| phase | M | config | us | TB/s | % copy | default |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["m"], r["us"])):
        lines.append(f"| {r['phase']} | {r['m']} | {r['name']} | {r['us']:.1f} | {r['tbs']:.2f} | "
                     f"{r['pct_copy']:.1f} | {'yes' if r['default'] else ''} |")
    devtime.write_sweep(a.out, stem, lines, rows, bw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
