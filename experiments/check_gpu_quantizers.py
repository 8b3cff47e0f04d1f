"""Bit-compare the FP4 quantizers of the GPU against the CPU on the model's site shapes.

  python experiments/check_gpu_quantizers.py [--rows 65536]

Session 31 (NOTES_attention): with the rollout's activation quantizer as XLA ops instead of the
fused kernel, TRACE's GPU mismatch lost its GPU-only bf16-P advantage and fell to the CPU's
level. This asks which quantizer's bits differ on the GPU. For bf16 rows of width 32 and 64 (the
tiny model's KV and expert sites) and 128, NVFP4 per row and per tensor and MXFP4, it counts the
elements (codes, hint bits, dequantized values) and blocks (scales) where

* ``kernel``: the fused quantize-with-hint kernel (the rollout's quantizer on a GPU),
* ``xla``: ``quant.quantize`` / ``extract_hint`` / ``dequantize`` jitted on the GPU,
* ``guided``: ``quant.guided_quantize`` with the CPU's hint (the trainer's hinted sites),

differ from the same computation on the CPU (``quant``'s specification, numpy semantics).
Then ``numerics.rollout_quantize`` (the model's call: N-d sites, hint and values) with the
kernel against its XLA ops on the same device, at the tiny model's decode and prefill shapes.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trace_jax import quant as Q  # noqa: E402


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint8 if a.dtype.itemsize == 1
                  else np.uint32)


def diff_frac(a, b) -> float:
    """Share of positions whose bits differ (a and b broadcast to one shape)."""
    a, b = np.broadcast_arrays(_bits(a), _bits(b))
    return float(np.mean(a != b))


def site_x(rows: int, k: int, seed: int) -> np.ndarray:
    """bf16 rows with a spread of row magnitudes, a few tiny rows and exact zeros (as float32)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, k)) * np.exp(rng.uniform(-4, 4, (rows, 1)))
    x[rng.random((rows, k)) < 0.01] = 0.0
    # and rows down at the bottom of bf16's range, whose NVFP4 global scale amax / 2688 falls
    # below f32's normal range (the CPU flushes it to 0; quant takes it as 1 on every device)
    x[-64:] *= 10.0 ** -rng.uniform(33, 38, (64, 1))
    return np.asarray(jnp.asarray(x, jnp.bfloat16).astype(jnp.float32))


def compare(x_f32: np.ndarray, fmt: str, scope: str, device, cpu) -> dict:
    """{quantizer: {field: differing share}} for one input (see the module docstring)."""
    xb = jnp.asarray(x_f32, jnp.bfloat16)

    def spec(x):
        q = Q.quantize(x, fmt, axis=-1, global_scope=scope)
        return q, Q.extract_hint(q), Q.dequantize(q, jnp.bfloat16), Q.dequantize(q, jnp.float32)

    def guided(x, h):
        q = Q.guided_quantize(x, h)
        return q, Q.dequantize(q, jnp.float32)

    ref_q, ref_h, ref_yb, ref_yf = jax.jit(spec, device=cpu)(jax.device_put(xb, cpu))
    out = {}
    q, h, yb, yf = jax.jit(spec, device=device)(jax.device_put(xb, device))
    out["xla"] = dict(codes=diff_frac(q.codes, ref_q.codes), scales=diff_frac(q.scales, ref_q.scales),
                      global_=diff_frac(q.global_scale, ref_q.global_scale),
                      hint=diff_frac(h.bits, ref_h.bits), y_bf16=diff_frac(yb, ref_yb),
                      y_f32=diff_frac(yf, ref_yf))
    gq, gy = jax.jit(guided, device=device)(jax.device_put(xb, device),
                                            jax.device_put(ref_h, device))
    out["guided"] = dict(codes=diff_frac(gq.codes, ref_q.codes), y_f32=diff_frac(gy, ref_yf))
    if device.platform == "gpu":
        from pallas_kernels.quantize_hint import quantize_with_hint

        res = {}
        for vd, ref_y in ((jnp.bfloat16, ref_yb), (jnp.float32, ref_yf)):
            kq, kh, ky = jax.jit(lambda x, vd=vd: quantize_with_hint(
                x, fmt, global_scope=scope, values=vd, backend="triton"))(
                    jax.device_put(xb, device))
            res.update(codes=diff_frac(kq.codes, ref_q.codes),
                       scales=diff_frac(kq.scales, ref_q.scales),
                       global_=diff_frac(np.asarray(kq.global_scale).reshape(-1),
                                         np.asarray(ref_q.global_scale).reshape(-1)),
                       hint=diff_frac(kh.bits, ref_h.bits))
            res["y_" + jnp.dtype(vd).name.replace("bfloat16", "bf16").replace("float32", "f32")] = (
                diff_frac(ky, ref_y))
        out["kernel"] = res
    return out


# the tiny model's sites (configs/tiny.py, 128 sequences): KV [B, T, 2, K, D], expert_in
# [B, T, M], expert_hidden [B, T, k, F], at decode (T = 1) and prefill (T = 5)
MODEL_SHAPES = ((128, 1, 2, 2, 32), (128, 5, 2, 2, 32), (128, 1, 64), (128, 5, 64),
                (128, 1, 2, 64), (128, 5, 2, 64), (3, 7, 64))


def check_rollout_quantize(device) -> int:
    """Pairs (shape, format, values dtype) where ``rollout_quantize``'s kernel and XLA paths
    differ in any bit of (q, hint, y) on ``device``; prints each."""
    from trace_jax import numerics as nx

    def run(mode, x, fmt, scope, vd):
        nx.ACTIVATION_QUANTIZER = mode
        try:
            return jax.jit(lambda x: nx.rollout_quantize(x, fmt, scope, True, vd),
                           device=device)(x)
        finally:
            nx.ACTIVATION_QUANTIZER = "auto"

    bad = 0
    for shape in MODEL_SHAPES:
        x = jax.device_put((3 * jax.random.normal(jax.random.key(sum(shape)), shape)).astype(
            jnp.bfloat16), device)
        for fmt, scope in (("nvfp4", "row"), ("mxfp4", "tensor")):
            for vd in (None, jnp.float32):
                a = jax.tree.leaves(run("kernel", x, fmt, scope, vd))
                b = jax.tree.leaves(run("xla", x, fmt, scope, vd))
                fr = [diff_frac(u, v) if u.shape == v.shape and u.dtype == v.dtype else 1.0
                      for u, v in zip(a, b)]
                if len(a) != len(b) or any(fr):
                    bad += 1
                print(f"rollout_quantize {shape} {fmt} values {jnp.dtype(vd or x.dtype).name}: "
                      + ("identical" if len(a) == len(b) and not any(fr) else
                         f"DIFFER {len(a)} vs {len(b)} leaves, differing shares {fr}"))
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=65536)
    a = ap.parse_args(argv)
    cpu = jax.devices("cpu")[0]
    device = jax.devices()[0]
    print(f"{device.platform} ({device.device_kind}) against the CPU, {a.rows} bf16 rows")
    bad = 0
    for fmt, scope in (("nvfp4", "row"), ("nvfp4", "tensor"), ("mxfp4", "tensor")):
        for k in (32, 64, 128):
            res = compare(site_x(a.rows, k, k), fmt, scope, device, cpu)
            for name, r in res.items():
                bad += any(v > 0 for v in r.values())
                print(f"{fmt:5s} {scope:6s} K={k:3d} {name:6s} " + "  ".join(
                    f"{f} {v:.2e}" for f, v in r.items()))
    bad += check_rollout_quantize(device)
    print("all bit-identical" if not bad else f"{bad} quantizer/shape pairs differ")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
