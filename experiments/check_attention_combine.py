"""The FP4-KV decode attention's split combine: the Pallas kernel
(``attention_triton.combine_transposed_halves_pallas``) against XLA's reduction, on one GPU.

  python experiments/check_attention_combine.py [--out DIR]

Per shape (GQA 32 q / 4 kv heads, head_dim 128, NVFP4 caches in the kv_words layout, every
sequence at full context): device time of the whole v6 call and of its combine alone
(``devtime``, 5 profiled calls), the call's % of a device-time copy over the KV bytes, and the
largest difference between the two outputs (f32; summation order only). Writes
``kernels_attention_combine.{md,json}``.
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

SHAPES = ((111, 32768), (27, 131072), (128, 32768), (32, 32768))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(_REPO, "experiments", "results"))
    a = ap.parse_args(argv)
    bw = devtime.report_copy_bandwidth(1 << 30)
    rows = []
    for b, s in SHAPES:
        kw, vw = _caches("nvfp4", b, s, jax.random.PRNGKey(2))
        q = jax.random.normal(jax.random.PRNGKey(b), (b, HQ, D), jnp.bfloat16)
        lengths = jnp.full((b,), s, jnp.int32)
        row, outs = dict(batch=b, context=s), {}
        for comb in ("xla", "kernel"):
            f = jax.jit(lambda q, k, v, L, c=comb: decode_attention_triton(
                q, k, v, L, sm_scale=D ** -0.5, out_dtype=jnp.float32, split_combine=c))
            outs[comb] = f(q, kw, vw, lengths)
            with tempfile.TemporaryDirectory(prefix="devtime_") as tmp:
                summ = PS.profile_calls(lambda: f(q, kw, vw, lengths), 5, tmp)
            t = devtime.selected_seconds(summ)
            tk = devtime.selected_seconds(summ, "decode_attention_nvfp4")
            row[f"{comb}_us"] = 1e6 * t
            row[f"{comb}_combine_us"] = 1e6 * (t - tk)  # everything but the attention kernel
            row[f"{comb}_pct_copy"] = 100 * kv_bytes(b, H, s, D, "nvfp4") / t / bw
        row["max_abs_diff"] = float(jnp.max(jnp.abs(outs["kernel"] - outs["xla"])))
        row["max_abs_out"] = float(jnp.max(jnp.abs(outs["xla"])))
        rows.append(row)
        print("  " + "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in row.items()), flush=True)
        del kw, vw
    cols = list(rows[0])
    lines = [f"# FP4-KV decode attention split combine: Pallas kernel vs XLA, "
             f"{jax.devices()[0].device_kind} (jax {jax.__version__})", "",
             f"command: `python experiments/check_attention_combine.py "
             f"{' '.join(argv or sys.argv[1:])}`", "",
             f"NVFP4 v6, default splits; device time per call; combine = call - attention kernel; "
             f"% copy = KV bytes / call time against a device-time copy of {bw / 1e12:.2f} TB/s.",
             "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c])
                                       for c in cols) + " |")
    devtime.write_sweep(a.out, "kernels_attention_combine", lines, rows, bw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
