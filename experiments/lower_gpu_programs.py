#!/usr/bin/env python3
"""Lower the model's GPU programs for an H200 on a CPU-only machine (no GPU, no weights).

    python experiments/lower_gpu_programs.py --config configs/qwen3_30b_a3b.py --layers 2 \
        [--variants bf16,trace] [--set rollout.attention_p_precision=bf16 ...] [--compile DIR]

A GPU session is short; a kernel that fails to lower (a Pallas shape rule, a Mosaic GPU layout, a
new keyword) should fail here first. Per variant it traces, with abstract inputs, the two programs
the RL loop runs on the GPU and lowers them for CUDA:

- ``generate``: the rollout (prefill + decode loop) with the run's rollout weights
  (``rollout.kernel_layout`` from the config) and recorded codes / hints, as ``run.rl_iteration``;
- ``rl_step``: the trainer's step on a batch shaped as ``bench_train_step.rl_batch`` builds it.

``jax.default_backend()`` answers "gpu" while tracing (trace_jax and the kernels pick their GPU
paths at trace time), and Pallas-Triton lowers for an H200 (``matmul_compilecheck.patched``).
Printed per program: lowering seconds and the Pallas kernels in it (custom calls by name). With
``--compile DIR`` every distinct Triton kernel is also compiled to a cubin with the installed
Triton (its registers and spills printed; files under DIR); Mosaic GPU kernels are lowered only
(their compile runs inside XLA's GPU compiler). Exits 1 if anything fails.
"""

from __future__ import annotations

import argparse
import ast
import collections
import contextlib
import dataclasses
import hashlib
import re
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "experiments"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import bench_train_step as BT  # noqa: E402
from pallas_kernels import matmul_compilecheck as mc  # noqa: E402
from trace_jax import experiment as X  # noqa: E402
from trace_jax import model as M  # noqa: E402
from trace_jax import ops  # noqa: E402
from trace_jax import rollout as R  # noqa: E402
from trace_jax import run as RUN  # noqa: E402
from trace_jax import train as TR  # noqa: E402


@contextlib.contextmanager
def as_gpu():
    """Trace as if on the GPU: ``jax.default_backend()`` says "gpu" and Pallas-Triton lowers
    for an H200. Undone on exit."""
    real = jax.default_backend
    jax.default_backend = lambda: "gpu"
    ops._on_gpu.cache_clear()
    try:
        with mc.patched():
            yield
    finally:
        jax.default_backend = real
        ops._on_gpu.cache_clear()


def kernels_in(hlo_text: str) -> dict[str, int]:
    """Pallas kernels in a lowered program: custom-call targets and kernel names, with counts."""
    calls = collections.Counter(re.findall(r"custom_call @([\w$.]+)", hlo_text))
    names = collections.Counter(re.findall(r'name = "(\w+)", num_stages', hlo_text))
    return dict(calls) | dict(names)


def _lower(jitted, *args, **kw) -> str:
    return jitted.top.trace(*args, **kw).lower(lowering_platforms=("cuda",)).as_text()


