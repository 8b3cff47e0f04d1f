"""Device-time sweep of the FP4 grouped expert matmul's knobs at the 30B decode shapes (issue 6).

  python -m pallas_kernels.sweep_grouped [--out DIR] [--max-seconds S] [--quick]

Why: session 8's Nsight Compute profile of the default persistent NVFP4 kernel (bn 128, 264
programs, 7 stages; 888 rows x 2048 x 768, 128 experts) showed 1.84 active warps per scheduler
(occupancy limited by 82 KB of shared memory per program: 2 programs per SM), 0.54 instructions
issued per scheduler cycle and 39% of DRAM bandwidth: the kernel waits on latency with too few
warps to hide it. Session 5 picked these knobs from per-call wall times, ~250 us of which are
launch and host time for a ~60 us kernel. Here every config is timed by its kernel's device time
(``devtime``-style profile, only the ``fp4_matmul`` kernel's events), checked against the
reference, and reported as bandwidth over the expert bytes it touches against a device copy
bandwidth measured the same way.

Phase 1: the full grid at the 32K step's shape (111 sequences x top-8 = 888 rows, gate/up 2048 x
768). Phase 2: the default and the best phase-1 configs at all six decode shapes (216 / 888 /
3528 rows, i.e. the 128K / 32K / 8K batches, x gate/up 2048 x 768 and down 768 x 2048).
Writes ``kernels_matmul_grouped_sweep.{md,json}`` to --out.
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
from pallas_kernels.bench_matmul import route  # noqa: E402
from trace_jax import quant  # noqa: E402

E, TOPK = 128, 8
SHAPES = [(m, k, n) for m in (888, 216, 3528) for k, n in ((2048, 768), (768, 2048))]
# knob values; ``programs`` in persistent programs per SM (2, 3, 4 x 132 on the H200)
GRID = dict(bn=(64, 128), programs=(2, 3, 4), num_stages=(3, 5, 7), num_warps=(4, 8))


class Case:
    """Weights, routing and input of one decode shape, with its reference output and bytes."""

    def __init__(self, m, k, n, key):
        self.m, self.k, self.n = m, k, n
        w32 = jax.random.normal(key, (E, k, n), jnp.float32)
        self.w = fm.prepare_weights(quant.quantize(w32, "nvfp4", axis=-2))
        self.gs = route(m // TOPK, E, TOPK, jax.random.fold_in(key, 1))
        self.x = jax.random.normal(jax.random.fold_in(key, 2), (m, k)).astype(jnp.bfloat16)
        self.ref = np.asarray(fm.fp4_grouped_matmul_reference(self.x, self.w, self.gs), np.float32)
        touched = int(np.sum(np.asarray(self.gs) > 0))
        w_bytes = (self.w.codes.nbytes + self.w.scales.nbytes) * touched / E
        self.bytes = w_bytes + self.x.nbytes + 2 * m * n
        self.touched = touched

    def run(self, cfg):
        """(device seconds, relative error) of one config."""
        f = jax.jit(lambda x, w, gs: mt.grouped(x, w, gs, cfg))
        out = np.asarray(f(self.x, self.w, self.gs), np.float32)
        err = float(np.linalg.norm(out - self.ref) / np.linalg.norm(self.ref))
        # the kernel alone: the wrapper's item tables are small XLA kernels
        return devtime.device_seconds(f, self.x, self.w, self.gs, kernel="fp4_matmul"), err


def configs(base: mt.Config, quick: bool):
    grid = {k: v[:2] for k, v in GRID.items()} if quick else GRID
    keys = list(grid)
    for vals in itertools.product(*(grid[k] for k in keys)):
        knobs = dict(zip(keys, vals))
        knobs["programs"] *= mt._sm_count()
        yield dataclasses.replace(base, **knobs)


def name(cfg: mt.Config) -> str:
    return f"bn{cfg.bn} p{cfg.programs} s{cfg.num_stages} w{cfg.num_warps}"


def main(argv=None) -> int:
    a = devtime.sweep_parser(__doc__, 400.0, "2 values per knob (smoke runs)").parse_args(argv)
    t0 = time.time()
    dev = jax.devices()[0]
    bw = devtime.report_copy_bandwidth()
    key = jax.random.key(0)
    cases = {s: None for s in SHAPES}

    def case(s):
        if cases[s] is None:
            cases[s] = Case(*s, jax.random.fold_in(key, SHAPES.index(s)))
        return cases[s]

    rows = []

    def measure(shape, cfg, phase):
        c = case(shape)
        try:
            t, err = c.run(cfg)
        except Exception as e:  # noqa: BLE001  (a config that does not compile / fit)
            print(f"  {shape} {name(cfg)}: {type(e).__name__}: {str(e)[:160]}", flush=True)
            return None
        if not err < 1e-2:
            raise SystemExit(f"{shape} {name(cfg)}: wrong output (rel err {err:.2e})")
        r = dict(phase=phase, m=shape[0], k=shape[1], n=shape[2], cfg=dataclasses.asdict(cfg),
                 name=name(cfg), us=t * 1e6, tbs=c.bytes / t / 1e12, pct_copy=100 * c.bytes / t / bw,
                 err=err, touched=c.touched, default=cfg == mt.default_config(*shape, grouped=True))
        rows.append(r)
        print(f"  {shape} {r['name']:18s} {r['us']:8.1f} us {r['tbs']:5.2f} TB/s "
              f"{r['pct_copy']:5.1f}% err {err:.1e}{'  (default)' if r['default'] else ''}",
              flush=True)
        return r

    s1 = SHAPES[0]
    base = mt.default_config(*s1, grouped=True)
    print(f"phase 1: {s1}, default {name(base)}", flush=True)
    measure(s1, base, 1)
    for cfg in configs(base, a.quick):
        if time.time() - t0 > a.max_seconds * 0.6:
            print("  (phase-1 time budget spent)", flush=True)
            break
        if cfg != base:
            measure(s1, cfg, 1)
    p1 = sorted((r for r in rows if r["phase"] == 1), key=lambda r: r["us"])
    best = [mt.Config(**r["cfg"]) for r in p1[: a.top]]
    print(f"phase 2: default + {[name(c) for c in best]} at {len(SHAPES)} shapes", flush=True)
    for shape in SHAPES:
        d = mt.default_config(*shape, grouped=True)
        cands = [d] + [dataclasses.replace(b, bm=d.bm) for b in best]
        for cfg in [c for i, c in enumerate(cands) if c not in cands[:i]]:  # no repeats
            if time.time() - t0 > a.max_seconds:
                print("  (time budget spent)", flush=True)
                break
            measure(shape, cfg, 2)

    lines = [f"# FP4 grouped matmul knob sweep: {dev.device_kind} (jax {jax.__version__})", "",
             f"command: `python -m pallas_kernels.sweep_grouped {' '.join(argv or sys.argv[1:])}`",
             "", f"device copy bandwidth {bw / 1e12:.2f} TB/s (device time of an f32 pass); "
             "times are the fp4_matmul kernel's device time per call (5 profiled calls); "
             "bytes = touched experts' codes + scales + x + out; NVFP4, 128 experts, top-8.", "",
             "| phase | rows x K x N | config | us | TB/s | % copy | default |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["phase"], r["m"], r["k"], r["us"])):
        lines.append(f"| {r['phase']} | {r['m']} x {r['k']} x {r['n']} | {r['name']} | "
                     f"{r['us']:.1f} | {r['tbs']:.2f} | {r['pct_copy']:.1f} | "
                     f"{'yes' if r['default'] else ''} |")
    devtime.write_sweep(a.out, "kernels_matmul_grouped_sweep", lines, rows, bw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
