#!/usr/bin/env python3
"""RL train step time per variant: hint-guided FP4 QAT (TRACE) vs a BF16 train step.

PERFORMANCE.md target 5: the hint-guided QAT train step <= 1.3x a BF16 train step.

What is timed: ``trace_jax.train.rl_step`` (forward + backward + AdamW update, jitted, state
donated) on one batch of ``--batch`` trajectories x ``--seq_len`` tokens (the second half of each
is the response), median of ``--steps`` synced calls after a warm-up. Each variant's batch is
built as the RL loop builds it, from a full-sequence forward of its rollout numerics standing in
for the decode: the rollout's log-probs, routing (replayed with ``train.routing_replay``) and,
for ``trace``, the hints at the config's hinted sites; ``+codes`` rows also record the exact
codes at every site for the code-agreement metrics (``rollout.record_codes``, a diagnostic the
RL loop has on by default), which the train step then recomputes and compares.

    python experiments/bench_train_step.py --config configs/small.py            # GPU
    python experiments/bench_train_step.py --config configs/qwen3_30b_a3b.py --layers 2 \
        --batch 8 --seq_len 1024                                                 # GPU, 30B shape
    python experiments/bench_train_step.py --smoke                               # CPU: tiny
    python experiments/bench_train_step.py --from_metrics runs/*/metrics.jsonl   # logged runs

Writes train_step.{json,md} to --out and prints the markdown table last. ``--profile_steps N``
adds each variant's top kernels by device time (experiments/profile_summary.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from trace_jax import experiment as X  # noqa: E402
from trace_jax import model as M  # noqa: E402
from trace_jax import numerics as nx  # noqa: E402
from trace_jax import rollout as R  # noqa: E402
from trace_jax import run as RUN  # noqa: E402
from trace_jax import train as TR  # noqa: E402

TARGET_X_BF16 = 1.3
# (row name, variant, record codes)
ROWS = [("bf16", "bf16", False), ("fp4_qat_rtn", "fp4_qat_rtn", False),
        ("trace", "trace", False), ("trace+codes", "trace", True)]


def load_config(path: str, layers: int | None):
    spec = importlib.util.spec_from_file_location("_train_bench_cfg", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = mod.get_config()
    if layers:
        c.model.n_layers = layers
    return c


def rl_batch(exp: X.Experiment, params, tokens_BxT, record_codes: bool, key) -> TR.Batch:
    """The batch the RL loop would hand the trainer for these trajectories (see the module
    docstring): rollout numerics' log-probs, routing and hints from a full-sequence forward."""
    B, T = tokens_BxT.shape
    roll, train = exp.rollout_numerics, exp.train_numerics
    rec = (roll.recording_all_codes() if record_codes and roll.is_fp4 else
           dataclasses.replace(roll, hinted=train.hinted, hint_kind=roll.hint_kind))
    rp = R.sync_weights(params, roll, dtype=exp.cfg.dtype)

    @nx.model_jit  # compiled as the engine's rollout is (exact bf16 casts)
    def rollout_view(rp, toks):
        logits, aux, _ = M.forward(rp, toks, cfg=exp.cfg, numerics=rec,
                                   capture_hints=bool(rec.hinted) and roll.is_fp4)
        return R.token_logprobs(logits, toks), aux.experts, aux.hints

    lp, experts, recorded_hints = rollout_view(rp, tokens_BxT)
    t = jnp.arange(T)[None]
    response = jnp.broadcast_to(t >= T // 2, (B, T))
    valid = jnp.ones((B, T), bool)
    adv = jax.random.normal(key, (B,), jnp.float32)
    hints = train.trainer_hints(recorded_hints) if train.hinted else {}
    codes = recorded_hints if record_codes and roll.is_fp4 else {}
    return TR.Batch(tokens_BxT, response, valid, lp, adv, hints, jnp.swapaxes(experts, 0, 1),
                    response, codes)


def time_variant(config, name, variant, record_codes, args, key) -> dict:
    exp = X.build(config, variant)
    tc = dataclasses.replace(RUN.train_config(config), steps=max(args.steps + args.warmup, 2))
    opt = RUN.rl_optimizer(tc)
    params = M.init_params(exp.cfg, jax.random.fold_in(key, 1))
    toks = jax.random.randint(jax.random.fold_in(key, 2), (args.batch, args.seq_len), 0,
                              exp.cfg.vocab_size, jnp.int32)
    batch = rl_batch(exp, params, toks, record_codes, jax.random.fold_in(key, 3))
    state = TR.TrainState(params, opt.init(params))
    kw = dict(cfg=exp.cfg, numerics=exp.train_numerics, tc=tc, opt=opt,
              max_len=args.seq_len - args.seq_len // 2)
    t0 = time.perf_counter()
    state, m, _ = TR.rl_step(state, batch, None, **kw)
    jax.block_until_ready(state.params)
    compile_s = time.perf_counter() - t0
    for _ in range(args.warmup):
        state, m, _ = TR.rl_step(state, batch, None, **kw)
        jax.block_until_ready(state.params)
    ts = []
    for _ in range(args.steps):
        t1 = time.perf_counter()
        state, m, _ = TR.rl_step(state, batch, None, **kw)
        jax.block_until_ready(state.params)
        ts.append(time.perf_counter() - t1)
    row = {"row": name, "variant": variant, "record_codes": record_codes,
           "train_mode": exp.train_numerics.mode,
           "hinted_sites": len(exp.train_numerics.hinted),
           "step_s": statistics.median(ts), "step_s_min": min(ts), "steps_timed": len(ts),
           "compile_and_first_s": compile_s, "loss_finite": bool(jnp.isfinite(m["loss"]))}
    if args.profile_steps:
        from experiments import profile_summary as PS

        holder = {"s": state}

        def one():
            holder["s"], _, _ = TR.rl_step(holder["s"], batch, None, **kw)
            return holder["s"].params

        s = PS.profile_calls(one, args.profile_steps,
                             str(Path(args.out) / "train_step_profile" / name))
        row["profile"] = {"busy_ms": s["busy_ns_per_call"] / 1e6, "top": s["rows"][:10]}
        (Path(args.out) / f"train_step_profile_{name}.md").write_text(
            PS.render_md(s, top=20, title=f"{name}: "))
    return row


def render_md(res) -> str:
    base = next((r["step_s"] for r in res["rows"] if r["row"] == "bf16" and "step_s" in r), None)
    lines = [f"# RL train step per variant: {res['device']} (jax {res['jax_version']})", "",
             f"command: `{res['command']}`", "",
             f"model: {res['config']} with {res['n_layers']} layers; batch {res['batch']} "
             f"trajectories x {res['seq_len']} tokens (response = second half); median of "
             f"{res['steps']} synced `train.rl_step` calls after {res['warmup']} warm-up.", "",
             "| row | train numerics | hinted sites | records codes | step ms | x bf16 | "
             f"<= {TARGET_X_BF16}x |", "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        if "step_s" not in r:
            lines.append(f"| {r['row']} | error: {r['error']} | | | | | |")
            continue
        x = r["step_s"] / base if base else None
        ok = "-" if x is None or r["row"] == "bf16" else ("met" if x <= TARGET_X_BF16 else "missed")
        lines.append(f"| {r['row']} | {r['train_mode']} | {r['hinted_sites']} | "
                     f"{r['record_codes']} | {1e3 * r['step_s']:.1f} | "
                     f"{'-' if x is None else f'{x:.2f}'} | {ok} |")
    return "\n".join(lines) + "\n"


def from_metrics(paths: list[str], skip: int = 5) -> list[dict]:
    """Median ``time_train_s`` (after the first ``skip`` RL steps) of RL runs' metrics.jsonl
    files: the train step as the RL loop timed it (it includes building the batch and, with
    ``rollout.record_codes``, the code-agreement metrics; other processes may have shared the
    GPU)."""
    out = []
    for p in paths:
        rows = [json.loads(line) for line in Path(p).read_text().splitlines() if line.strip()]
        t = [r["time_train_s"] for r in rows if "time_train_s" in r][skip:]
        if t:
            out.append({"run": p, "rl_steps": len(t) + skip, "median_train_s": statistics.median(t)})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(REPO / "configs/small.py"))
    ap.add_argument("--layers", type=int, default=0, help="override model.n_layers (0: keep)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq_len", type=int, default=20)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rows", default=",".join(r[0] for r in ROWS))
    ap.add_argument("--profile_steps", type=int, default=0)
    ap.add_argument("--out", default=str(REPO / "experiments/results"))
    ap.add_argument("--smoke", action="store_true", help="CPU: tiny config, small batch, 2 steps")
    ap.add_argument("--from_metrics", nargs="*", default=None, metavar="METRICS_JSONL",
                    help="instead: median time_train_s of finished RL runs (no timing here)")
    args = ap.parse_args(argv)
    if args.from_metrics is not None:
        rows = from_metrics(args.from_metrics)
        for r in rows:
            print(f"{r['run']}: {1e3 * r['median_train_s']:.1f} ms median over "
                  f"{r['rl_steps']} RL steps")
        return rows
    if args.smoke:
        args.config = str(REPO / "configs/tiny.py")
        args.batch, args.seq_len, args.steps, args.warmup = 4, 16, 2, 1
    known = {r[0]: r for r in ROWS}
    wanted = [w for w in args.rows.split(",") if w]
    for w in wanted:
        if w not in known:
            raise SystemExit(f"unknown row {w!r}; known: {list(known)}")
    config = load_config(args.config, args.layers or None)
    if args.seq_len > config.model.max_seq_len:
        raise SystemExit(f"--seq_len {args.seq_len} exceeds model.max_seq_len "
                         f"{config.model.max_seq_len}")
    dev = jax.devices()[0]
    res = {"command": " ".join([Path(sys.argv[0]).name] + (argv if argv is not None
                                                            else sys.argv[1:])),
           "jax_version": jax.__version__, "device": f"{dev.platform}:{dev.device_kind}",
           "config": Path(args.config).stem, "n_layers": int(config.model.n_layers),
           "batch": args.batch, "seq_len": args.seq_len, "steps": args.steps,
           "warmup": args.warmup, "rows": []}
    key = jax.random.PRNGKey(0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for w in wanted:
        name, variant, codes = known[w]
        try:
            row = time_variant(config, name, variant, codes, args, key)
        except Exception as e:  # noqa: BLE001 - an OOM or a failed compile is a result row
            row = {"row": name, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}
        res["rows"].append(row)
        print(name, {k: v for k, v in row.items() if k != "profile"}, flush=True)
        # rewritten after every row: a run cut short by a time limit keeps the rows it finished
        (out / "train_step.json").write_text(json.dumps(res, indent=1))
        (out / "train_step.md").write_text(render_md(res))
    md = render_md(res)
    print(md)
    return res


if __name__ == "__main__":
    main()
