#!/usr/bin/env python3
"""XLA CPU compile and run time of two model programs: the FP4 rollout (``rollout.generate``:
prefill + decode loop, hints on the last half of the layers) and the TRACE trainer's hint-guided
QAT loss gradient, on the test suite's 2-layer model, with ``quant.INTEGER_FORMS`` on and off and
at LLVM optimization levels 1 and 0 (``--xla_backend_optimization_level``; LLVM's expensive
passes off, as in ``tests/conftest.py``). Each setting compiles in a fresh process,
``--repeats`` times. At one level the two forms must give bit-identical outputs; across levels
float sums may round differently (vectorised reductions), so the table gives the largest
difference from the first setting, relative to the largest value.

    python experiments/bench_cpu_compile.py [--repeats 3] \
        [--json experiments/results/cpu_compile.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = (  # name, INTEGER_FORMS, LLVM optimization level
    ("integer forms, level 1", True, 1),
    ("native ops, level 1", False, 1),
    ("native ops, level 0", False, 0),
)


def child(program: str, forms: bool) -> dict:
    sys.path.insert(0, REPO)
    import jax
    import jax.numpy as jnp
    import numpy as np

    from trace_jax import model as M
    from trace_jax import numerics as nx
    from trace_jax import quant as Q
    from trace_jax import rollout as R

    Q.INTEGER_FORMS = forms
    cfg = M.ModelConfig(vocab_size=32, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
                        head_dim=32, n_experts=8, top_k=2, d_expert=32, max_seq_len=32,
                        rope_theta=10_000.0, dtype="float32")
    params = jax.jit(M.init_params, static_argnames="cfg")(cfg, jax.random.key(0))
    roll = nx.make_numerics("fp4_rollout", cfg.n_layers, hint_layers="last_half")
    prompts = jnp.asarray([[1, 5, 6, 7, 8, 9], [1, 4, 0, 0, 0, 0], [1, 9, 9, 3, 0, 0]], jnp.int32)
    lens = jnp.asarray([6, 2, 4], jnp.int32)
    sampling = R.SamplingConfig(max_new_tokens=8, eos_id=-1, pad_id=0)
    compile_s = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, d, **kw: compile_s.append(d) if event.endswith("backend_compile_duration")
        else None)
    weights = R.sync_weights(params, roll, dtype=cfg.dtype)
    jax.block_until_ready(weights)
    compile_s.clear()
    t0 = time.perf_counter()
    out = ro = R.generate(weights, prompts, lens, jax.random.key(1), cfg=cfg, numerics=roll,
                          sampling=sampling)
    if program == "qat_grad":
        jax.block_until_ready(ro)
        qat = roll.with_mode("fp4_qat")
        hints, experts = ro.guidance.hints, ro.guidance.experts

        def loss(p):
            logits, aux, _ = M.forward(p, ro.tokens, cfg=cfg, numerics=qat, hints=hints,
                                       forced_experts_LxBxTxK=experts,
                                       hint_experts_LxBxTxK=experts)
            return jnp.mean(jax.nn.logsumexp(logits, -1)) + 0.01 * aux.lb_loss

        step = nx.model_jit(jax.grad(loss))  # as train.rl_step compiles
        compile_s.clear()
        t0 = time.perf_counter()
        out = step(params)
    jax.block_until_ready(out)
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()  # the compiled program again (same inputs)
    if program == "qat_grad":
        jax.block_until_ready(step(params))
    else:
        jax.block_until_ready(R.generate(weights, prompts, lens, jax.random.key(1), cfg=cfg,
                                         numerics=roll, sampling=sampling))
    run_s = time.perf_counter() - t1
    leaves = [np.asarray(x) for x in jax.tree.leaves(out)]
    digest = hashlib.sha256(b"".join(x.tobytes() for x in leaves))
    floats = np.concatenate([x.ravel() for x in leaves if x.dtype.kind == "f"]).astype(np.float64)
    return {"compile_s": sum(compile_s), "first_call_s": wall, "run_s": run_s,
            "digest": digest.hexdigest(), "floats": floats.tolist()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default="")
    ap.add_argument("--child", nargs=2, metavar=("PROGRAM", "FORMS"))
    a = ap.parse_args(argv)
    if a.child:
        print("RESULT " + json.dumps(child(a.child[0], a.child[1] == "1")))
        return 0
    rows = []
    print(f"{os.cpu_count()} CPUs; median of {a.repeats} fresh processes")
    print("| program | setting | compile s | run ms | same bits as level 1 forms | max rel diff |")
    print("|---|---|---|---|---|---|")
    for program in ("rollout", "qat_grad"):
        digests, first = {}, None
        for name, forms, level in SETTINGS:
            env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=(
                f"--xla_backend_optimization_level={level} "
                "--xla_llvm_disable_expensive_passes=true"))
            runs = []
            for _ in range(a.repeats):
                out = subprocess.run([sys.executable, __file__, "--child", program,
                                      "1" if forms else "0"],
                                     env=env, capture_output=True, text=True, check=False)
                if out.returncode:
                    sys.exit(out.stderr[-3000:])
                runs.append(json.loads(out.stdout.strip().splitlines()[-1][len("RESULT "):]))
            digests.setdefault(level, set()).update(r["digest"] for r in runs)
            vals = np.asarray(runs[0].pop("floats"))
            for r in runs[1:]:
                r.pop("floats")
            first = vals if first is None else first
            ok = np.isfinite(first) & np.isfinite(vals)
            rel = float(np.max(np.abs(vals[ok] - first[ok])) / np.max(np.abs(first[ok])))
            row = {"program": program, "setting": name, "integer_forms": forms, "level": level,
                   "compile_s": statistics.median(r["compile_s"] for r in runs),
                   "run_ms": 1e3 * statistics.median(r["run_s"] for r in runs),
                   "same_bits_at_level": len(digests[level]) == 1, "max_rel_diff": rel,
                   "runs": runs}
            rows.append(row)
            print(f"| {program} | {name} | {row['compile_s']:.2f} | {row['run_ms']:.1f} | "
                  f"{row['same_bits_at_level']} | {rel:.1e} |", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"cpus": os.cpu_count(), "rows": rows}, fh, indent=1)
    return 0 if all(r["same_bits_at_level"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
