"""experiments/repro.py: the run plan (--dry_run) and the aggregation, on a hand-made results dir."""

import json
import math
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "experiments", "repro.py")
N_STEPS = 20  # --steps for the fake runs: the last 10% is the last 2 steps


def _repro(*args):
    out = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out.stdout


def _aggregate_headline(tmp_path, out, seeds: str) -> dict:
    """repro.py's aggregation alone of the tiny headline runs under ``out``; its JSON."""
    res_prefix = str(tmp_path / "res")
    _repro("--config=configs/tiny.py", "--study=headline", f"--seeds={seeds}", f"--out={out}",
           f"--results={res_prefix}", f"--steps={N_STEPS}", "--aggregate_only", "--skip_diagnose")
    with open(res_prefix + "_tiny_headline.json") as f:
        return json.load(f)


def _fake_run(workdir, acc, gap_max, hinted=None, finished=True, sft_steps=None):
    if sft_steps is None:
        from configs import tiny
        sft_steps = tiny.get_config().sft.steps
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
        for step, (a, g) in enumerate(zip(acc, gap_max)):
            f.write(json.dumps({
                "step": step, "reward_mean": a, "accuracy": a, "logprob_gap_max": g,
                "logprob_gap_mean": g / 10, "kl_k3": 1e-3, "routing_agreement": 1.0,
                "code_agreement_hinted": float("nan") if hinted is None else hinted,
                "code_agreement_unhinted": 0.95, "hint_bytes_per_token": 0.0,
                "time_rollout_s": 0.1, "time_train_s": 0.2, "time_sync_s": 0.0}) + "\n")
    if finished:
        os.makedirs(os.path.join(workdir, "checkpoints", str(sft_steps + len(acc))))


def test_dry_run_and_aggregate(tmp_path):
    out = str(tmp_path / "runs")
    # seed 0: accuracy 0.1 then 0.5, 0.7 in the last 10% -> 0.6; seed 1: ... 0.2, 0.4 -> 0.3
    acc0 = [0.1] * (N_STEPS - 2) + [0.5, 0.7]
    acc1 = [0.1] * (N_STEPS - 2) + [0.2, 0.4]
    gap0 = [0.5] * N_STEPS
    gap0[3] = 2.0
    gap1 = [0.25] * N_STEPS
    gap1[7] = 1.0
    _fake_run(os.path.join(out, "headline", "bf16", "seed0"), acc0, gap0)
    _fake_run(os.path.join(out, "headline", "bf16", "seed1"), acc1, gap1, finished=False)

    plan = _repro("--config=configs/tiny.py", "--study=headline", "--seeds=0,1,2", f"--out={out}",
                  f"--steps={N_STEPS}", "--dry_run")
    lines = [l for l in plan.splitlines() if "seed" in l and "/headline/" in l]
    assert len(lines) == 5 * 3
    by = {(l.split()[0], int(l.split()[2])): l for l in lines}
    assert "[finished]" in by[("bf16", 0)]  # all steps + final checkpoint
    assert "[resume]" in by[("bf16", 1)]  # metrics but no final checkpoint
    assert "[new]" in by[("trace", 2)]
    assert f"rl {N_STEPS} steps" in by[("trace", 2)]
    for study in ("hint_layers", "replay_is", "deployment"):
        p = _repro("--config=configs/small.py", f"--study={study}", "--seeds=0", f"--out={out}",
                   "--dry_run")
        assert {"hint_layers": 6, "replay_is": 4, "deployment": 2}[study] == sum(
            1 for l in p.splitlines() if " seed 0 " in l)
    assert "hint_layers=0.25" in _repro("--config=configs/small.py", "--study=hint_layers",
                                        "--seeds=0", f"--out={out}", "--dry_run")

    res_prefix = str(tmp_path / "res")  # the tables' prefix, as _aggregate_headline writes them
    res = _aggregate_headline(tmp_path, out, "0,1")
    bf = res["variants"]["bf16"]
    assert sorted(bf["seeds"]) == [0, 1]
    assert set(res["variants"]) == {"bf16"}  # runs without metrics are left out
    # by hand: train-rollout accuracy per seed 0.6 and 0.3 -> mean 0.45, sample std
    # sqrt(2 * 0.15^2 / 1)
    assert math.isclose(bf["per_seed"]["0"]["train_rollout_accuracy"], 0.6)
    assert math.isclose(bf["per_seed"]["1"]["train_rollout_accuracy"], 0.3)
    assert math.isclose(bf["mean"]["train_rollout_accuracy"], 0.45)
    assert math.isclose(bf["std"]["train_rollout_accuracy"], math.sqrt(2 * 0.15 ** 2))
    # gap max = the run's peak step: 2.0 and 1.0 -> 1.5 +- sqrt(0.5)
    assert math.isclose(bf["mean"]["logprob_gap_max"], 1.5)
    assert math.isclose(bf["std"]["logprob_gap_max"], math.sqrt(0.5))
    # gap mean = mean over steps of logprob_gap_mean
    g0 = sum(gap0) / N_STEPS / 10
    g1 = sum(gap1) / N_STEPS / 10
    assert math.isclose(bf["mean"]["logprob_gap_mean"], (g0 + g1) / 2)
    assert math.isclose(bf["mean"]["step_time_s"], 0.3)
    assert bf["mean"]["code_agreement_hinted"] != bf["mean"]["code_agreement_hinted"]  # NaN
    md = open(res_prefix + "_tiny_headline.md").read()
    row = [l for l in md.splitlines() if l.startswith("| bf16 |")][0]
    assert "| 2 | 0.450 ± 0.212 |" in row
    # the accuracy is the training rollouts' (temperature 1), not a held-out evaluation
    assert md.splitlines()[[i for i, l in enumerate(md.splitlines()) if l.startswith(
        "| bf16 |")][0] - 2].startswith(
        "| variant | seeds | train-rollout acc (T=1, last 2 steps) | "
        "train-rollout reward (T=1, last 2 steps) |")
    assert "final acc" not in md
    assert "1.500 ± 0.707" in row and "–" in row