def lower_variant(config, variant: str, batch: int, prompt: int, new_tokens: int) -> dict:
    """{program: (seconds, kernels)} for one variant's generate and rl_step (abstract inputs)."""
    exp = X.build(config, variant)
    roll = exp.rollout_numerics
    record = (roll.recording_all_codes() if config.rollout.record_codes and roll.is_fp4 else
              dataclasses.replace(roll, hinted=exp.train_numerics.hinted,
                                  hint_kind=roll.hint_kind))
    params = jax.eval_shape(lambda k: M.init_params(exp.cfg, k), jax.random.key(0))
    out = {}
    t0 = time.perf_counter()
    rparams = jax.eval_shape(lambda p: R.sync_weights(
        p, roll, dtype=exp.cfg.dtype, kernel_layout=X.rollout_kernel_layout(config)), params)
    sampling = dataclasses.replace(exp.sampling, max_new_tokens=new_tokens)
    text = _lower(R._generate, rparams, jax.ShapeDtypeStruct((batch, prompt), jnp.int32),
                  jax.ShapeDtypeStruct((batch,), jnp.int32), jax.random.key(1), cfg=exp.cfg,
                  numerics=record, sampling=sampling, capture_hints=bool(record.hinted))
    out["generate"] = (time.perf_counter() - t0, kernels_in(text))
    t0 = time.perf_counter()
    tc = dataclasses.replace(RUN.train_config(config), steps=10)
    opt = RUN.rl_optimizer(tc)
    seq = prompt + new_tokens
    tb = jax.eval_shape(lambda p, t, k: BT.rl_batch(exp, p, t, False, k), params,
                        jax.ShapeDtypeStruct((batch, seq), jnp.int32), jax.random.key(2))
    state = jax.eval_shape(lambda p: TR.TrainState(p, opt.init(p)), params)
    text = _lower(TR.rl_step, state, tb, None, cfg=exp.cfg, numerics=exp.train_numerics, tc=tc,
                  opt=opt, max_len=new_tokens)
    out["rl_step"] = (time.perf_counter() - t0, kernels_in(text))
    return out


def compile_captured(outdir: str) -> list[dict]:
    """Compile each distinct captured Triton kernel for sm_90 with the installed Triton."""
    Path(outdir).mkdir(parents=True, exist_ok=True)
    rows, seen = [], set()
    for ttir, (name, warps, stages) in zip(mc.CAPTURED, mc.CAPTURED_PARAMS):
        key = hashlib.sha256(f"{ttir}{warps}{stages}".encode()).hexdigest()[:10]
        if key in seen:
            continue
        seen.add(key)
        st = mc.compile_ttir(ttir, warps, stages, outdir, f"{name}_{key}")
        rows.append(dict(kernel=name, id=key, warps=warps, stages=stages, regs=st["regs"],
                         local_bytes=st["local_bytes"], shared_bytes=st["shared_bytes"]))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "qwen3_30b_a3b.py"))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--variants", default="bf16,trace")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="config override (Python literal or string), e.g. numerics.fmt=mxfp4")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new_tokens", type=int, default=64)
    ap.add_argument("--compile", default="", metavar="DIR")
    a = ap.parse_args(argv)
    config = BT.load_config(a.config, a.layers)
    config.rollout.kernel_layout = True  # as the GPU runs use it (a --set may turn it off)
    for s in a.set:
        field, value = s.split("=", 1)
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):  # a bare word is a string
            pass
        *parents, leaf = field.split(".")
        node = config
        for part in parents:
            node = node.get(part) if hasattr(node, "get") else None
        if node is None or not hasattr(node, "get") or leaf not in node:
            ap.error(f"--set {field}: no such config field")
        config.update_from_flattened_dict({field: value})
    ok = True
    print("| variant | program | lower s | Pallas kernels |\n|---|---|---|---|")
    with as_gpu():
        mc.CAPTURED.clear()
        mc.CAPTURED_PARAMS.clear()
        for variant in a.variants.split(","):
            try:
                res = lower_variant(config, variant, a.batch, a.prompt, a.new_tokens)
            except Exception as e:  # noqa: BLE001
                ok = False
                traceback.print_exc()
                print(f"| {variant} | FAILED | - | {type(e).__name__}: {str(e)[:300]} |")
                continue
            for prog, (secs, kern) in res.items():
                ks = ", ".join(f"{k} x{n}" for k, n in sorted(kern.items()))
                print(f"| {variant} | {prog} | {secs:.1f} | {ks} |", flush=True)
        if a.compile:
            try:
                rows = compile_captured(a.compile)
            except Exception as e:  # noqa: BLE001
                ok = False
                print(f"Triton compile FAILED: {type(e).__name__}: {str(e)[:1000]}")
            else:
                print("\n| Triton kernel | id | warps | stages | registers | spill bytes | "
                      "shared bytes |\n|---|---|---|---|---|---|---|")
                for r in rows:
                    print(f"| {r['kernel']} | {r['id']} | {r['warps']} | {r['stages']} | "
                          f"{r['regs']} | {r['local_bytes']} | {r['shared_bytes']} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
