"""Rollout / trainer mismatch with the rollout's decode attention P rounded to bf16.

  python experiments/p_precision_mismatch.py --config configs/tiny.py --checkpoint DIR \
      [--batches 8] [--out experiments/results] [--attention reference|kernel] \
      [--activation_quantizer xla] [--expert_matmul reference]

``rollout.attention_p_precision="bf16"`` makes the GPU decode attention 13-15% faster (session
29) by rounding P once to bf16 in P.V instead of splitting it into two bf16 terms; the trainer's
attention stays f32. This script asks what that rounding does to METHOD.md's mismatch metrics:
``trace_jax.diagnose`` on ``--batches`` eval batches of one checkpoint, once per precision (the
config field becomes the rollout numerics' ``attention_p``, a static argument of the compiled
rollout). On a CPU the reference attention rounds its weights to bf16 too: a rounding of the
kernel's size, not its bits (the kernel rounds relative to a running max per block and split).
Batch b samples with the same key under both precisions, so the rows are paired. Writes
``p_precision_mismatch.{md,json}``: per variant and metric, the mean over batches under f32 and
bf16 P and the mean paired difference with its standard error. ``--attention reference``,
``--activation_quantizer xla`` and ``--expert_matmul reference`` take a GPU's rollout kernels
out one at a time (``--attention kernel`` puts the decode kernel into a CPU run, interpreted);
the environment variable ``JAX_DEFAULT_MATMUL_PRECISION=highest`` does the same for XLA's TF32
products.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRECISIONS = ("f32", "bf16")
METRICS = ("kl_k3", "logprob_gap_mean", "logprob_gap_max", "code_agreement_hinted")


def diagnose_paired(config_path: str, checkpoint: str, batches: int,
                    trainer_p: str = "rollout", kernel_layout: bool = False
                    ) -> dict[str, list[dict]]:
    """``diagnose`` on batches 0 .. batches - 1, each under both precisions in turn (so a run
    cut short still holds paired batches; progress goes to stderr), per precision a list of
    {variant: {metric: value}}. ``trainer_p``: "rollout" (the trainer's attention replays the
    rollout's P, as in the RL loop) or "f32" (it stays f32, as before session 32).
    ``kernel_layout``: the rollout's FP4 experts in the Pallas kernels' layout
    (``rollout.kernel_layout``; on a CPU their pure-JAX reference)."""
    sys.path.insert(0, _REPO)
    from trace_jax import checkpoint as C
    from trace_jax import diagnose as DG

    configs = {}
    for p in PRECISIONS:
        configs[p] = _load_config(config_path)
        configs[p].rollout.attention_p_precision = p
        configs[p].rollout.kernel_layout = kernel_layout or configs[p].rollout.kernel_layout
    params = C.load_params(checkpoint, configs["f32"])
    rows, t0 = {p: [] for p in PRECISIONS}, time.time()
    for b in range(batches):
        for p in PRECISIONS:
            res = DG.diagnose(configs[p], params, seed_step=b, hint_cost=False,
                              trainer_attention_p=None if trainer_p == "rollout" else trainer_p)
            rows[p].append({v: {m: r[m] for m in METRICS if m in r} for v, r in res.items()})
            tr = rows[p][-1].get("trace", {})
            print(f"batch {b} P {p}: trace kl_k3 {tr.get('kl_k3')}, hinted code agreement "
                  f"{tr.get('code_agreement_hinted')} ({time.time() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
    return rows


def _load_config(path: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location("experiment_config", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config()


def summarize(rows: dict[str, list[dict]]) -> list[dict]:
    """Per (variant, metric): the means under each precision and the paired bf16 - f32
    difference (mean, standard error over batches)."""
    out = []
    for v in rows["f32"][0]:
        for m in METRICS:
            if m not in rows["f32"][0][v]:
                continue
            a = np.array([r[v][m] for r in rows["f32"]])
            b = np.array([r[v][m] for r in rows["bf16"]])
            d = b - a
            out.append(dict(variant=v, metric=m, f32=float(a.mean()), bf16=float(b.mean()),
                            diff=float(d.mean()),
                            diff_se=float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1
                            else float("nan")))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--checkpoint", required=True, help="a run directory or checkpoint")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--out", default=os.path.join(_REPO, "experiments", "results"))
    ap.add_argument("--attention", default="auto", choices=["auto", "reference", "kernel"],
                    help="the rollout's decode attention: what ops.decode_attention picks (the "
                         "kernel on a GPU), its XLA reference everywhere (on a GPU: to tell "
                         "the kernel's part in the mismatch from the rest), or the Triton kernel "
                         "everywhere (on a CPU in Pallas interpret mode: its own bits there)")
    ap.add_argument("--activation_quantizer", default="auto", choices=["auto", "kernel", "xla"],
                    help="the rollout's activation quantizer (numerics.ACTIVATION_QUANTIZER)")
    ap.add_argument("--expert_matmul", default="auto", choices=["auto", "reference"],
                    help="the rollout's FP4 expert matmuls: the kernels on a GPU, or their "
                         "pure-JAX references everywhere (only with rollout.kernel_layout: "
                         "otherwise the rollout dequantizes its experts to bf16 and runs the "
                         "trainer's grouped matmul)")
    ap.add_argument("--trainer_p", default="rollout", choices=["rollout", "f32"],
                    help="the trainer's attention P: replaying the rollout's (as the RL loop "
                         "does since session 32) or f32 whatever the rollout's")
    ap.add_argument("--kernel_layout", action="store_true",
                    help="rollout.kernel_layout on: the FP4 grouped kernels (their reference "
                         "on a CPU) instead of dequantize + the trainer's grouped matmul")
    a = ap.parse_args(argv)
    if a.batches < 1:
        raise SystemExit(f"--batches must be >= 1, got {a.batches}")
    sys.path.insert(0, _REPO)
    import jax

    from trace_jax import numerics as nx
    from trace_jax import ops

    nx.ACTIVATION_QUANTIZER = a.activation_quantizer
    if a.attention == "reference":  # no kernel module for the decode attention: the reference
        kernel = ops._kernel
        ops._kernel = lambda mod, name: None if name == "decode_attention" else kernel(mod, name)
    if a.attention == "kernel" and jax.default_backend() != "gpu":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from check_rollout_attention import triton_decode_attention

        interpreted = triton_decode_attention()
        kernel = ops._kernel
        ops._kernel = lambda mod, name: (interpreted if name == "decode_attention"
                                         else kernel(mod, name))
    if a.expert_matmul == "reference":
        from pallas_kernels import fp4_matmul as FM

        use_kernel = FM._use_kernel
        FM._use_kernel = lambda backend: False if backend == "auto" else use_kernel(backend)
    rows = diagnose_paired(a.config, a.checkpoint, a.batches, a.trainer_p, a.kernel_layout)
    table = summarize(rows)
    platform = jax.default_backend()
    kernel_attention = a.attention == "kernel" or (platform == "gpu" and a.attention == "auto")
    how = ("the decode attention kernel" + (" in interpret mode" if platform != "gpu" else "")
           + ", its own P rounding" if kernel_attention else
           "the reference attention, which rounds P to bf16: a rounding of the GPU kernel's size, "
           "not its bits")
    how += (f"; activation quantizer {a.activation_quantizer}; expert matmuls "
            f"{a.expert_matmul}; default matmul precision "
            f"{jax.config.jax_default_matmul_precision or 'default'}; XLA excess precision "
            + ("on (TRACE_JAX_EXCESS_PRECISION=1)"
               if nx.COMPILER_OPTIONS["xla_allow_excess_precision"] else "off"))
    lines = ["# Rollout / trainer mismatch, decode attention P in f32 vs bf16", "",
             f"command: `python experiments/p_precision_mismatch.py --config {a.config} "
             f"--checkpoint {a.checkpoint} --batches {a.batches}"
             + (f" --attention {a.attention}" if a.attention != "auto" else "")
             + (f" --activation_quantizer {a.activation_quantizer}"
                if a.activation_quantizer != "auto" else "")
             + (f" --expert_matmul {a.expert_matmul}" if a.expert_matmul != "auto" else "")
             + (f" --trainer_p {a.trainer_p}" if a.trainer_p != "rollout" else "")
             + (" --kernel_layout" if a.kernel_layout else "")
             + f"` on {platform} ({how})", "",
             "| variant | metric | f32 P | bf16 P | bf16 - f32 (paired, +- s.e.) |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['variant']} | {r['metric']} | {r['f32']:.4g} | {r['bf16']:.4g} | "
              f"{r['diff']:+.3g} +- {r['diff_se']:.2g} |" for r in table]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "p_precision_mismatch.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(a.out, "p_precision_mismatch.json"), "w") as f:
        json.dump(dict(batches=a.batches, config=a.config, platform=platform, how=how,
                       rows=rows, summary=table), f, indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