def _plan_lines(*args):
    return [l for l in _repro(*args).splitlines() if "] " in l]  # one line per run


def test_warm_start_plan_default_is_one_bf16_sft_per_seed(tmp_path):
    out = str(tmp_path / "runs")
    plan = _plan_lines("--config=configs/tiny.py", "--study=headline", "--seeds=0,1",
                       f"--out={out}", "--warm_start", "--dry_run")
    workdir = lambda l: l.split("]")[1].split()[0]  # noqa: E731
    ws = [l for l in plan if "/warm_start/" in workdir(l)]
    assert sorted((l.split()[0], int(l.split()[2])) for l in ws) == [("bf16", 0), ("bf16", 1)]
    assert all("variant=bf16" in l for l in ws)
    rl = [l for l in plan if "/headline/" in workdir(l)]
    assert len(rl) == 10
    for l in rl:
        seed = l.split()[2]
        assert f"init_from={os.path.join(out, 'warm_start', 'bf16', 'seed' + seed)} " in l


def test_warm_start_plan_per_mode_shares_one_sft_per_seed_and_trainer_numerics(tmp_path):
    out = str(tmp_path / "runs")
    plan = _repro("--config=configs/tiny.py", "--study=headline", "--seeds=0,1", f"--out={out}",
                  "--warm_start", "--warm_start_numerics=per_mode", "--dry_run").splitlines()
    plan = [l for l in plan if "] " in l]  # one line per run
    workdir = lambda l: l.split("]")[1].split()[0]  # noqa: E731
    ws = [l for l in plan if "/warm_start/" in workdir(l)]
    assert sorted((l.split()[0], int(l.split()[2])) for l in ws) == [
        (m, s) for m in ("bf16", "fp4_qat", "fp4_qat_w4a16") for s in (0, 1)]
    from configs import tiny
    tiny_sft = tiny.get_config().sft.steps
    assert all(f"sft {tiny_sft} + rl 0 steps" in l for l in ws)
    rl = {(l.split()[0], int(l.split()[2])): l for l in plan if "/headline/" in workdir(l)}
    assert len(rl) == 10 and all("sft 0 + rl" in l for l in rl.values())
    for variant, mode in [("bf16", "bf16"), ("fp4_naive", "bf16"), ("fp4_qat_rtn", "fp4_qat"),
                          ("trace", "fp4_qat"), ("fp4_qat_w4a16", "fp4_qat_w4a16")]:
        assert f"init_from={os.path.join(out, 'warm_start', mode, 'seed1')} " in rl[(variant, 1)]
    only = _repro("--config=configs/tiny.py", "--study=hint_layers", "--seeds=0", f"--out={out}",
                  "--warm_start", "--warm_start_numerics=per_mode", "--phase=warm_start",
                  "--dry_run")
    # --require_warm_start: runs whose warm start has not finished are skipped, none rerun it
    _fake_run(os.path.join(out, "warm_start", "bf16", "seed0"), [], [],
              sft_steps=tiny_sft)  # finished SFT-only run (0 RL steps, final checkpoint)
    with open(os.path.join(out, "warm_start", "bf16", "seed0", "config.json"), "w") as f:
        from experiments import repro
        f.write(repro.make_config(tiny.get_config(), repro.warm_start_spec(
            tiny.get_config(), repro.plan("headline", [0], out, only=["bf16"])[0],
            per_mode=True)).to_json())
    req = _repro("--config=configs/tiny.py", "--study=headline", "--seeds=0,1", f"--out={out}",
                 "--warm_start", "--warm_start_numerics=per_mode", "--require_warm_start",
                 "--dry_run")
    runs = [l for l in req.splitlines() if "] " in l]
    assert sorted((l.split()[0], int(l.split()[2])) for l in runs) == [
        ("bf16", 0), ("fp4_naive", 0)]  # the only runs whose (bf16, seed 0) warm start finished
    assert "warm start" in req and "has not finished" in req
    assert [l.split()[0] for l in only.splitlines() if " seed " in l] == ["fp4_qat"]


