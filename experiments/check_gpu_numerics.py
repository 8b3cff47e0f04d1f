#!/usr/bin/env python3
"""Is ``trace_jax.quant`` bit-exact on this device? Each primitive of the NVFP4 scale rule and the
whole quantizer, jitted on the default device, against an IEEE float32 numpy/ml_dtypes
recomputation of the spec (quant.py's module docstring).

    python experiments/check_gpu_numerics.py [--json out.json]

Rows: mismatching elements of the float32 reciprocal (``quant._recip``), the float32 -> E4M3
cast, the block-scale rule ``e4m3(min(amax_b * (1 / (6 g)), 448))``, and ``quant.quantize``'s
scales and codes (NVFP4 per tensor and per row, MXFP4), each out of the number tried. On the CPU
every row must be 0 (the unit tests pin that); this script says which op departs on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trace_jax import quant as Q  # noqa: E402

E4M3 = ml_dtypes.float8_e4m3fn


def ref_nvfp4_scales(x2d: np.ndarray, row: bool) -> np.ndarray:
    """Float32 block scales of quant.quantize(x, 'nvfp4') along the last axis, numpy only."""
    xb = x2d.reshape(x2d.shape[0], -1, 16)
    amax_b = np.abs(xb).max(-1)
    amax = np.abs(x2d).max(-1, keepdims=True) if row else np.abs(x2d).max(keepdims=True)
    g = (amax * Q.GLOBAL_FACTOR).astype(np.float32)
    g = np.where(g == 0, np.float32(1), g)
    inv = np.float32(1) / (np.float32(6) * g)
    return np.minimum(amax_b * inv, np.float32(448)).astype(E4M3).astype(np.float32)


def explain(x, q, q_cpu, fmt):
    """Print the first few elements whose codes differ between this device and the CPU."""
    g, g_cpu = np.asarray(q.global_scale).ravel(), np.asarray(q_cpu.global_scale).ravel()
    print(f"  global scale here {g[:1].view(np.uint32)} cpu {g_cpu[:1].view(np.uint32)}")
    c, c_cpu = np.asarray(Q.unpacked_codes(q)), np.asarray(Q.unpacked_codes(q_cpu))
    s = np.asarray(q.scales).astype(np.float32)
    d, d_cpu = np.asarray(Q.dequantize(q, jnp.float32)), np.asarray(Q.dequantize(q_cpu, jnp.float32))
    for i, j in list(zip(*np.nonzero(c != c_cpu)))[:6]:
        eff = s[i, j // 16] * g_cpu[0]
        z = x[i, j] * (np.float32(1) / np.float32(eff))
        print(f"  [{i},{j}] x {x[i, j]!r} scale {s[i, j // 16]} z(numpy) {z!r} code here "
              f"{c[i, j]} cpu {c_cpu[i, j]} deq here {d[i, j]!r} cpu {d_cpu[i, j]!r}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="")
    ap.add_argument("--n", type=int, default=1 << 22, help="elements per primitive check")
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []

    def row(name, bad, n):
        rows.append({"check": name, "mismatches": int(bad), "of": int(n)})
        print(f"| {name} | {int(bad)} | {int(n)} |", flush=True)

    print(f"device: {jax.devices()[0].device_kind} ({jax.default_backend()})")
    print("| check | mismatches | of |\n|---|---|---|")
    v = np.exp(rng.uniform(-40, 40, a.n)).astype(np.float32)  # magnitudes 1e-17 .. 1e17
    got = np.asarray(jax.jit(Q._recip)(jnp.asarray(v)))
    row("reciprocal 1/v (quant._recip)", np.sum(got.view(np.uint32) != (np.float32(1) / v).view(
        np.uint32)), a.n)
    got = np.asarray(jax.jit(lambda v: 1.0 / v)(jnp.asarray(v)))
    row("reciprocal 1/v (plain jnp)", np.sum(got.view(np.uint32) != (np.float32(1) / v).view(
        np.uint32)), a.n)
    # E4M3 cast: random floats in the scale range plus exact midpoints between neighbours
    grid = np.arange(0, 127, dtype=np.uint8).view(E4M3).astype(np.float32)
    mids = ((grid[:-1].astype(np.float64) + grid[1:]) / 2).astype(np.float32)
    s = np.concatenate([rng.uniform(0, 448, a.n).astype(np.float32), mids,
                        np.nextafter(mids, 0), np.nextafter(mids, 1000)])
    got = np.asarray(jax.jit(lambda s: s.astype(jnp.float8_e4m3fn))(jnp.asarray(s)))
    row("float32 -> e4m3 cast", np.sum(got.view(np.uint8) != s.astype(E4M3).view(np.uint8)),
        s.size)
    amax_b = np.abs(rng.standard_normal(a.n)).astype(np.float32) * 3
    g = np.float32(np.abs(amax_b).max() * Q.GLOBAL_FACTOR)
    f = jax.jit(lambda a, g: Q._nvfp4_block_scale(a, jnp.zeros_like(a, bool), g, 6.0))
    got = np.asarray(f(jnp.asarray(amax_b), jnp.float32(g))).astype(np.float32)
    want = np.minimum(amax_b * (np.float32(1) / (np.float32(6) * g)), np.float32(448)).astype(
        E4M3).astype(np.float32)
    row("block scale rule (one g)", np.sum(got != want), a.n)
    for shape in ((1024, 1024), (4096, 4096)):
        x = rng.standard_normal(shape).astype(np.float32) * np.exp(
            rng.uniform(-3, 3, (shape[0], 1))).astype(np.float32)
        for scope in ("tensor", "row"):
            q = jax.jit(lambda x, scope=scope: Q.quantize(x, "nvfp4", global_scope=scope))(
                jnp.asarray(x))
            want = ref_nvfp4_scales(x, scope == "row")
            got = np.asarray(q.scales).astype(np.float32)
            row(f"quantize nvfp4/{scope} {shape} scales", np.sum(got != want), want.size)
        cpu = jax.local_devices(backend="cpu")[0]
        for fmt in ("nvfp4", "mxfp4"):
            f = jax.jit(lambda x, fmt=fmt: Q.quantize(x, fmt))
            q, q_cpu = f(jnp.asarray(x)), f(jax.device_put(x, cpu))
            bad = np.asarray(q.codes) != np.asarray(q_cpu.codes)
            row(f"quantize {fmt}/tensor {shape} packed codes vs CPU", np.sum(bad), q.codes.size)
            if bad.any() and shape == (1024, 1024):  # what differs: the global scale or z?
                explain(x, q, q_cpu, fmt)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"device": jax.devices()[0].device_kind, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
