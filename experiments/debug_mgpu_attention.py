"""Localise a wrong result of the Mosaic FP4-KV attention kernel on a GPU: its split partials
(``attention_mgpu._attention_t``: O^T, running max m, sum l) against ``partials_reference`` on
structured caches, one line per case, so that one run says which stage is wrong.

  python experiments/debug_mgpu_attention.py [--variants "K=V,K=V;..."]

Cases (one kv head, 8 query heads, head_dim 128):

* ``random`` at 64 / 128 rows, full and partial lengths, 1 and 2 splits: m checks K's decode,
  S^T's wgmma, the score scale and the row mask; l the softmax; O^T the P^T stores and V's decode.
* ``hot``: 64 sequences, sequence b's K is zero but for row b (large), so P is one-hot at row b
  and the output is V's row b. V is the same random matrix for every sequence; the row of V that
  each output matches best (``rows``) shows a P^T / V row permutation, ``dims`` the share of
  dims that match V's dim for dim (a V^T dim permutation).
* ``v_ones`` (V = 1: O^T = the sum of P, any row order) and ``k_zero`` (uniform P).
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
from experiments import check_mgpu_attention as CM  # noqa: E402
from pallas_kernels import attention_mgpu as AM  # noqa: E402
from pallas_kernels import mgpu_kv_layout as MK  # noqa: E402
from trace_jax import quant as Q  # noqa: E402

D, G = 128, 8
VARIANTS = [{}]  # _attention_t keyword sets (--variants, check_mgpu_attention's format)
quant = jax.jit(lambda x: Q.quantize(x, "nvfp4", axis=-1, global_scope="row"))


def _err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def run_case(name, k, v, lengths, p, q=None):
    b, s = k.shape[0], k.shape[2]
    q = jax.random.normal(jax.random.PRNGKey(s + p), (b, G, D), jnp.bfloat16) if q is None else q
    cache = MK.to_mgpu_kv(quant(k), quant(v))
    qg, kw = AM.kernel_args(q, cache, D ** -0.5, p)
    lengths = jnp.asarray(lengths, jnp.int32)
    want = AM.partials_reference(qg, cache, lengths, **kw)
    got = None
    for var in VARIANTS:
        if s % (64 * var.get("sub", 1) * p):
            print(f"{name} [{CM.variant_name(var)}]: skipped (a split is not a whole step)")
            continue
        label = f"{name} [{CM.variant_name(var)}]"
        try:
            got = AM._attention_t(qg, *AM.kernel_caches(cache), lengths, **{"steps": 2, **var},
                                  **kw)
            got = [np.asarray(x) for x in jax.block_until_ready(got)]
        except Exception as e:  # noqa: BLE001  (report and go on)
            print(f"{label}: {type(e).__name__}: {str(e)[:2000]}", flush=True)
            got = None
            continue
        errs = "  ".join(f"{n}={_err(g, w):.3g}" for n, g, w in zip("oml", got, want))
        nan = "  NaN!" if any(np.isnan(g).any() for g in got) else ""
        print(f"{label:46s} {errs}{nan}", flush=True)
    return None if got is None else (got, want, cache)


def main(argv=None) -> int:
    global VARIANTS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="",
                    help="check_mgpu_attention's format: ';'-separated keyword sets of "
                         "attention_mgpu._attention_t (num_splits is fixed per case here)")
    VARIANTS = CM.parse_variants(ap.parse_args(argv).variants)
    if any("num_splits" in v for v in VARIANTS):
        raise SystemExit("--variants: num_splits is fixed by each case (its P) here")
    print(jax.devices()[0].device_kind, jax.__version__, flush=True)
    key = iter(jax.random.split(jax.random.PRNGKey(0), 64))
    rnd = lambda *shape: jax.random.normal(next(key), shape, jnp.float32)  # noqa: E731
    for s, lengths, p in ((64, [64], 1), (64, [37], 1), (64, [1], 1), (128, [128], 1),
                          (128, [128], 2), (128, [100], 2), (256, [200, 256, 1, 64], 2),
                          (512, [512, 300, 1], 1)):
        k, v = rnd(len(lengths), 1, s, D), rnd(len(lengths), 1, s, D)
        run_case(f"random S={s} len={lengths} P={p}", k, v, lengths, p)
    k, v = rnd(2, 1, 128, D), rnd(2, 1, 128, D)
    run_case("v_ones S=128", k, jnp.ones_like(v), [128, 77], 1)
    run_case("k_zero S=128", jnp.zeros_like(k), v, [128, 77], 1)
    # one-hot P: sequence b attends to row b only
    vm = rnd(64, D)
    k = jnp.zeros((64, 1, 64, D), jnp.float32).at[jnp.arange(64), 0, jnp.arange(64)].set(6.0)
    q = jnp.ones((64, G, D), jnp.bfloat16)
    r = run_case("hot (P one-hot at row b)", k, jnp.broadcast_to(vm, (64, 1, 64, D)),
                 [64] * 64, 1, q=q)
    if r is not None:
        got, want, cache = r
        o = got[0][:, 0, 0, :, 0] / np.maximum(got[2][:, 0, 0, :1], 1e-30)  # [64 b, D]
        vd = np.asarray(AM.quant_dequant(MK.from_mgpu_kv(cache)[1]))[0, 0] * 2.0 ** -8  # [S, D]
        rows = [int(np.argmin(np.linalg.norm(vd - o[b], axis=1))) for b in range(64)]
        dims = np.mean(np.isclose(o, vd, rtol=1e-2, atol=1e-6))
        print("  best row per b:", rows)
        print(f"  rows correct {np.mean(np.asarray(rows) == np.arange(64)):.3f}, "
              f"dims matching {dims:.3f}; o[0, :8] {np.round(o[0, :8], 4)} "
              f"v[0, :8] {np.round(vd[0, :8], 4)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