def test_evaluate_ptq_packing_and_greedy_eval():
    import jax
    import jax.numpy as jnp
    import numpy as np

    from configs import tiny
    from experiments import evaluate as EV
    from tests._params import init_params, pack_params
    from trace_jax import experiment as X
    from trace_jax import quant as Q

    c = tiny.get_config()
    c.model.n_layers = 2
    c.rollout.update(batch_prompts=4, max_new_tokens=4)
    exp = X.build(c, "bf16")
    params = init_params(exp.cfg, jax.random.key(0))
    fp4 = exp.rollout_numerics.with_mode("fp4_rollout")
    ref = pack_params(params, fp4)  # jitted, as sync_weights runs it
    rtn = EV.pack_params_ptq(params, fp4, "max")
    # plain RTN PTQ is bit-identical to the library's packing (what sync_weights produces)
    for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(rtn)):
        np.testing.assert_array_equal(np.asarray(a.view(jnp.uint8) if a.dtype.itemsize == 1
                                                 else a),
                                      np.asarray(b.view(jnp.uint8) if b.dtype.itemsize == 1
                                                 else b))
    f46 = EV.pack_params_ptq(params, fp4, "four_over_six")
    w = params["layers"]["moe"]["w_up"].astype(jnp.float32)
    err = lambda q: float(jnp.sum(jnp.square(Q.dequantize(q, jnp.float32) - w)))  # noqa: E731
    e_rtn, e_46 = err(rtn["layers"]["moe"]["w_up"]), err(f46["layers"]["moe"]["w_up"])
    assert e_46 < e_rtn  # per block the lower-error scale of the two
    acc, det = EV.evaluate(c, params, fp4, 1, scale_rule="four_over_six", return_details=True)
    assert 0.0 <= acc <= 1.0 and det["n"] == 4 and len(det["completions"]) == 4
    import pytest
    with pytest.raises(ValueError, match="fp4_rollout"):
        EV.evaluate(c, params, exp.rollout_numerics, 1, scale_rule="four_over_six")


