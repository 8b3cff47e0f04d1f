"""Device-time sweep of the fused quantize-with-hint kernel (issue 7): v2, v3 and v4 side by side.

  python -m pallas_kernels.sweep_quantize [--out DIR] [--max-seconds S] [--quick]

Every config is timed by its kernel's device time (5 profiled calls, the ``quantize_with_hint``
kernel's events only: the tensor scope's global scale is a separate XLA reduction, reported in
the ``all`` column), checked bit for bit against the jitted ``trace_jax.quant`` reference
(codes, scales, global scales, hint bits) and reported as bandwidth over the bytes the kernel
must move (x bf16 + codes + scales + hint bits + global scales) against a device copy measured
the same way. v3 (session 10): one walk over x, compare-and-select rounding; v4 (session 12,
the default): the magic-constant rounding (``quantize_hint._round_code``), uint32 code words;
v5 (session 13, ``--grid v5``): v4 with each block's eight-element parts loaded by one thread;
"2walk": NVFP4 row scope reads x twice (v2's schedule: the row amax first), fewer live registers.
Phase 1: the v4 grid at 65536 x 4096 NVFP4 row scope (the issue's largest shape). Phase 2: v2,
v3, the default and the best phase-1 configs at every shape x format.
Writes ``kernels_quantize_sweep.{md,json}`` to --out.
"""

from __future__ import annotations

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
from pallas_kernels import quantize_hint as QH  # noqa: E402
from trace_jax import quant  # noqa: E402

SHAPES = ((65536, 4096), (32768, 2048), (8192, 2048))
FORMATS = (("nvfp4", "row"), ("mxfp4", "row"), ("nvfp4", "tensor"))
GRID = dict(block_m=(2, 1, 4, 8), num_warps=(4, 2, 8), chunk_k=(512, 256, 1024))
# session 4-9's two walks over x (v2's schedule) and tiles, with the default variant's math;
# ``variant="v3"`` added gives session 10's v2 itself
TWO_WALK = dict(block_m=8, num_warps=4, chunk_k=256, single_walk=False)
GRID_WALKS = dict(block_m=(2, 4, 8), num_warps=(4,), chunk_k=(1024, 512, 256),
                  single_walk=(False, True))
# session 13: v5 (each block's parts loaded by one thread) against the v4 default
GRID_V5 = dict(variant=("v5",), block_m=(2, 4), num_warps=(4, 8), chunk_k=(1024, 2048, 4096))


def kernel_bytes(m: int, k: int, fmt: str) -> int:
    bs = quant.get_format(fmt).block_size
    return m * k * 2 + m * k // 2 + m * k // bs + m * k // 8 + 4 * m


def make_x(m: int, k: int) -> jax.Array:
    """Row magnitudes spread over e**+-4, with zero / NaN / Inf / tiny / tie rows at the top."""
    x = jax.random.normal(jax.random.PRNGKey(m + k), (m, k), jnp.float32)
    x = x * jnp.exp(2 * jax.random.normal(jax.random.PRNGKey(1), (m, 1)))
    x = x.at[0].set(0).at[1, 5].set(jnp.nan).at[2, 9].set(jnp.inf).at[3].set(1e-38)
    x = x.at[4, :8].set(jnp.asarray([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0]))
    return x.astype(jnp.bfloat16)


def at_default_tiles(variant: str, k: int, fmt: str = "nvfp4") -> dict:
    """A variant at its default tiles (``default_knobs`` for the format's block size)."""
    return QH.default_knobs(k, quant.get_format(fmt).block_size, variant) | dict(variant=variant)


def v3(k: int) -> dict:
    """The session-10 kernel (one walk, compare-and-select rounding) at v4's default tiles."""
    return at_default_tiles("v4", k) | dict(variant="v3")


def name(knobs: dict) -> str:
    v = knobs.get("variant", QH.DEFAULT_VARIANT)
    walks = " 2walk" if knobs.get("single_walk") is False else ""
    return f"{v}{walks} bm{knobs['block_m']} w{knobs['num_warps']} kc{knobs['chunk_k']}"


