"""The FP4-KV decode attention's split combine and launch order, on one GPU: the Pallas combine
kernel (``attention_triton.combine_transposed_halves_pallas``) against XLA's reduction, and
variants of the call.

  python experiments/check_attention_combine.py [--out DIR] [--combines xla,kernel] [--shapes ..]

A combine may carry the launch order, the split target and the output / partial dtypes of the
call: ``kernel:inner:4096`` = ``split_combine="kernel", split_order="inner",
split_target=4096``; ``kernel:::bf16`` = a bf16 output (the model's) from the default
partials (``PARTIAL_DTYPE``: f32), ``kernel:::bf16/bf16`` = from bf16 partials (unset parts: the
wrapper's defaults; the output dtype defaults to f32, which exposes the kernel's accuracy).

Per shape (GQA 32 q / 4 kv heads, head_dim 128, FP4 caches in the kv_words layout, every
sequence at full context; NVFP4, and MXFP4 at one shape): device time of the whole v6 call and
of what it runs besides the attention kernel (``devtime``, 5 profiled calls), the call's % of a
device-time copy over the KV bytes, and each output's largest difference from the first
combine's (f32; summation order only). Writes ``kernels_attention_combine.{md,json}``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import jax
import jax.numpy as jnp

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)
from experiments import profile_summary as PS  # noqa: E402
from pallas_kernels import devtime  # noqa: E402
from pallas_kernels.attention_triton import decode_attention_triton, kv_bytes  # noqa: E402
from pallas_kernels.bench_attention_v5 import D, H, HQ, _caches  # noqa: E402

_DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16}
SHAPES = (("nvfp4", 111, 32768), ("nvfp4", 27, 131072), ("nvfp4", 128, 32768),
          ("nvfp4", 32, 32768), ("mxfp4", 111, 32768))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(_REPO, "experiments", "results"))
    ap.add_argument("--combines", default="xla,kernel",
                    help="comma-separated combine[:order[:split_target[:out[/partial]]]] "
                         "values (dtypes f32 / bf16); the first is the reference")
    ap.add_argument("--shapes", default=None,
                    help="comma-separated fmt:batch:context (default: the module's SHAPES)")
    a = ap.parse_args(argv)
    combines = a.combines.split(",")
    shapes = SHAPES if a.shapes is None else [
        (f, int(b), int(s)) for f, b, s in (x.split(":") for x in a.shapes.split(","))]
    bw = devtime.report_copy_bandwidth(1 << 30)
    rows = []
    for fmt, b, s in shapes:
        kw, vw = _caches(fmt, b, s, jax.random.PRNGKey(2))
        q = jax.random.normal(jax.random.PRNGKey(b), (b, HQ, D), jnp.bfloat16)
        lengths = jnp.full((b,), s, jnp.int32)
        row, outs = dict(fmt=fmt, batch=b, context=s), {}
        for comb in combines:
            c, order, target, dts = (comb.split(":") + [None] * 3)[:4]
            out_dt, part_dt = ((dts or "f32").split("/") + [None])[:2]
            f = jax.jit(lambda q, k, v, L, c=c, o=order, t=target, od=_DTYPES[out_dt],
                        pd=_DTYPES.get(part_dt): decode_attention_triton(
                q, k, v, L, sm_scale=D ** -0.5, out_dtype=od, split_combine=c,
                split_order=o or None, split_target=int(t) if t else None, partial_dtype=pd))
            outs[comb] = f(q, kw, vw, lengths)
            with tempfile.TemporaryDirectory(prefix="devtime_") as tmp:
                summ = PS.profile_calls(lambda: f(q, kw, vw, lengths), 5, tmp)
            t = devtime.selected_seconds(summ)
            tk = devtime.selected_seconds(summ, f"decode_attention_{fmt}")
            row[f"{comb}_us"] = 1e6 * t
            row[f"{comb}_combine_us"] = 1e6 * (t - tk)  # everything but the attention kernel
            row[f"{comb}_pct_copy"] = 100 * kv_bytes(b, H, s, D, fmt) / t / bw
        for comb in combines[1:]:
            row[f"{comb}_max_abs_diff"] = float(jnp.max(jnp.abs(
                outs[comb].astype(jnp.float32) - outs[combines[0]].astype(jnp.float32))))
        row["max_abs_out"] = float(jnp.max(jnp.abs(outs[combines[0]])))
        rows.append(row)
        print("  " + "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in row.items()), flush=True)
        del kw, vw
    cols = list(rows[0])
    lines = [f"# FP4-KV decode attention split combine ({', '.join(combines)}), "
             f"{jax.devices()[0].device_kind} (jax {jax.__version__})", "",
             f"command: `python experiments/check_attention_combine.py "
             f"{' '.join(argv or sys.argv[1:])}`", "",
             "v6 kernels, default splits; device time per call; combine = call - attention "
             f"kernel; max_abs_diff against {combines[0]}; "
             f"% copy = KV bytes / call time against a device-time copy of {bw / 1e12:.2f} TB/s.",
             "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c])
                                       for c in cols) + " |")
    devtime.write_sweep(a.out, "kernels_attention_combine", lines, rows, bw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