def test_post_eval_jobs_and_dispatch(tmp_path, monkeypatch):
    from experiments import repro
    from experiments.repro_parallel import job_post_evals, least_loaded

    assert least_loaded(["0", "1"], ["0", "0", "1"]) == "1"
    assert least_loaded(["0", "1"], ["1"]) == "0" and least_loaded(["0", "1"], []) == "0"

    both = ["headline", "deployment"]
    assert job_post_evals("headline", "trace", "0,1,2", both, "0", False) == ["deploy", "diagnose"]
    assert job_post_evals("headline", "bf16", "0,1,2", both, "0", False) == ["deploy"]
    assert job_post_evals("headline", "fp4_naive", "0,1,2", both, "0", False) == []
    assert job_post_evals("headline", "trace", "1", both, "0", False) == ["deploy"]  # per seed
    assert job_post_evals("headline", "trace", "2,0,1", ["headline"], "0", False) == ["diagnose"]
    assert job_post_evals("headline", "trace", "0", both, "0", True) == ["deploy"]
    assert job_post_evals("headline", "trace", "0", ["headline"], "0", False) == ["diagnose"]
    assert job_post_evals("hint_layers", "trace_hl0.5_mantissa", "0", ["hint_layers"], "0",
                          False) == []

    runs = repro.plan("headline", [0, 1], str(tmp_path), only=["bf16", "trace"])
    calls = []
    monkeypatch.setattr(repro, "deployment_eval", lambda base, r, n: calls.append(("deploy", n)))
    monkeypatch.setattr(repro, "diagnose_final",
                        lambda base, spec: calls.append(("diagnose", spec.variant, spec.seed)))
    repro.post_evaluate(None, runs, ["deploy", "diagnose"], 8)
    assert calls == [("deploy", 8), ("diagnose", "trace", 0)]

    def boom(*a):
        raise RuntimeError("evaluation failed")
    monkeypatch.setattr(repro, "deployment_eval", boom)
    repro.post_evaluate(None, runs, ["deploy"], 8)  # printed, not raised: training is kept
    out = subprocess.run([sys.executable, SCRIPT, "--config=configs/tiny.py", "--post_eval=deplyo",
                          "--dry_run"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode != 0 and "deplyo" in out.stderr


def test_aggregate_leaves_unfinished_runs_out_of_the_means(tmp_path):
    """A run whose metrics stop before its configured RL steps (e.g. killed by a time limit) is
    named in the table, not averaged: its last-10% numbers would come from earlier in training."""
    out = str(tmp_path / "runs")
    full = lambda a: [0.1] * (N_STEPS - 2) + [a, a]  # noqa: E731
    _fake_run(os.path.join(out, "headline", "bf16", "seed0"), full(0.6), [0.5] * N_STEPS)
    _fake_run(os.path.join(out, "headline", "bf16", "seed1"), [0.9] * 12, [0.5] * 12,
              finished=False)  # killed after 12 of 20 steps
    _fake_run(os.path.join(out, "headline", "bf16", "seed2"), full(0.2), [0.5] * N_STEPS,
              finished=False)  # every step logged, final checkpoint missing: its metrics count
    _fake_run(os.path.join(out, "headline", "fp4_naive", "seed0"), [0.9] * 5, [1.0] * 5,
              finished=False)
    # killed in its SFT phase: a workdir (config.json, checkpoints) but no RL step logged
    os.makedirs(os.path.join(out, "headline", "trace", "seed1"))
    res_prefix = str(tmp_path / "res")  # the tables' prefix, as _aggregate_headline writes them
    res = _aggregate_headline(tmp_path, out, "0,1,2")
    bf = res["variants"]["bf16"]
    assert sorted(bf["seeds"]) == [0, 2] and set(bf["per_seed"]) == {"0", "2"}
    assert bf["unfinished"]["1"]["n_steps"] == 12 and bf["unfinished"]["1"]["rl_steps"] == N_STEPS
    acc = [k for k in bf["mean"] if "acc" in k][0]
    assert math.isclose(bf["mean"][acc], 0.4) and bf["n"][acc] == 2
    naive = res["variants"]["fp4_naive"]
    assert naive["seeds"] == [] and naive["unfinished"]["0"]["n_steps"] == 5
    assert naive["mean"][acc] != naive["mean"][acc]  # NaN: no finished run
    md = open(res_prefix + "_tiny_headline.md").read().splitlines()
    row = lambda v: [l for l in md if l.startswith(f"| {v} |")][0]  # noqa: E731
    assert row("bf16").startswith("| bf16 | 2 of 3 finished | 0.400 ± 0.283 |")
    assert row("fp4_naive").startswith("| fp4_naive | 0 of 1 finished | – |")
    note = [l for l in md if l.startswith("Unfinished runs")][0]
    assert f"bf16 seed 1 (12 of {N_STEPS} RL steps)" in note
    assert f"fp4_naive seed 0 (5 of {N_STEPS} RL steps)" in note
    assert row("trace").startswith("| trace | 0 of 1 finished | – |")
    assert f"trace seed 1 (0 of {N_STEPS} RL steps)" in note
    assert res["variants"]["trace"]["curves"]["reward_mean"] == []


def test_aggregate_refuses_runs_of_another_config(tmp_path):
    """A reused --out can hold finished runs of another config (session 41: a deployment study at
    another eval_fraction in the same folder): the tables are refused, naming the run and the
    differing fields, instead of averaging its numbers as this config's."""
    from configs import tiny
    from experiments import repro

    out = str(tmp_path / "runs")
    spec = repro.plan("headline", [0], out, N_STEPS, ["bf16"])[0]
    _fake_run(spec.workdir, [0.5] * N_STEPS, [0.1] * N_STEPS)
    other = tiny.get_config()
    with open(os.path.join(spec.workdir, "config.json"), "w") as f:  # this config's own run
        f.write(repro.make_config(other, spec).to_json_best_effort())
    md = str(tmp_path / "res") + "_tiny_headline.md"
    _aggregate_headline(tmp_path, out, "0")
    assert "| bf16 | 1 |" in open(md).read()
    os.remove(md)
    other.task.eval_fraction = 0.25
    with open(os.path.join(spec.workdir, "config.json"), "w") as f:
        f.write(repro.make_config(other, spec).to_json_best_effort())
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--config=configs/tiny.py", "--study=headline", "--seeds=0",
         f"--out={out}", f"--results={tmp_path / 'res'}", f"--steps={N_STEPS}",
         "--aggregate_only", "--skip_diagnose"], capture_output=True, text=True, cwd=REPO,
        timeout=120)
    assert proc.returncode != 0
    assert "not writing the headline tables" in proc.stderr
    assert "headline/bf16/seed0 holds a run of a different config" in proc.stderr
    assert "(fields ['task'])" in proc.stderr
    assert not os.path.exists(md)


