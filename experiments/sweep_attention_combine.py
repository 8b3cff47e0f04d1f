"""The FP4 attention's split combine kernel alone (``attention_triton.combine_transposed_halves_pallas``)
on one GPU: device time per knob set (D2 columns per program, splits per loop step, warps) at
the split partials' shapes that the default split rule gives.

  python experiments/sweep_attention_combine.py [--out DIR] [--shapes B:P,...] [--knobs "td=8,p_chunk=32;..."]

Partials as the v6 kernel writes them for GQA 32 q / 4 kv heads, head_dim 128 (D2 = 64, Gq = 8):
f32 [B, 4, P, 64, 8] even / odd halves, running max and sum [B, 4, P, 8]; bf16 output. Per knob
set: device time (``devtime``, 5 profiled calls), the partial bytes read per microsecond as % of a
device-time copy, and the largest difference from the first knob set (summation order only).
Writes ``kernels_attention_combine_knobs.{md,json}``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

import jax
import jax.numpy as jnp

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)
from pallas_kernels import attention_triton as AT  # noqa: E402
from pallas_kernels import devtime  # noqa: E402

H, D2, GQ = 4, 64, 8
# (B, P) of the default rule at 8 x 8K, 8 x 32K / 8 x 128K, 32 x 32K, 111 x 32K, 27 x 128K, 128 x 8K
SHAPES = ((8, 32), (8, 128), (32, 32), (111, 32), (27, 128), (128, 8))
KNOBS = ("td", "p_chunk", "num_warps")


def parse_knobs(spec: str) -> list[dict]:
    """'td=8,p_chunk=32;num_warps=2' -> [{'td': 8, 'p_chunk': 32}, {'num_warps': 2}]; an empty
    entry is the module defaults; unknown keywords and non-integer values are refused by name."""
    out = []
    for entry in spec.split(";"):
        kw = {}
        for item in filter(None, entry.split(",")):
            k, _, v = item.partition("=")
            if k not in KNOBS:
                raise SystemExit(f"unknown combine knob {k!r} (known: {', '.join(KNOBS)})")
            if not v.isdigit():
                raise SystemExit(f"combine knob {k!r} needs a positive integer, got {item!r}")
            kw[k] = int(v)
        out.append(kw)
    return out


def knob_name(kw: dict) -> str:
    return "_".join(f"{k}{v}" for k, v in kw.items()) or "default"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(_REPO, "experiments", "results"))
    ap.add_argument("--shapes", default=None, help="comma-separated batch:splits")
    ap.add_argument("--knobs", default=";td=8;td=4;td=8,num_warps=2;td=4,num_warps=1;p_chunk=64",
                    help="';'-separated knob sets (td, p_chunk, num_warps); empty = defaults")
    a = ap.parse_args(argv)
    shapes = SHAPES if a.shapes is None else [
        tuple(int(v) for v in x.split(":")) for x in a.shapes.split(",")]
    knobs = parse_knobs(a.knobs)
    bw = devtime.report_copy_bandwidth(1 << 30)
    rows = []
    for b, p in shapes:
        ks = jax.random.split(jax.random.PRNGKey(b * 131 + p), 4)
        acc_e, acc_o = (jax.random.normal(k, (b, H, p, D2, GQ), jnp.float32) for k in ks[:2])
        m = jax.random.normal(ks[2], (b, H, p, GQ), jnp.float32) * 4
        l = jax.random.uniform(ks[3], (b, H, p, GQ), jnp.float32) + 0.5
        nbytes = 4 * (2 * acc_e.size + 2 * m.size) + 2 * b * H * GQ * 2 * D2
        row = dict(batch=b, splits=p, partial_MB=round(nbytes / 1e6, 2))
        first = None
        for kw in knobs:
            name = knob_name(kw)
            f = jax.jit(functools.partial(AT.combine_transposed_halves_pallas,
                                          out_dtype=jnp.bfloat16, **kw))
            try:
                out = f(acc_e, acc_o, m, l).astype(jnp.float32)
                t = devtime.device_seconds(f, acc_e, acc_o, m, l)
            except Exception as e:  # noqa: BLE001  (report and go on)
                print(f"  {name} B={b} P={p}: {type(e).__name__}: {str(e)[:800]}", flush=True)
                continue
            row[f"{name}_us"] = 1e6 * t
            row[f"{name}_pct_copy"] = 100 * nbytes / t / bw
            first = out if first is None else first
            row[f"{name}_maxdiff"] = float(jnp.max(jnp.abs(out - first)))
        rows.append(row)
        print(devtime.format_row(row), flush=True)
    lines = devtime.sweep_header(
        "FP4 attention split combine knobs", "python experiments/sweep_attention_combine.py",
        f"f32 partials [B, {H}, P, {D2}, {GQ}] x 2 halves, bf16 output; device time per call "
        f"against a device-time copy of {bw / 1e12:.2f} TB/s.", argv) + devtime.table_lines(rows)
    devtime.write_sweep(a.out, "kernels_attention_combine_knobs", lines, rows, bw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
