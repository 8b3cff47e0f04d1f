"""Rollout tokens/s and train step time of the RL loop on 1 device vs a sharded mesh.

Each layout runs ``python -m trace_jax.main`` (the real loop: sync_weights -> rollout -> GRPO
step) in its own process on the given devices; per-step times come from its metrics.jsonl.

    python experiments/scaling.py --config=configs/small.py --steps 12 \
        --layout "1 GPU=0:(1,1,1,1)" --layout "2 GPUs DP+FSDP=0,1:(1,2,1,1)" \
        --layout "2 GPUs EP=0,1:(1,1,2,1)" --out experiments/results/scaling [-- extra flags]

A layout is ``name=devices:mesh shape``; ``devices`` go to CUDA_VISIBLE_DEVICES (on CPU the
count becomes --xla_force_host_platform_device_count). Steady state = median over steps after
the first two (compilation). Rollout tokens/s counts every trajectory's prompt-free generated
tokens (response lengths) per second of rollout wall time. Writes ``<out>.md`` and ``<out>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_layout(s: str):
    name, rest = s.split("=", 1)
    devices, mesh = rest.split(":", 1)
    return name.strip(), devices.strip(), mesh.strip()


def run_layout(name, devices, mesh, a, extra):
    workdir = os.path.join(a.workdir, name.replace(" ", "_").replace("+", ""))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    n = len(devices.split(","))
    if a.cpu:
        env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={n}")
    else:
        env["CUDA_VISIBLE_DEVICES"] = devices
    cmd = [sys.executable, "-m", "trace_jax.main", f"--config={a.config}",
           f"--config.workdir={workdir}", f"--config.train.steps={a.steps}",
           f"--config.mesh.shape={mesh}", "--config.checkpoint.every=100000", *extra]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode:
        print(p.stdout[-2000:], p.stderr[-4000:])
        raise SystemExit(f"layout {name!r} failed (rc {p.returncode})")
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        ms = [json.loads(line) for line in f]
    cfg = json.load(open(os.path.join(workdir, "config.json")))
    batch = cfg["rollout"]["batch_prompts"] * cfg["rollout"]["group_size"]
    steady = ms[2:] if len(ms) > 3 else ms
    med = lambda k: statistics.median(m[k] for m in steady)  # noqa: E731
    toks = statistics.median(batch * m["response_len_mean"] / m["time_rollout_s"] for m in steady)
    return dict(layout=name, devices=n, mesh=mesh, batch=batch, steps=len(ms),
                rollout_s=med("time_rollout_s"), train_s=med("time_train_s"),
                sync_s=med("time_sync_s"), rollout_tokens_per_s=toks,
                response_len=med("response_len_mean"), wall_s=wall,
                first_step_s=ms[0]["time_rollout_s"] + ms[0]["time_train_s"])


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/small.py")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--layout", action="append", required=True)
    ap.add_argument("--workdir", default="/tmp/trace_jax_scaling")
    ap.add_argument("--out", default="experiments/results/scaling")
    ap.add_argument("--cpu", action="store_true", help="fake the devices on the CPU")
    ap.add_argument("--hardware", default="", help="named in the table header")
    a = ap.parse_args(argv)
    rows = []
    for s in a.layout:  # tables rewritten after every layout: a cut-off run keeps what it measured
        rows.append(run_layout(*parse_layout(s), a, extra))
        write(rows, a, extra)


def write(rows, a, extra):
    base = rows[0]
    lines = [f"Hardware: {a.hardware or ('CPU (faked devices)' if a.cpu else 'GPU')}; config "
             f"`{a.config}` {' '.join(extra)}; {a.steps} RL steps, medians after the first two.",
             "", "| layout | mesh | batch | rollout s | rollout tok/s | x | train step s | x | "
             "sync s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['layout']} | {r['mesh']} | {r['batch']} | {r['rollout_s']:.3f} | "
                     f"{r['rollout_tokens_per_s']:.0f} | "
                     f"{r['rollout_tokens_per_s'] / base['rollout_tokens_per_s']:.2f} | "
                     f"{r['train_s']:.3f} | {base['train_s'] / r['train_s']:.2f} | "
                     f"{r['sync_s']:.3f} |")
    text = "\n".join(lines)
    if len(rows) == len(a.layout):
        print(text)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out + ".md", "w") as f:
        f.write(text + "\n")
    with open(a.out + ".json", "w") as f:
        json.dump(dict(config=a.config, extra=extra, steps=a.steps, hardware=a.hardware,
                       rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