def test_histogram_line_counts_every_differing_code():
    """The code-distance line names all the codes that differ, the bins past distance 6 too (the
    session 41 README quoted the sum of bins 1-6 and so undercounted), and the one-step share."""
    from experiments import repro

    hist = [100, 6, 1, 0, 0, 0, 0, 2, 0, 1]  # 10 of 110 differ, 6 of them one step apart
    md = repro.render_markdown({"header": "# t", "study": "headline", "variants": {},
                                "diagnose": {"_checkpoint": "ck",
                                             "trace": {"code_distance_hist": hist}}}, None)
    line = [ln for ln in md.splitlines() if ln.startswith("- trace:")][0]
    assert line == "- trace: [100, 6, 1, 0, 0, 0, 0] + 3; 10 of 110 codes differ, 0.6000 of them " \
                   "one step apart"
    md = repro.render_markdown({"header": "# t", "study": "headline", "variants": {},
                                "diagnose": {"_checkpoint": "ck",
                                             "trace": {"code_distance_hist": [7, 0, 0]}}}, None)
    line = [ln for ln in md.splitlines() if ln.startswith("- trace:")][0]
    assert line == "- trace: [7, 0, 0] + 0; 0 of 7 codes differ"  # (no "nan of them")


def _legacy_result(header):
    """A results JSON as repro.py wrote it before the train-rollout rename and the unfinished-run
    split: "final_accuracy" / "final_reward" keys, every run with metrics in the means."""
    def summary(acc, n_steps):
        return {"n_steps": n_steps, "final_accuracy": acc, "final_reward": acc,
                "logprob_gap_max": 1.0, "logprob_gap_mean": 0.1, "kl_k3": 1e-3,
                "code_agreement_hinted": float("nan"), "code_agreement_unhinted": 0.95,
                "routing_agreement": 1.0, "hint_bytes_per_token": 0.0, "step_time_s": 0.3}

    def variant(per):
        keys = list(next(iter(per.values())))[1:]
        mean = {k: sum(p[k] for p in per.values()) / len(per) for k in keys}
        return {"seeds": [int(s) for s in per], "per_seed": per, "mean": mean,
                "std": {k: float("nan") for k in keys}, "n": {k: len(per) for k in keys},
                "curves": {"reward_mean": [0.1, 0.2], "accuracy": [0.1, 0.2],
                           "logprob_gap_max": [1.0, 1.0], "logprob_gap_mean": [0.1, 0.1]}}

    return {"study": "headline", "header": header, "diagnose": None, "variants": {
        "bf16": variant({"0": summary(0.6, N_STEPS), "1": summary(0.9, 7)}),
        "trace": variant({"0": summary(0.5, N_STEPS)})}}