def main(argv=None) -> int:
    ap = devtime.sweep_parser(__doc__, 300.0, "2 values per knob, small shapes")
    ap.add_argument("--grid", choices=("tiles", "walks", "v5"), default="tiles",
                    help="phase-1 knobs: tiles, one vs two walks x tiles (NVFP4 row scope "
                         "only, writes kernels_quantize_walks.*), or v5's tiles against the v4 "
                         "default (writes kernels_quantize_v5.*)")
    a = ap.parse_args(argv)
    walks = a.grid == "walks"
    grid_v5 = a.grid == "v5"
    t0 = time.time()
    dev = jax.devices()[0]
    shapes = ((512, 4096), (256, 2048)) if a.quick else SHAPES
    grid = GRID_WALKS if walks else GRID_V5 if grid_v5 else GRID
    grid = {k: v[:2] for k, v in grid.items()} if a.quick else grid
    bw = devtime.report_copy_bandwidth(1 << (20 if a.quick else 30))
    xs, refs, rows = {}, {}, []
    u8 = lambda a: np.asarray(jax.lax.bitcast_convert_type(a, jnp.uint8))  # noqa: E731

    def measure(shape, fmt, scope, knobs, phase):
        if shape not in xs:
            xs[shape] = make_x(*shape)
        x = xs[shape]
        if (shape, fmt, scope) not in refs:
            q, h = jax.jit(lambda x: QH.quantize_with_hint_reference(x, fmt, global_scope=scope))(x)
            refs[(shape, fmt, scope)] = (np.asarray(q.codes), u8(q.scales),
                                         np.asarray(q.global_scale, np.float32).view(np.uint32),
                                         np.asarray(h.bits))
        f = jax.jit(lambda x: QH.quantize_with_hint_triton(x, fmt, global_scope=scope, **knobs))
        try:
            q, h = f(x)
            got = (np.asarray(q.codes), u8(q.scales),
                   np.asarray(q.global_scale, np.float32).view(np.uint32), np.asarray(h.bits))
            t = devtime.device_seconds(f, x, kernel="quantize_with_hint")
            t_all = devtime.device_seconds(f, x)
        except Exception as e:  # noqa: BLE001  (a config that does not compile / fit)
            print(f"  {shape} {fmt}/{scope} {name(knobs)}: {type(e).__name__}: {str(e)[:160]}",
                  flush=True)
            return None
        same = all(np.array_equal(g, r) for g, r in zip(got, refs[(shape, fmt, scope)]))
        nb = kernel_bytes(*shape, fmt)
        r = dict(phase=phase, m=shape[0], k=shape[1], fmt=fmt, scope=scope, knobs=knobs,
                 name=name(knobs), us=t * 1e6, all_us=t_all * 1e6, tbs=nb / t / 1e12,
                 pct_copy=100 * nb / t / bw, bit_identical=same,
                 default=dict(knobs, variant=knobs.get("variant", QH.DEFAULT_VARIANT))
                 == at_default_tiles(QH.DEFAULT_VARIANT, shape[1], fmt))
        rows.append(r)
        print(f"  {shape} {fmt}/{scope} {r['name']:20s} {r['us']:8.1f} us {r['tbs']:5.2f} TB/s "
              f"{r['pct_copy']:5.1f}% identical={same}{'  (default)' if r['default'] else ''}",
              flush=True)
        return r

    s1 = shapes[0]
    print(f"phase 1: {s1} nvfp4/row", flush=True)
    measure(s1, "nvfp4", "row", at_default_tiles("v4", s1[1]) if grid_v5 else TWO_WALK, 1)
    keys = list(grid)
    for vals in itertools.product(*(grid[k] for k in keys)):
        if time.time() - t0 > a.max_seconds * 0.5:
            print("  (phase-1 time budget spent)", flush=True)
            break
        measure(s1, "nvfp4", "row", dict(zip(keys, vals)), 1)
    p1 = sorted((r for r in rows if r["phase"] == 1 and r["bit_identical"]
                 and r["name"].startswith("v5" if grid_v5 else QH.DEFAULT_VARIANT)),
                key=lambda r: r["us"])
    best = [r["knobs"] for r in p1[: a.top]]
    print(f"phase 2: {'v4 default, v5 default' if grid_v5 else 'two walks, v3, default'} + "
          f"{[name(b) for b in best]}", flush=True)
    for shape in shapes:
        for fmt, scope in FORMATS[:1] if walks else FORMATS:
            cands = ([at_default_tiles("v4", shape[1]), at_default_tiles("v5", shape[1], fmt)]
                     if grid_v5 else [TWO_WALK, v3(shape[1]),
                                      at_default_tiles(QH.DEFAULT_VARIANT, shape[1], fmt)]) + best
            for knobs in [c for i, c in enumerate(cands) if c not in cands[:i]]:
                if time.time() - t0 > a.max_seconds:
                    print("  (time budget spent)", flush=True)
                    break
                measure(shape, fmt, scope, knobs, 2)

    lines = [f"# Quantize-with-hint knob sweep: {dev.device_kind} (jax {jax.__version__})", "",
             f"command: `python -m pallas_kernels.sweep_quantize {' '.join(argv or sys.argv[1:])}`",
             "", f"device copy bandwidth {bw / 1e12:.2f} TB/s (device time of an f32 pass); us = "
             "the quantize_with_hint kernel's device time per call (5 profiled calls), all us = "
             "every kernel of the call (tensor scope: + XLA's global-scale reduction); bytes = x "
             "(bf16) + codes + scales + hint bits + global scales; identical = codes, scales, "
             "global scales and hint bits equal to the jitted trace_jax.quant reference.", "",
             "| phase | M x K | fmt/scope | config | us | all us | TB/s | % copy | identical "
             "| default |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["phase"], -r["m"], r["fmt"], r["scope"], r["us"])):
        lines.append(f"| {r['phase']} | {r['m']} x {r['k']} | {r['fmt']}/{r['scope']} | "
                     f"{r['name']} | {r['us']:.1f} | {r['all_us']:.1f} | {r['tbs']:.2f} | "
                     f"{r['pct_copy']:.1f} | {r['bit_identical']} | "
                     f"{'yes' if r['default'] else ''} |")
    devtime.write_sweep(a.out, "kernels_quantize_walks" if walks else "kernels_quantize_v5"
                        if grid_v5 else "kernels_quantize_sweep", lines, rows, bw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
