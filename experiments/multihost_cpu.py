"""Multi-process (multi-host style) run of the RL loop on one CPU machine: N processes, each with
D faked CPU devices, joined by ``jax.distributed`` into one N*D-device mesh, run
``trace_jax.main`` exactly as the README's multi-host recipe does on GPU hosts; then the same
job as one process with N*D devices. Prints both runs' per-step metrics and exits non-zero
unless both finished and agree at the first RL step.

What must agree: the first RL step (rewards equal, loss to 1e-3 relative). It comes after the
SFT warm start's updates (``--sft_steps`` at ``tiny.py``'s learning rate) on each layout, one
collective rollout, the rewards gathered across processes, and the loss on the placed batch, so
it checks the multi-process data path and the sharded updates. Later steps are printed and
compared as information only: the two layouts' reductions round differently, AdamW turns a
last-bit difference in a near-zero gradient entry into a parameter difference of up to ~2 * lr
(its first update is about ``lr * sign(g)``), and sampling and top-k routing are discontinuous,
so a near-tie flips a token or an expert and the runs part. That happens between 1 and 4
devices of one process just as between processes (session 36: at ``tiny.py``'s RL rate of 5e-4
one trajectory of 128 differed at step 1 either way). Both runs' RL steps therefore take
``--rl_lr`` (1e-7 by default), which keeps them together longer (the FSDP mesh: all 3 steps;
the expert-parallel mesh: a route flip by step 2, session 36).

    python experiments/multihost_cpu.py [--processes 2] [--devices 2] [--steps 3] \
        [--mesh "(1,-1,1,1)"] [--rl_lr 1e-7] [--workdir /tmp/mh]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = ("reward_mean", "logprob_gap_max", "loss")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _cmd(workdir, steps, mesh, sft, dtype, variant, rl_lr, extra=()):
    return [sys.executable, "-m", "trace_jax.main", "--config=configs/tiny.py",
            f"--config.workdir={workdir}", f"--config.sft.steps={sft}",
            f"--config.model.dtype={dtype}", f"--config.variant={variant}",
            f"--config.train.steps={steps}", f"--config.train.lr={rl_lr}",
            f"--config.mesh.shape={mesh}", "--config.checkpoint.every=100", *extra]


def _env(devices):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def compare(mm: list[dict], ms: list[dict], steps: int) -> tuple[bool, list[str]]:
    """(ok, table lines + verdict) for the multi- and single-process metrics rows: ok when both
    logged ``steps`` steps and step 0 agrees (rewards equal, loss to 1e-3 relative); how many
    steps agree after it is reported, not required (module docstring)."""
    lines = [f"| step | {' | '.join(f'{k} (multi / single)' for k in KEYS)} |",
             "|---" * (len(KEYS) + 1) + "|"]
    same = []
    for x, y in zip(mm, ms):
        lines.append(f"| {x['step']} | " + " | ".join(f"{x[k]:.5f} / {y[k]:.5f}" for k in KEYS)
                     + " |")
        same.append(abs(x["reward_mean"] - y["reward_mean"]) < 1e-6
                    and abs(x["loss"] - y["loss"]) <= 1e-3 * abs(y["loss"]) + 1e-7)
    ok = len(mm) == len(ms) == steps and bool(same) and same[0]
    n_same = (same + [False]).index(False)
    verdict = ("MATCH" if ok else "MISMATCH") + " at the first RL step"
    if len(mm) != steps or len(ms) != steps:
        verdict += f" (logged {len(mm)} / {len(ms)} of {steps} steps)"
    elif n_same == len(same):
        verdict += "; all steps agree"
    elif n_same:
        verdict += (f"; steps 0-{n_same - 1} agree, then the runs part (information only: "
                    f"see the module docstring)")
    return ok, lines + [verdict]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []  # config overrides for both runs
    argv = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--devices", type=int, default=2, help="CPU devices per process")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--sft_steps", type=int, default=60,
                    help="SFT warm start, so that rewards (and advantages) are not all zero")
    ap.add_argument("--variant", default="bf16",
                    help="bf16: no fake-quant in the trainer. Under FP4 QAT (trace) a last-bit "
                         "difference in a reduction can flip an FP4 code, and tens of SFT steps "
                         "turn that into different trajectories even between 1 and 4 devices of "
                         "one process, so only the first steps of such runs can be compared")
    ap.add_argument("--dtype", default="float32",
                    help="activations; bf16 rounding flips from a different reduction order grow "
                         "into visibly different trajectories within tens of SFT steps")
    ap.add_argument("--mesh", default="(1,-1,1,1)")
    ap.add_argument("--rl_lr", type=float, default=1e-7,
                    help="RL learning rate of both runs (module docstring: why small)")
    ap.add_argument("--workdir", default="/tmp/trace_jax_multihost")
    ap.add_argument("--timeout", type=int, default=600)
    a = ap.parse_args(argv)
    shutil.rmtree(a.workdir, ignore_errors=True)
    multi, single = os.path.join(a.workdir, "multi"), os.path.join(a.workdir, "single")

    addr = f"localhost:{_free_port()}"
    procs = []
    for pid in range(a.processes):
        cmd = _cmd(multi, a.steps, a.mesh, a.sft_steps, a.dtype, a.variant, a.rl_lr, (*extra,
            f"--config.distributed.coordinator_address={addr}",
            f"--config.distributed.num_processes={a.processes}",
            f"--config.distributed.process_id={pid}"))
        log = open(os.path.join(a.workdir + f"_p{pid}.log"), "w")
        procs.append((subprocess.Popen(cmd, cwd=ROOT, env=_env(a.devices), stdout=log,
                                       stderr=subprocess.STDOUT), log))
    rcs = []
    for p, log in procs:
        try:
            rcs.append(p.wait(timeout=a.timeout))
        except subprocess.TimeoutExpired:
            p.kill()
            rcs.append(-9)
        log.close()
    if any(rcs):
        for pid in range(a.processes):
            print(f"--- process {pid} (rc {rcs[pid]}):")
            print(open(a.workdir + f"_p{pid}.log").read()[-3000:])
        return 1
    rc = subprocess.run(_cmd(single, a.steps, a.mesh, a.sft_steps, a.dtype, a.variant, a.rl_lr,
                             extra),
                        cwd=ROOT,
                        env=_env(a.processes * a.devices), capture_output=True, text=True,
                        timeout=a.timeout)
    if rc.returncode:
        print(rc.stdout[-2000:], rc.stderr[-3000:])
        return 1
    ok, lines = compare(_metrics(multi), _metrics(single), a.steps)
    print("\n".join(lines[:-1]))
    print(f"{a.processes} processes x {a.devices} CPU devices vs 1 process x "
          f"{a.processes * a.devices}: {lines[-1]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
