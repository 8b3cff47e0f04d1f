"""The FP4-KV decode attention's split combine, on the 30B rollout shapes (one H200):

    PYTHONUNBUFFERED=1 python -m pallas_kernels.bench_attention_combine [--out DIR]

Session 6's step profile found XLA spending 86-148 us per layer fusing the v3/v4 split
reduction into its interleaving transpose (next to a ~780 us kernel). Rows: each (batch,
context) the rollout benchmark runs for FP4 at 32K / 128K (plus the kernel table's B=32 x 32K),
the whole ``decode_attention_triton`` call with the reduction fused into the transpose
(``COMBINE_BARRIER = False``, before), with the barrier (now), and with the barrier and fewer
splits (``split_target``). Output checked against the first variant (relative error); KV GB/s
over the copy bandwidth measured in the same run; ``--profile`` adds each call's device time (its
kernels only, from a ``jax.profiler`` trace). Writes attention_combine.{json,md} to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import jax
import jax.numpy as jnp

from pallas_kernels import attention_triton as AT
from pallas_kernels.bench_attention import copy_bandwidth, make_cache, rel, timeit

SHAPES = [(111, 32768), (27, 131072), (32, 32768)]
VARIANTS = [("fused (before)", False, None), ("barrier", True, None),
            ("barrier, split_target 4096", True, 4096), ("barrier, split_target 2048", True, 2048)]


def run(shapes, variants, fmt="nvfp4", h=4, hq=32, d=128, reps=20, profile="", bw=None):
    """Time each variant at each shape; ``bw``: the copy bandwidth to compare with (default:
    measured here, a 4 GiB pass)."""
    bw = bw or copy_bandwidth()
    rows = []
    saved = AT.COMBINE_BARRIER
    try:
        _run_shapes(shapes, variants, fmt, h, hq, d, reps, profile, bw, rows)
    finally:
        AT.COMBINE_BARRIER = saved
        jax.clear_caches()
    return {"copy_bw_Bps": bw, "device": jax.devices()[0].device_kind, "rows": rows}


def _inputs(b, s, fmt, h, hq, d):
    """Random q, K / V caches (every row valid) and the KV bytes one call must read."""
    kc = make_cache(jax.random.PRNGKey(1), b, h, s, d, fmt)
    vc = make_cache(jax.random.PRNGKey(2), b, h, s, d, fmt)
    q = jax.random.normal(jax.random.PRNGKey(3), (b, hq, d), jnp.bfloat16)
    return q, kc, vc, jnp.full((b,), s, jnp.int32), AT.kv_bytes(b, h, s, d, fmt)


def _run_shapes(shapes, variants, fmt, h, hq, d, reps, profile, bw, rows):
    for b, s in shapes:
        q, kc, vc, lengths, nbytes = _inputs(b, s, fmt, h, hq, d)
        ref = None
        for name, barrier, target in variants:
            AT.COMBINE_BARRIER = barrier
            jax.clear_caches()  # the flag is read while tracing
            f = jax.jit(lambda q, k, v, n, t=target: AT.decode_attention_triton(
                q, k, v, n, sm_scale=d ** -0.5, split_target=t))
            out = f(q, kc, vc, lengths)
            ref = out if ref is None else ref
            t = timeit(f, q, kc, vc, lengths, reps=reps)
            row = {"batch": b, "context": s, "fmt": fmt, "variant": name, "us": t * 1e6,
                   "kv_GBps": nbytes / t / 1e9, "pct_copy": 100 * nbytes / t / bw,
                   "rel_err_vs_first": rel(out, ref)}
            if profile:  # device time of the same call: its kernels only, no launch / host gaps
                from experiments import profile_summary as PS

                ps = PS.profile_calls(lambda: f(q, kc, vc, lengths), 5,
                                      os.path.join(profile, f"trace_{b}_{s}_{len(rows)}"))
                td = ps["busy_ns_per_call"] * 1e-9
                row.update(device_us=td * 1e6, device_pct_copy=100 * nbytes / td / bw,
                           device_kernels={r["kernel"]: r["ns_per_call"] / 1e3
                                           for r in ps["rows"][:6]})
            rows.append(row)
            print(f"B={b:4d} S={s:6d} {name:28s} {t * 1e6:8.1f} us  {row['pct_copy']:5.1f}% copy"
                  + (f"  device {row['device_us']:8.1f} us {row['device_pct_copy']:5.1f}%"
                     if profile else "") + f"  rel {row['rel_err_vs_first']:.1e}", flush=True)
        del kc, vc


SWEEP = [(bk, w, st, None) for bk in (32, 64) for w in (1, 2, 4) for st in (2, 3)] + [
    (32, 1, 3, 4096), (32, 1, 3, 16384), (64, 2, 3, 4096), (64, 2, 3, 16384)]


def sweep(shapes, configs, fmt="nvfp4", h=4, hq=32, d=128, profile="/tmp/attn_sweep", reps=5,
          bw=None):
    """Device time (profile) of each (block_k, num_warps, num_stages, split_target) config at each
    shape: the kernel choice the decode step sees, free of per-call launch / host time."""
    from experiments import profile_summary as PS

    bw = bw or copy_bandwidth()
    rows = []
    default = AT.tuned_knobs(fmt, "v4")
    for b, s in shapes:
        q, kc, vc, lengths, nbytes = _inputs(b, s, fmt, h, hq, d)
        ref = None
        for bk, w, st, tgt in configs:
            f = jax.jit(lambda q, k, v, n, bk=bk, w=w, st=st, tgt=tgt: AT.decode_attention_triton(
                q, k, v, n, sm_scale=d ** -0.5, block_k=bk, num_warps=w, num_stages=st,
                split_target=tgt))
            try:
                out = f(q, kc, vc, lengths)
                ref = out if ref is None else ref
                ps = PS.profile_calls(lambda: f(q, kc, vc, lengths), reps,
                                      os.path.join(profile, f"t{len(rows)}"))
            except Exception as e:  # noqa: BLE001 - a config that does not compile is a row
                rows.append({"batch": b, "context": s, "config": [bk, w, st, tgt],
                             "error": f"{type(e).__name__}: {str(e)[:120]}"})
                print(f"B={b} S={s} {bk, w, st, tgt}: {rows[-1]['error']}", flush=True)
                continue
            td = ps["busy_ns_per_call"] * 1e-9
            rows.append({"batch": b, "context": s, "config": [bk, w, st, tgt],
                         "default": (bk, w, st) == default and tgt is None,
                         "device_us": td * 1e6, "device_pct_copy": 100 * nbytes / td / bw,
                         "rel_err_vs_first": rel(out, ref)})
            print(f"B={b:4d} S={s:6d} bk {bk:3d} w {w} st {st} t {tgt}: {td * 1e6:8.1f} us "
                  f"{rows[-1]['device_pct_copy']:5.1f}% copy", flush=True)
        del kc, vc
    return {"copy_bw_Bps": bw, "device": jax.devices()[0].device_kind, "sweep": rows}


def sweep_markdown(res) -> str:
    lines = [f"copy bandwidth {res['copy_bw_Bps'] / 1e12:.2f} TB/s ({res['device']}); device "
             "time per call from a profile; * = the current default", "",
             "| batch | context | block_k | warps | stages | split target | device us | % copy |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(res["sweep"], key=lambda r: (r["batch"], r.get("device_us", 1e12))):
        if "error" in r:
            continue
        bk, w, st, t = r["config"]
        lines.append(f"| {r['batch']} | {r['context']} | {bk}{'*' if r['default'] else ''} | {w} | "
                     f"{st} | {t or 'default'} | {r['device_us']:.1f} | {r['device_pct_copy']:.1f} |")
    return "\n".join(lines) + "\n"


def to_markdown(res) -> str:
    lines = [f"copy bandwidth {res['copy_bw_Bps'] / 1e12:.2f} TB/s ({res['device']})", "",
             "| batch | context | variant | us/call | KV GB/s | % copy | device us | device % copy "
             "| rel err vs fused |", "|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        dev = (f"{r['device_us']:.1f} | {r['device_pct_copy']:.1f}" if "device_us" in r
               else "- | -")
        lines.append(f"| {r['batch']} | {r['context']} | {r['variant']} | {r['us']:.1f} | "
                     f"{r['kv_GBps']:.0f} | {r['pct_copy']:.1f} | {dev} | "
                     f"{r['rel_err_vs_first']:.1e} |")
    lines += ["", "us/call: median wall time of a synced call (the kernel tables' protocol); "
              "device us: the call's kernels' device time from a 5-call profile (no launch or "
              "host gaps)."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "experiments/results"))
    ap.add_argument("--profile", action="store_true", help="also the device time of each call")
    ap.add_argument("--variants", default="", help="indices into VARIANTS (default: all)")
    ap.add_argument("--sweep", action="store_true",
                    help="instead: device-time knob sweep of the v4 kernel at the rollout shapes")
    args = ap.parse_args(argv)
    if args.sweep:
        res = sweep(SHAPES[:2], SWEEP, profile=os.path.join(args.out, "sweep_traces"))
        return _write(args.out, "attention_sweep", res, sweep_markdown(res))
    variants = [VARIANTS[int(i)] for i in args.variants.split(",")] if args.variants else VARIANTS
    res = run(SHAPES, variants, profile=os.path.join(args.out, "profile") if args.profile else "")
    return _write(args.out, "attention_combine", res, to_markdown(res))


def _write(out, stem, res, md):
    """{stem}.json and {stem}.md under ``out``; prints the markdown; returns ``res``."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{stem}.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    with open(os.path.join(out, f"{stem}.md"), "w") as fh:
        fh.write(md)
    print(md)
    return res

if __name__ == "__main__":
    sys.exit(0 if main() else 1)
