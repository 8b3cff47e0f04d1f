"""The trainer's grouped expert matmul, forward and backward: the Pallas bf16 grouped kernels
(``fp4_matmul.bf16_grouped_matmul``'s custom VJP) against ``jax.lax.ragged_dot`` and its XLA
gradient, at the MoE shapes of the RL train step.

  PYTHONUNBUFFERED=1 python -m pallas_kernels.bench_grouped_train [--out DIR] [--smoke]

Per shape (E experts, top-k, T tokens -> M = T k rows routed uniformly at random, K x N weight):
median wall time of the jitted forward and of forward + backward (``jax.vjp``: out, dx, dw) for
both implementations, TFLOP/s (2 M K N per matmul, 3 matmuls for forward + backward), and the
relative error of out / dx / dw against an f32 ``ragged_dot`` reference on the same inputs
(computed at a reduced token count where the reference's dense expansion would not fit). A
ragged_dot that fails (XLA's dense [E, M, K] intermediates out of memory) is reported as such.
``--sweep`` also times the forward, transposed-weight and weight-gradient kernels per tile
config. Writes grouped_train.{json,md} to --out and prints the table last.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import bench_matmul as BM
from pallas_kernels import fp4_matmul as fm
from pallas_kernels import matmul_triton as mt

# (name, E, top_k, tokens, K, N): the 30B shape's gate/up and down at 2K and 8K tokens per
# micro-batch, and configs/small.py's at its RL batch (128 x 20 tokens)
SHAPES = [
    ("30b_gate_2k", 128, 8, 2048, 2048, 768), ("30b_down_2k", 128, 8, 2048, 768, 2048),
    ("30b_gate_8k", 128, 8, 8192, 2048, 768), ("30b_down_8k", 128, 8, 8192, 768, 2048),
    ("small_gate", 16, 4, 2560, 512, 1024), ("small_down", 16, 4, 2560, 1024, 512),
]
SMOKE_SHAPES = [("smoke", 4, 2, 64, 128, 64)]
SWEEP = [mt.Config(bm=128, bn=128, bk=64, num_warps=8, num_stages=3),
         mt.Config(bm=64, bn=128, bk=64, num_warps=4, num_stages=4),
         mt.Config(bm=128, bn=64, bk=64, num_warps=4, num_stages=4),
         mt.Config(bm=128, bn=256, bk=64, num_warps=8, num_stages=3),
         mt.Config(bm=64, bn=64, bk=64, num_warps=4, num_stages=4)]
WGRAD_SWEEP = [mt.Config(bm=64, bn=128, bk=128, num_warps=8, num_stages=3),
               mt.Config(bm=32, bn=128, bk=128, num_warps=8, num_stages=4),
               mt.Config(bm=64, bn=64, bk=128, num_warps=4, num_stages=4),
               mt.Config(bm=64, bn=256, bk=128, num_warps=8, num_stages=3)]


def timeit(f, *args) -> float:
    return BM.timeit(f, *args, n=10)


def inputs(e, k_top, tokens, K, N, seed=0):
    ks = jax.random.split(jax.random.key(seed), 4)
    experts = jax.random.randint(ks[0], (tokens * k_top,), 0, e)
    gs = jnp.bincount(experts, length=e).astype(jnp.int32)
    m = tokens * k_top
    x = jax.random.normal(ks[1], (m, K), jnp.float32).astype(jnp.bfloat16)
    w = (jax.random.normal(ks[2], (e, K, N), jnp.float32) / np.sqrt(K)).astype(jnp.bfloat16)
    dy = jax.random.normal(ks[3], (m, N), jnp.float32).astype(jnp.bfloat16)
    return x, w, dy, gs


def fwd_bwd(impl):
    def f(x, w, dy, gs):
        out, vjp = jax.vjp(lambda x, w: impl(x, w, gs), x, w)
        return (out, *vjp(dy))
    return jax.jit(f)


def kernel_impl(x, w, gs):
    return fm.bf16_grouped_matmul(x, w, gs, backend="triton")


def xla_impl(x, w, gs):
    return jax.lax.ragged_dot(x, w, gs, preferred_element_type=jnp.float32).astype(jnp.bfloat16)


def ref_impl(x, w, gs):
    return jax.lax.ragged_dot(x.astype(jnp.float32), w.astype(jnp.float32), gs,
                              precision=jax.lax.Precision.HIGHEST)


def errors(e, k_top, tokens, K, N):
    """Relative errors of the kernels' out, dx, dw against the f32 reference (at <= 1024 tokens:
    the reference's gradient is XLA's dense expansion)."""
    x, w, dy, gs = inputs(e, k_top, min(tokens, 1024), K, N, seed=1)
    got = fwd_bwd(kernel_impl)(x, w, dy, gs)
    f32 = lambda a: a.astype(jnp.float32)  # noqa: E731
    want = fwd_bwd(ref_impl)(f32(x), f32(w), f32(dy), gs)
    return {f"err_{n}": BM.rel_err(a, b) for n, a, b in zip(("out", "dx", "dw"), got, want)}


def bench_shape(name, e, k_top, tokens, K, N, sweep: bool) -> dict:
    m = tokens * k_top
    row = {"shape": name, "experts": e, "top_k": k_top, "tokens": tokens, "rows": m, "k": K,
           "n": N, **errors(e, k_top, tokens, K, N)}
    x, w, dy, gs = inputs(e, k_top, tokens, K, N)
    flops = 2.0 * m * K * N
    for impl_name, impl in (("pallas", kernel_impl), ("ragged_dot", xla_impl)):
        try:
            t_f = timeit(jax.jit(lambda x, w, gs, impl=impl: impl(x, w, gs)), x, w, gs)
            t_fb = timeit(fwd_bwd(impl), x, w, dy, gs)
            row[f"{impl_name}_fwd_ms"], row[f"{impl_name}_fwd_bwd_ms"] = 1e3 * t_f, 1e3 * t_fb
            row[f"{impl_name}_fwd_tflops"] = flops / t_f / 1e12
            row[f"{impl_name}_fwd_bwd_tflops"] = 3 * flops / t_fb / 1e12
        except Exception as ex:  # noqa: BLE001  (XLA's dense expansion out of memory)
            row[f"{impl_name}_error"] = f"{type(ex).__name__}: {str(ex).splitlines()[0][:160]}"
    if sweep:
        row["sweep"] = []
        for cfg in SWEEP:
            r = {"cfg": dataclasses.asdict(cfg)}
            for what, fn, args in (
                    ("fwd", lambda x, w, g, c=cfg: mt.grouped_bf16(x, w, g, c), (x, w, gs)),
                    ("dx_nk", lambda d, w, g, c=cfg: mt.grouped_bf16(d, w, g, c, w_layout="nk"),
                     (dy, w, gs))):
                try:
                    r[f"{what}_ms"] = 1e3 * timeit(jax.jit(fn), *args)
                except Exception as ex:  # noqa: BLE001
                    r[f"{what}_error"] = str(ex).splitlines()[0][:120]
            row["sweep"].append(r)
        for cfg in WGRAD_SWEEP:
            r = {"cfg": dataclasses.asdict(cfg)}
            try:
                r["wgrad_ms"] = 1e3 * timeit(
                    jax.jit(lambda x, d, g, c=cfg: mt.grouped_bf16_wgrad(x, d, g, c)), x, dy, gs)
            except Exception as ex:  # noqa: BLE001
                r["wgrad_error"] = str(ex).splitlines()[0][:120]
            row["sweep"].append(r)
    print(json.dumps(row), flush=True)
    return row


def render_md(res) -> str:
    f = lambda v, p=2: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
    lines = [f"# Grouped expert matmul, forward and backward: {res['device']} "
             f"(jax {res['jax_version']})", "", f"command: `{res['command']}`", "",
             "Rows routed uniformly at random (top-k of E per token); times are medians of "
             "synced jitted calls; fwd+bwd = out, dx, dw. Errors: the Pallas path vs an f32 "
             "ragged_dot reference (at <= 1024 tokens).", "",
             "| shape | E | rows | K x N | pallas fwd ms | ragged_dot fwd ms | pallas fwd+bwd ms "
             "| ragged_dot fwd+bwd ms | speedup fwd+bwd | pallas fwd+bwd TFLOP/s "
             "| err out / dx / dw |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        rd = r.get("ragged_dot_fwd_bwd_ms")
        pk = r.get("pallas_fwd_bwd_ms")
        sp = f"{rd / pk:.1f}x" if rd and pk else ("ragged_dot failed" if "ragged_dot_error" in r
                                                  else "-")
        lines.append(
            f"| {r['shape']} | {r['experts']} | {r['rows']} | {r['k']} x {r['n']} | "
            f"{f(r.get('pallas_fwd_ms'))} | {f(r.get('ragged_dot_fwd_ms'))} | {f(pk)} | {f(rd)} | "
            f"{sp} | {f(r.get('pallas_fwd_bwd_tflops'), 0)} | {r['err_out']:.1e} / "
            f"{r['err_dx']:.1e} / {r['err_dw']:.1e} |")
    errs = [f"{r['shape']}: {r['ragged_dot_error']}" for r in res["rows"]
            if "ragged_dot_error" in r]
    if errs:
        lines += ["", "ragged_dot failures: " + "; ".join(errs)]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out",
                    default=str(Path(__file__).resolve().parents[1] / "experiments/results"))
    ap.add_argument("--shapes", default="", help="comma-separated shape names (default: all)")
    ap.add_argument("--sweep", action="store_true", help="also time each kernel per tile config")
    ap.add_argument("--smoke", action="store_true", help="one tiny shape (CPU: interpret mode)")
    args = ap.parse_args(argv)
    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    if args.shapes:
        want = set(args.shapes.split(","))
        shapes = [s for s in shapes if s[0] in want]
    rows = [bench_shape(*s, sweep=args.sweep) for s in shapes]
    res = {"device": f"{jax.default_backend()}:{jax.devices()[0].device_kind}",
           "jax_version": jax.__version__,
           "command": "python -m pallas_kernels.bench_grouped_train " + " ".join(sys.argv[1:]),
           "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "grouped_train.json").write_text(json.dumps(res, indent=1))
    md = render_md(res)
    (out / "grouped_train.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
