"""The fused quantize-with-hint kernel's dequantized-values output (``values=``, what the rollout's
activation sites feed the next matmul) on one GPU, against XLA on the same GPU.

    python experiments/check_quantize_values.py [--out DIR]

Per row (the 30B decode step's activation sites and an edge-value block: zeros, ties,
saturation, tiny magnitudes, NaN / Inf): mismatching codes / scales / hint bits / values
between the kernel and ``quant.quantize`` + ``extract_hint`` + ``dequantize`` jitted by XLA, and
device time (5 profiled calls) of the kernel with its values output against the kernel without
it followed by XLA's dequantize (the path it replaces). Writes quantize_values.{md,json}.
GPU only.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)
from pallas_kernels import devtime  # noqa: E402
from pallas_kernels.quantize_hint import quantize_with_hint  # noqa: E402
from trace_jax import quant as Q  # noqa: E402

# (label, rows, K): the rollout's sites at 111 sequences (attention input, expert input,
# expert hidden of 8 slots per token)
SHAPES = [("attn/expert in 111 x 2048", 111, 2048), ("expert hidden 888 x 768", 888, 768),
          ("128K batch 27 x 2048", 27, 2048)]


def edge_block(k: int) -> np.ndarray:
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0], np.float32)
    row = np.tile(np.concatenate([ties, -ties]), k // 16)
    rows = [row, 0 * row, row * np.float32(1e-30), row * np.float32(3e30), row * np.float32(np.pi),
            -row * np.float32(1e-36)]
    x = np.stack(rows * 3, 0)
    x[7, 5], x[13, 40], x[16, 3] = np.nan, -np.inf, np.inf
    return x


def u8(a) -> np.ndarray:
    return np.asarray(jax.lax.bitcast_convert_type(a, jnp.uint8)).reshape(-1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(_REPO, "experiments/results"))
    args = ap.parse_args(argv)
    if jax.default_backend() != "gpu":
        print("check_quantize_values.py needs a GPU")
        return 2

    def xla(x, fmt, scope):
        q = Q.quantize(x, fmt, axis=-1, global_scope=scope)
        return q, Q.extract_hint(q), Q.dequantize(q, x.dtype)

    def fused(x, fmt, scope):
        return quantize_with_hint(x, fmt, global_scope=scope, values=x.dtype, backend="triton")

    def unfused(x, fmt, scope):  # the kernel without values, then XLA's dequantize
        q, h = quantize_with_hint(x, fmt, global_scope=scope, backend="triton")
        return q, h, Q.dequantize(q, x.dtype)

    rows = []
    cases = [(lbl, m, k) for lbl, m, k in SHAPES] + [("edge values 18 x 256", 18, 256)]
    for fmt, scope in (("nvfp4", "row"), ("mxfp4", "tensor")):
        for lbl, m, k in cases:
            if lbl.startswith("edge"):
                x = jnp.asarray(edge_block(k)).astype(jnp.bfloat16)
            else:
                x = (jax.random.normal(jax.random.key(m), (m, k), jnp.float32) * 3
                     ).astype(jnp.bfloat16)
            fx, ff, fu = (jax.jit(f, static_argnums=(1, 2)) for f in (xla, fused, unfused))
            (qr, hr, yr), (qk, hk, yk) = fx(x, fmt, scope), ff(x, fmt, scope)
            bad = {name: int(np.sum(u8(a) != u8(b))) for name, a, b in (
                ("codes", qk.codes, qr.codes), ("scales", qk.scales, qr.scales),
                ("hint bits", hk.bits, hr.bits), ("values", yk, yr))}
            row = {"fmt": fmt, "shape": lbl, **{f"bad {n}": v for n, v in bad.items()}}
            try:
                row["fused us"] = devtime.device_seconds(lambda a: ff(a, fmt, scope), x) * 1e6
                row["kernel + XLA dequant us"] = devtime.device_seconds(
                    lambda a: fu(a, fmt, scope), x) * 1e6
            except Exception as e:  # noqa: BLE001
                devtime.report_failure(f"{fmt} {lbl} timing", e)
            rows.append(row)
            print(devtime.format_row(row), flush=True)
    lines = devtime.sweep_header("quantize-with-hint: the values output",
                                 "python experiments/check_quantize_values.py",
                                 "bad = mismatching bytes against XLA on the same GPU; device "
                                 "time per call, 5 profiled calls (copy bandwidth not measured: "
                                 "0 in the JSON).") + devtime.table_lines(rows)
    devtime.write_sweep(args.out, "quantize_values", lines, rows, 0.0)
    return 1 if any(r[k] for r in rows for k in r if k.startswith("bad")) else 0


if __name__ == "__main__":
    sys.exit(main())
