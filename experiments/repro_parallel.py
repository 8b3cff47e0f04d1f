"""Run reproduction studies as parallel processes on one or more GPUs, then aggregate.

One process per (study, variant) runs that variant's seeds in turn (``experiments/repro.py
--variants V``: compiled steps are shared between seeds), or one per (study, variant, seed) with
``--per_seed`` (more processes in flight); up to ``--parallel`` processes run at once, each
started on the least-loaded of ``--gpus`` with a GPU memory fraction (two to three training
processes per H200 is what ran well; eight per 2-GPU host ran SFT ~20x slower). With
``--warm_start`` the SFT warm starts (one BF16 SFT per seed, or per seed and trainer numerics:
``repro.py --warm_start``) run first, as processes of their own, and every RL run starts from
one. The training jobs then evaluate their own finished runs (``repro.py --post_eval``: the
deployment rows of the bf16 / trace jobs, the code-distance histogram of the trace job), so the
evaluations run in parallel and the aggregation (``repro.py --aggregate_only``, each study,
deployment last) mostly reads caches. Runs are resumable (``repro.py`` skips finished runs and
resumes unfinished ones), so a study can be completed over several calls.

    python experiments/repro_parallel.py --config=configs/small.py \
        --studies headline,hint_layers,replay_is,deployment --seeds 0,1,2 --ablation_seeds 0 \
        --gpus 0,1 --parallel 16 --out /tmp/repro --results experiments/results/repro \
        [-- --config.sft.steps=100 ...]   # config overrides passed to every repro.py call
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

TRAINING_STUDIES = ("headline", "hint_layers", "replay_is")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []  # config overrides for repro.py
    argv = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--studies", default="headline")
    ap.add_argument("--seeds", default="0,1,2", help="seeds of the headline study")
    ap.add_argument("--ablation_seeds", default="0", help="seeds of hint_layers / replay_is")
    ap.add_argument("--gpus", default="0")
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--mem_fraction", type=float, default=0.0,
                    help="GPU memory fraction per process (default 0.9 / processes per GPU, "
                         "rounded up)")
    ap.add_argument("--out", default="/tmp/trace_jax_repro")
    ap.add_argument("--results", default="experiments/results/repro")
    ap.add_argument("--steps", type=int, default=0, help="override train.steps (0: config's)")
    ap.add_argument("--note", default="")
    ap.add_argument("--cpu", action="store_true", help="no GPUs: run on the CPU")
    ap.add_argument("--no_aggregate", action="store_true")
    ap.add_argument("--skip_diagnose", action="store_true", help="no code-distance histogram")
    ap.add_argument("--per_seed", action="store_true", help="one process per (variant, seed)")
    ap.add_argument("--deadline_s", type=float, default=0,
                    help="stop training processes still running this many seconds after the "
                         "start (their logged steps are kept; runs resume later), then aggregate")
    ap.add_argument("--warm_start", action="store_true",
                    help="shared SFT warm starts first (repro.py --warm_start)")
    ap.add_argument("--warm_start_numerics", default="bf16", choices=["bf16", "per_mode"],
                    help="repro.py --warm_start_numerics: one BF16 SFT per seed (default) or one "
                         "per seed and trainer numerics")
    a = ap.parse_args(argv)

    from experiments import repro

    studies = [s for s in a.studies.split(",") if s]
    bad = [s for s in studies if s not in repro.STUDIES]
    if bad:
        raise SystemExit(f"unknown studies {bad}; expected {repro.STUDIES}")
    gpus = [g for g in a.gpus.split(",") if g]
    per_gpu = -(-max(1, a.parallel) // max(1, len(gpus)))  # processes on the busiest GPU
    frac = a.mem_fraction or 0.9 / per_gpu
    jobs = []  # (study, variant, seeds)
    for study in studies:
        train_study = "headline" if study == "deployment" else study
        if train_study not in TRAINING_STUDIES:
            continue
        seeds = a.seeds if train_study == "headline" else a.ablation_seeds
        # (deployment trains only the headline variants it evaluates: bf16 and trace)
        for name, overrides in repro.study_variants(study):
            for s in (seeds.split(",") if a.per_seed else [seeds]):
                job = (train_study, name, s, overrides["variant"])
                if job not in jobs:
                    jobs.append(job)

    common = [sys.executable, "experiments/repro.py", f"--config={a.config}", f"--out={a.out}",
              "--skip_diagnose", *extra]
    if a.steps:
        common.append(f"--steps={a.steps}")
    if a.warm_start:
        common += ["--warm_start", f"--warm_start_numerics={a.warm_start_numerics}"]
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()

    def post_eval(study, variant, seeds):
        return job_post_evals(study, variant, seeds, studies,
                              min(a.seeds.split(","), key=int), a.skip_diagnose)

    def past_deadline():
        return bool(a.deadline_s) and time.time() - t0 > a.deadline_s

    def launch(jobs, phase):
        running, failed = [], []  # running: (process, log, name, gpu)
        for study, variant, seeds, _ in jobs:
            while len(running) >= a.parallel and not past_deadline():
                running = _reap(running, failed)
                time.sleep(1)
            if past_deadline():
                print(f"  deadline: not started {study}/{variant} seeds {seeds}", flush=True)
                continue
            env = dict(os.environ, PYTHONUNBUFFERED="1",
                       XLA_PYTHON_CLIENT_MEM_FRACTION=f"{frac:.3f}")
            gpu = least_loaded(gpus, [r[3] for r in running])
            if a.cpu:
                env["JAX_PLATFORMS"] = "cpu"
            else:
                env["CUDA_VISIBLE_DEVICES"] = gpu
            name = f"{phase}_{study}_{variant}_s{seeds.replace(',', '-')}"
            log = open(os.path.join(a.out, f"log_{name}.txt"), "a")
            # each job's own table is scratch (in --out); the aggregation writes the real ones
            cmd = common + [f"--study={study}", f"--variants={variant}", f"--seeds={seeds}",
                            f"--results={os.path.join(a.out, 'job_' + name)}"]
            if phase == "warm_start":
                cmd.append("--phase=warm_start")
            else:
                if a.warm_start:  # a failed warm start skips its runs (no jobs racing to redo it)
                    cmd.append("--require_warm_start")
                if post_eval(study, variant, seeds):
                    cmd.append(f"--post_eval={','.join(post_eval(study, variant, seeds))}")
            p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            running.append((p, log, name, gpu))
            print(f"[{time.time() - t0:6.0f}s] started {name}", flush=True)
        while running:
            running = _reap(running, failed)
            if past_deadline():
                for p, _, name, _ in running:
                    p.terminate()
                    print(f"  deadline: stopped {name}", flush=True)
                for p, *_ in running:
                    p.wait()
                running = _reap(running, [])
            time.sleep(1)
        print(f"[{time.time() - t0:6.0f}s] {phase} done; failed: {failed or 'none'}", flush=True)
        return failed

    failed = []
    if a.warm_start:  # one process per (trainer mode, seed): the first job that needs it
        from trace_jax import experiment as X
        firsts = {}
        for study, variant, seeds, v in jobs:
            mode = X.get_variant(v).train_mode if a.warm_start_numerics == "per_mode" else "bf16"
            for s in seeds.split(","):
                firsts.setdefault((mode, s), (study, variant, s, v))
        failed += launch(list(firsts.values()), "warm_start")
    failed += launch(jobs, "rl")
    if a.no_aggregate:
        return 1 if failed else 0
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if a.cpu:
        env["JAX_PLATFORMS"] = "cpu"
    else:
        env["CUDA_VISIBLE_DEVICES"] = gpus[0]
    rc = 0
    for study in sorted(studies, key=lambda s: s == "deployment"):
        seeds = a.seeds if study in ("headline", "deployment") else a.ablation_seeds
        cmd = [sys.executable, "experiments/repro.py", f"--config={a.config}", f"--out={a.out}",
               f"--results={a.results}", f"--study={study}", f"--seeds={seeds}", f"--note={a.note}",
               *extra]
        cmd.append("--aggregate_only")  # (deployment evaluates the finished headline policies)
        if a.steps:
            cmd.append(f"--steps={a.steps}")
        if a.warm_start:
            cmd += ["--warm_start", f"--warm_start_numerics={a.warm_start_numerics}"]
        if study != "headline" or a.skip_diagnose:
            cmd.append("--skip_diagnose")
        print(f"[{time.time() - t0:6.0f}s] aggregating {study}", flush=True)
        rc |= subprocess.run(cmd, cwd=ROOT, env=env).returncode
    return 1 if (failed or rc) else 0


def job_post_evals(study: str, variant: str, seeds: str, studies, first_seed: str,
                   skip_diagnose: bool) -> list[str]:
    """The evaluations (``repro.py --post_eval``) the training job of (study, variant, seeds)
    runs after its seeds, for the aggregation of ``studies`` to read: the deployment rows of the
    headline's bf16 / trace jobs, and the code-distance histogram of the headline trace job whose
    seeds include ``first_seed`` (the lowest: the run the aggregation diagnoses)."""
    from experiments import repro

    what = []
    if study != "headline":
        return what
    if "deployment" in studies and variant in {row[1] for row in repro.DEPLOY_ROWS}:
        what.append("deploy")
    if ("headline" in studies and variant == "trace" and not skip_diagnose
            and first_seed in seeds.split(",")):
        what.append("diagnose")
    return what


def least_loaded(gpus: list[str], busy: list[str]) -> str:
    """The GPU running the fewest of our processes (the first such): every GPU then holds at most
    ceil(parallel / len(gpus)) processes, which is what the memory fraction is sized for."""
    return min(gpus, key=busy.count)


def _reap(running, failed):
    keep = []
    for entry in running:
        p, log, name, _ = entry
        if p.poll() is None:
            keep.append(entry)
            continue
        log.close()
        if p.returncode:
            failed.append(name)
        print(f"  finished {name} (rc {p.returncode})", flush=True)
    return keep


if __name__ == "__main__":
    sys.exit(main())