def test_render_only_rebuilds_tables_from_a_legacy_json(tmp_path):
    """--render_only rewrites the .md's tables (and the JSON in the current schema) from a results
    JSON without the run directories: old "final_*" keys become train-rollout keys, and runs that
    logged fewer than the configured RL steps (from --steps, else the header's recorded run
    config) leave the means; lines of the .md written by hand stay."""
    header = ("# Reproduction study `headline` on `tiny` config\n\nRecorded run config "
              f"(`config.json` of the runs): task addition, SFT 120 + RL {N_STEPS} steps.")
    prefix = str(tmp_path / "repro_tiny_headline")
    with open(prefix + ".json", "w") as f:
        json.dump(_legacy_result(header), f)
    _repro(f"--render_only={prefix}.json")
    with open(prefix + ".json") as f:
        res = json.load(f)
    bf = res["variants"]["bf16"]
    assert bf["seeds"] == [0] and set(bf["per_seed"]) == {"0"}
    assert bf["unfinished"]["1"]["n_steps"] == 7 and bf["unfinished"]["1"]["rl_steps"] == N_STEPS
    assert bf["mean"]["train_rollout_accuracy"] == 0.6 and "final_accuracy" not in bf["mean"]
    assert "final_reward" not in bf["per_seed"]["0"]
    md = open(prefix + ".md").read()
    assert md.startswith(header + "\n")
    assert "| variant | seeds | train-rollout acc (T=1, last 2 steps) |" in md
    assert "| bf16 | 1 of 2 finished | 0.600 |" in md and "| trace | 1 | 0.500 |" in md
    assert f"bf16 seed 1 (7 of {N_STEPS} RL steps)" in md
    assert "final acc" not in md and "![curves]" not in md  # no PNG beside it: no link
    # the rewritten JSON renders to the same table; --steps overrides the header's steps
    _repro(f"--render_only={prefix}.json")
    assert open(prefix + ".md").read() == md
    with open(prefix + ".json", "w") as f:
        json.dump(_legacy_result(header), f)
    _repro(f"--render_only={prefix}.json", "--steps=7")
    assert "| bf16 | 2 | 0.750 ± 0.212 |" in open(prefix + ".md").read()
    # an existing .md keeps what was written by hand; its table, legend and link are redone
    with open(prefix + ".json", "w") as f:
        json.dump(_legacy_result(header), f)
    with open(prefix + ".md", "w") as f:
        f.write(f"{header}\n\nA note added by hand.\n\n| variant | seeds | final acc |\n"
                "|---|---|---|\n| bf16 | 2 | 0.750 |\n\nPer run: final acc / reward = ...\n\n"
                "![curves](old.png)\n\nA note added after the run.\n")
    open(prefix + ".png", "w").close()
    _repro(f"--render_only={prefix}.json")
    md = open(prefix + ".md").read()
    assert md.startswith(f"{header}\n\nA note added by hand.\n\n| variant | seeds | train-rollout")
    assert "| bf16 | 1 of 2 finished | 0.600 |" in md and "final acc" not in md
    assert md.endswith("RL steps).\n\n![curves](repro_tiny_headline.png)\n\n"
                       "A note added after the run.\n")


def test_failed_runs_are_named_and_fail_the_study(tmp_path):
    """A run that fails before it makes its workdir does not stop the study (the next seed
    runs, the table is written) but the study exits non-zero so a launcher sees it; a
    misspelt --variants name is refused instead of dropped."""
    out, res = str(tmp_path / "runs"), str(tmp_path / "res")
    args = [sys.executable, SCRIPT, "--config=configs/tiny.py", "--study=headline",
            "--seeds=0,1", f"--out={out}", f"--results={res}", "--steps=1", "--skip_diagnose"]
    r = subprocess.run(args + ["--variants=trace", "--config.numerics.hint_sites=()"],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode != 0
    assert "[2/2] trace seed 1" in r.stdout and r.stdout.count("FAILED ") == 2, r.stdout[-2000:]
    assert "2 of 2 runs failed" in r.stderr
    assert os.path.exists(res + "_tiny_headline.md")
    r = subprocess.run(args + ["--variants=bf16,trcae", "--dry_run"], capture_output=True,
                       text=True, cwd=REPO, timeout=120)
    assert r.returncode != 0 and "['trcae'] are not variants of study 'headline'" in r.stderr
