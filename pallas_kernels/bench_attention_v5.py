"""FP4-KV decode attention v5 (K in the ``kv_layout`` word layout) against v4, in device time.

  python -m pallas_kernels.bench_attention_v5 [--out DIR] [--quick]

For each (format, batch x context) of the issue-7 table (GQA 32 q / 4 kv heads, head_dim 128,
every sequence at full context): v4 on the natural K cache and v5 on the same cache converted to
the word layout, each at its tuned default knobs; device time per call of the attention kernel
and its split combine (``devtime.device_seconds``, 5 profiled calls), bandwidth over the KV bytes
the kernel must read against a copy measured the same way, the largest difference between the
two outputs (same decoded values, so ~0: only FMA scheduling may differ) and, on the first two
sequences, each one's relative error against the pure-JAX reference. Writes
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

SHAPES = ((32, 8192), (128, 8192), (8, 32768), (32, 32768), (128, 32768), (8, 131072),
          (32, 131072))
HQ, H, D = 32, 4, 128


def rel(a, b):
    a, b = a.astype(jnp.float32), b.astype(jnp.float32)
    return float(jnp.linalg.norm(a - b) / jnp.maximum(jnp.linalg.norm(b), 1e-30))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(_REPO, "experiments", "results"))
    ap.add_argument("--quick", action="store_true", help="two small shapes (a CPU smoke run)")
    ap.add_argument("--formats", default="nvfp4,mxfp4")
    a = ap.parse_args(argv)
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
            kw = jax.jit(KL.to_kv_words)(k)
            lengths = jnp.full((b,), s, jnp.int32)
            f = jax.jit(lambda q, k, v, L: decode_attention_triton(
                q, k, v, L, sm_scale=D ** -0.5, out_dtype=jnp.float32, interpret=interpret))
            o4, o5 = f(q, k, v, lengths), f(q, kw, v, lengths)
            r = 2 if b > 1 else 1
            ref = ops.decode_attention_reference(
                q[:r].astype(jnp.float32), jax.tree.map(lambda x: x[:r] if x.shape[0] == b else x, k),
                jax.tree.map(lambda x: x[:r] if x.shape[0] == b else x, v), lengths[:r])
            row = dict(fmt=fmt, batch=b, context=s, max_abs_v5_v4=float(jnp.max(jnp.abs(o5 - o4))),
                       relerr_v4=rel(o4[:r], ref), relerr_v5=rel(o5[:r], ref))
            nb = kv_bytes(b, H, s, D, fmt)
            for name, kc in (("v4", k), ("v5", kw)):
                t = devtime.device_seconds(f, q, kc, v, lengths)
                row[f"{name}_us"] = t * 1e6
                row[f"{name}_pct_copy"] = 100 * nb / t / bw
            row["v5_vs_v4"] = row["v4_us"] / row["v5_us"]
            rows.append(row)
            print(f"  {fmt} B={b} ctx={s}: v4 {row['v4_us']:.1f} us ({row['v4_pct_copy']:.1f}%)"
                  f"  v5 {row['v5_us']:.1f} us ({row['v5_pct_copy']:.1f}%)  x{row['v5_vs_v4']:.3f}"
                  f"  |v5-v4| {row['max_abs_v5_v4']:.1e}  relerr {row['relerr_v5']:.1e}", flush=True)
            del k, v, kw
    lines = [f"# FP4-KV decode attention v5 vs v4: {jax.devices()[0].device_kind} "
             f"(jax {jax.__version__})", "",
             f"command: `python -m pallas_kernels.bench_attention_v5 {' '.join(argv or sys.argv[1:])}`",
             "", f"GQA {HQ} q / {H} kv heads, head_dim {D}, every sequence at full context; device "
             "time per call (attention kernel + split combine, 5 profiled calls) at each version's "
             f"default knobs; % copy = KV bytes / time against a device-time copy of "
             f"{bw / 1e12:.2f} TB/s; relerr on the first 2 sequences against the pure-JAX "
             "reference (f32 out).", "",
             "| fmt | B x ctx | v4 us | v4 % copy | v5 us | v5 % copy | v5 / v4 speed | "
             "max abs v5 - v4 | relerr v5 |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['fmt']} | {r['batch']} x {r['context'] // 1024}K | {r['v4_us']:.1f} | "
                     f"{r['v4_pct_copy']:.1f} | {r['v5_us']:.1f} | {r['v5_pct_copy']:.1f} | "
                     f"{r['v5_vs_v4']:.3f} | {r['max_abs_v5_v4']:.1e} | {r['relerr_v5']:.1e} |")
    devtime.write_sweep(a.out, "kernels_attention_v5", lines, rows, bw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
