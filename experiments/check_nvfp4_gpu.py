#!/usr/bin/env python3
"""Localise the NVFP4 codes that differ between the GPU and the CPU (check_gpu_numerics.py
found ~5% of codes off on an H200 with identical block scales and global scale): each piece of
quant.quantize's element path jitted alone on the default device against numpy, and variants of
``quant._scaled`` (materialised reciprocal, integer E4M3 decode) against the CPU.

    python experiments/check_nvfp4_gpu.py
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trace_jax import e2m1  # noqa: E402
from trace_jax import quant as Q  # noqa: E402


def e4m3_to_f32_int(s):
    """E4M3 (fn) -> float32 with integer ops only."""
    b = jax.lax.bitcast_convert_type(s, jnp.uint8).astype(jnp.uint32)
    sign, ex, man = b >> 7, (b >> 3) & 0xF, b & 7
    normal = jax.lax.bitcast_convert_type((sign << 31) | ((ex + 120) << 23) | (man << 20), jnp.float32)
    sub = man.astype(jnp.float32) * jnp.float32(2.0 ** -9) * jnp.where(sign == 1, -1.0, 1.0)
    out = jnp.where(ex == 0, sub, normal)
    return jnp.where((b & 0x7F) == 0x7F, jnp.nan, out)


def main() -> int:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, 1024)).astype(np.float32) * np.exp(
        rng.uniform(-3, 3, (1024, 1))).astype(np.float32)
    cpu = jax.local_devices(backend="cpu")[0]
    f = Q.get_format("nvfp4")
    q_cpu = jax.jit(lambda x: Q.quantize(x, "nvfp4"))(jax.device_put(x, cpu))
    s_bytes = np.asarray(q_cpu.scales)
    g = np.asarray(q_cpu.global_scale).reshape(()).astype(np.float32)
    s32 = s_bytes.astype(np.float32)
    r = (np.float32(1) / (s32 * g)).astype(np.float32)
    xb = x.reshape(1024, 64, 16)
    z = (xb * r[..., None]).astype(np.float32)
    print(f"device {jax.devices()[0].device_kind}")
    print("| piece | mismatches | of |\n|---|---|---|")

    def row(name, a, b):
        a, b = np.asarray(a), np.asarray(b)
        print(f"| {name} | {int(np.sum(a != b))} | {a.size} |", flush=True)

    row("e4m3 -> f32 astype", jax.jit(lambda s: s.astype(jnp.float32))(jnp.asarray(s_bytes)), s32)
    row("e4m3 -> f32 astype, times g", jax.jit(lambda s, g: s.astype(jnp.float32) * g)(
        jnp.asarray(s_bytes), g), s32 * g)
    row("e4m3 -> f32 integer decode", jax.jit(e4m3_to_f32_int)(jnp.asarray(s_bytes)), s32)
    row("z = xb * r[..., None]", jax.jit(lambda xb, r: xb * r[..., None])(xb, r), z)
    row("encode(z)", jax.jit(e2m1.encode)(z), np.asarray(jax.jit(e2m1.encode)(
        jax.device_put(z, cpu))))
    row("_scaled(xb, scales, g)", jax.jit(lambda xb, s, g: Q._scaled(xb, s, g, f))(
        xb, jnp.asarray(s_bytes), g), z)

    orig = Q._scaled

    def barrier(xb, scales, g, f):
        s = Q.scales_to_f32(scales, f) * g
        r = jnp.where(s > 0, Q._recip(jnp.where(s > 0, s, 1.0)), jnp.where(jnp.isnan(s), jnp.nan, 0.0))
        return xb * jax.lax.optimization_barrier(r)[..., None]

    def intdecode(xb, scales, g, f):
        s = (e4m3_to_f32_int(scales) if f.name == "nvfp4" else Q.scales_to_f32(scales, f)) * g
        r = jnp.where(s > 0, Q._recip(jnp.where(s > 0, s, 1.0)), jnp.where(jnp.isnan(s), jnp.nan, 0.0))
        return xb * r[..., None]

    for name, fn in (("current", orig), ("barrier on r", barrier), ("integer e4m3 decode", intdecode)):
        Q._scaled = fn
        q = jax.jit(lambda x: Q.quantize(x, "nvfp4"))(jnp.asarray(x))
        row(f"quantize nvfp4 codes, {name}", q.codes, q_cpu.codes)
    Q._scaled = orig
    return 0


if __name__ == "__main__":
    sys.exit(main())
