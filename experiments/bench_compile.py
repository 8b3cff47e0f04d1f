#!/usr/bin/env python3
"""Compile time of the training forward + backward (the TRACE trainer's hint-guided W4A4 QAT
loss gradient) with the layers unrolled vs ``model.scan_layers`` (lax.scan over groups of
identically-quantized layers), for a config's model at several depths.

    python experiments/bench_compile.py --config configs/small.py --layers 2,8,16 \
        [--json experiments/results/compile_time.json]

Prints a markdown table (lower+compile seconds, and the two gradients' max relative difference).
Both programs compile as the trainer's do (``numerics.model_jit``: exact bf16 casts).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trace_jax import model as M  # noqa: E402
from trace_jax import numerics as nx  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/small.py")
    ap.add_argument("--layers", default="2,8,16")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    spec = importlib.util.spec_from_file_location("cfg", a.config)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    config = mod.get_config()
    base = M.ModelConfig.from_config(dict(config.model, scan_layers=False))
    rows = []
    print(f"device {jax.devices()[0].device_kind}; {a.config}; trace-variant QAT gradient, "
          f"batch {a.batch} x {a.seq} tokens")
    print("| layers | unrolled s | scanned s | speedup | grad max rel diff |\n|---|---|---|---|---|")
    for n in [int(x) for x in a.layers.split(",")]:
        cfg = dataclasses.replace(base, n_layers=n)
        params = M.init_params(cfg, jax.random.key(0))
        toks = jax.random.randint(jax.random.key(1), (a.batch, a.seq), 0, cfg.vocab_size)
        roll = nx.make_numerics("fp4_rollout", n, fmt=config.numerics.fmt,
                                hint_layers=config.numerics.hint_layers)
        _, r_aux, _ = nx.model_jit(lambda p, t: M.forward(p, t, cfg=cfg, numerics=roll,
                                                     capture_hints=True))(
            M.pack_params(params, roll), toks)
        qat = roll.with_mode("fp4_qat")
        out = {}
        for name, c in (("unrolled", cfg), ("scanned", dataclasses.replace(cfg, scan_layers=True))):
            def loss(p, c=c):
                logits, aux, _ = M.forward(p, toks, cfg=c, numerics=qat, hints=r_aux.hints,
                                           forced_experts_LxBxTxK=r_aux.experts,
                                           hint_experts_LxBxTxK=r_aux.experts)
                return jnp.mean(jax.nn.logsumexp(logits, -1)) + 0.01 * aux.lb_loss
            t0 = time.perf_counter()
            f = nx.model_jit(jax.grad(loss)).lower(params).compile()
            out[name] = (time.perf_counter() - t0, f(params))
        ga, gb = out["unrolled"][1], out["scanned"][1]
        rel = max(float(jnp.max(jnp.abs(x - y)) / (jnp.max(jnp.abs(x)) + 1e-30))
                  for x, y in zip(jax.tree.leaves(ga), jax.tree.leaves(gb)))
        r = dict(layers=n, unrolled_s=out["unrolled"][0], scanned_s=out["scanned"][0],
                 speedup=out["unrolled"][0] / out["scanned"][0], grad_max_rel_diff=rel)
        rows.append(r)
        print(f"| {n} | {r['unrolled_s']:.1f} | {r['scanned_s']:.1f} | {r['speedup']:.2f}x | "
              f"{rel:.1e} |", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"device": jax.devices()[0].device_kind, "config": a.config,
                       "batch": a.batch, "seq": a.seq, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
