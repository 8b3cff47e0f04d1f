#!/usr/bin/env python3
"""``pallas_kernels.kv_layout.to_words`` / ``from_words`` on the default device against a numpy
spelling of the bit move (bit 4c + j of each natural 32-bit word goes to bit ``source_bits()[c,
j]``), on random bytes; and ``to_kv_words(quantize(x))`` on the default device against the CPU.

    python experiments/check_kv_words.py
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pallas_kernels import kv_layout as KL  # noqa: E402
from trace_jax import quant as Q  # noqa: E402


def numpy_to_words(codes_u8: np.ndarray) -> np.ndarray:
    w = codes_u8.reshape(*codes_u8.shape[:-1], -1, 4).view(np.uint32)[..., 0]
    tab = KL.source_bits()
    out = np.zeros_like(w)
    for c in range(8):
        for j in range(4):
            out |= ((w >> np.uint32(4 * c + j)) & np.uint32(1)) << np.uint32(tab[c, j])
    return out[..., None].view(np.uint8).reshape(codes_u8.shape)


def main() -> int:
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 256, (64, 8, 64), dtype=np.uint8)
    want = numpy_to_words(codes)
    got = np.asarray(jax.jit(KL.to_words)(jnp.asarray(codes)))
    back = np.asarray(jax.jit(KL.from_words)(jnp.asarray(want)))
    x = jnp.asarray(rng.standard_normal((4, 16, 8, 128)), jnp.bfloat16)
    conv = jax.jit(lambda a: KL.to_kv_words(Q.quantize(a, "nvfp4", axis=-1, global_scope="row")))
    dev = jax.tree.map(np.asarray, conv(x))
    cpu = jax.tree.map(np.asarray, conv(jax.device_put(x, jax.devices("cpu")[0])))
    rows = [("to_words vs numpy", int(np.sum(got != want))),
            ("from_words(numpy words) vs codes", int(np.sum(back != codes))),
            ("to_kv_words(quantize(x)) vs CPU",
             sum(int(np.sum(a.view(np.uint8) != b.view(np.uint8)))
                 for a, b in zip(jax.tree.leaves(dev), jax.tree.leaves(cpu))))]
    print(f"device {jax.devices()[0].device_kind}\n| check | mismatching bytes |\n|---|---|")
    for name, n in rows:
        print(f"| {name} | {n} |")
    return 0 if all(n == 0 for _, n in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
