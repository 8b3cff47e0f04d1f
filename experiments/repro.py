"""Reproduction studies for issue 9: run every (variant, seed) of a study, resumably, then aggregate.

    python experiments/repro.py --config=configs/small.py --study=headline --seeds=0,1,2 \
        --out=experiments/results/repro [--steps N] [--dry_run] [--aggregate_only]
    python experiments/repro.py --render_only=experiments/results/repro_small_headline.json

Studies (METHOD.md section 7):

* ``headline``: bf16 / fp4_naive / fp4_qat_rtn / fp4_qat_w4a16 / trace.
* ``hint_layers``: trace with numerics.hint_layers 0.25 / 0.5 / 1.0 x hint_kind mantissa / exact.
* ``replay_is``: trace with / without train.routing_replay x train.is_mode token_tis / none.
* ``deployment``: a BF16-trained and a TRACE-trained policy (the headline study's runs, trained
  here if missing), evaluated greedily on held-out prompts with the FP4 rollout engine: BF16 policy
  unquantized (reference), PTQ with plain RTN, PTQ with four-over-six scales; TRACE policy as
  trained (RTN-packed weights, what the trainer's fake-quant saw). See ``experiments/evaluate.py``.

Layout. Each (variant, seed) is one ``trace_jax.run.run(config)`` in ``OUT/<study>/<variant>/seed<k>``
(deployment reuses ``OUT/headline/{bf16,trace}/seed<k>``). A run counts as finished when its
``metrics.jsonl`` holds every RL step and its final checkpoint exists; finished runs are skipped,
unfinished ones resume from their newest checkpoint (run.run does that). A workdir that holds a
*different* config is an error, not a silent reuse.

Aggregation writes ``RESULTS_<tag>_<study>.{md,json,png}`` (``--results`` defaults to ``--out``;
``<tag>`` is the config file's stem, e.g. ``tiny``): a table of mean +- sample std (ddof=1) over
the seeds whose runs finished (metrics of every configured RL step; a run that stopped earlier
is named under the table and kept apart in the JSON, never averaged) of per-run summaries, where
per run

* train-rollout accuracy / reward = mean over the last 10% of RL steps (at least one step) of the
  accuracy / reward of that step's own training rollouts, sampled at temperature 1 on the prompts
  the step trains on: a training signal, not a held-out evaluation (the deployment study's greedy
  held-out accuracy is one);
* log-prob gap max = the largest per-step ``logprob_gap_max`` of the run; gap mean, k3 KL, code
  and routing agreement, hint bytes per token = means over steps (NaN-free steps);
* step time = median over steps of rollout + train + sync seconds (the median drops the compile
  steps at the start and after a resume);

plus reward and log-prob gap curves (seed means) per variant and the code-distance histogram of
``diagnose`` on the final trace checkpoint (seed 0).

``--render_only=RESULTS.json`` rewrites ``RESULTS.json`` in the current schema and the generated
parts of ``RESULTS.md`` (variant table, legend, unfinished-runs line, curves link) from that JSON
alone: no run directories, no config, no plot (the PNG beside it is linked as it is); every other
line of the .md, e.g. notes added after the run, stays. A JSON written before the unfinished-run
split and the train-rollout rename (keys ``final_accuracy`` / ``final_reward``) is read too: its
keys are renamed and its runs are split by their logged steps against ``--steps``, else the RL
steps of the header's recorded run config.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sys
import time
import traceback

import numpy as np
from absl import app, flags
from ml_collections import config_flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A private FlagValues: trace_jax.diagnose (imported for the histogram) defines its own global
# --config flag, which would clash with ours in absl's global registry.
FV = flags.FlagValues()
_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a get_config() file.",
                                          flag_values=FV)
_STUDY = flags.DEFINE_string("study", "headline", "headline | hint_layers | replay_is | deployment",
                             flag_values=FV)
_SEEDS = flags.DEFINE_string("seeds", "0,1,2", "Comma-separated seeds.", flag_values=FV)
_OUT = flags.DEFINE_string("out", "experiments/results/repro", "Root of the run directories.",
                           flag_values=FV)
_RESULTS = flags.DEFINE_string("results", None, "Prefix of the result files (default: --out).",
                               flag_values=FV)
_TAG = flags.DEFINE_string("tag", None, "Tag in the result file names (default: config stem).",
                           flag_values=FV)
_STEPS = flags.DEFINE_integer("steps", None, "Override train.steps (RL steps) for every run.",
                              flag_values=FV)
_VARIANTS = flags.DEFINE_list("variants", None, "Only these variants of the study.", flag_values=FV)
_EVAL_BATCHES = flags.DEFINE_integer("eval_batches", 8, "Held-out batches for deployment eval.",
                                     flag_values=FV)
_DRY = flags.DEFINE_bool("dry_run", False, "Print the planned runs and exit.", flag_values=FV)
_AGG_ONLY = flags.DEFINE_bool("aggregate_only", False, "Only rebuild tables from existing runs.",
                              flag_values=FV)
_RENDER = flags.DEFINE_string(
    "render_only", None, "Path of a results JSON: rewrite it and its .md from it alone (old "
    "schemas upgraded; --steps = the runs' configured RL steps where it does not record them).",
    flag_values=FV)
_NOTE = flags.DEFINE_string("note", "", "Markdown paragraph placed under the table header "
                            "(scale caveats, what is missing).", flag_values=FV)
_DEVICE = flags.DEFINE_string("device", "", "Device named in the table header (default: this "
                              "process's; set it when aggregating elsewhere than the runs ran).",
                              flag_values=FV)
_WARM = flags.DEFINE_bool(
    "warm_start", False, "Run the SFT warm starts once per seed (see --warm_start_numerics) under "
    "OUT/warm_start/ and start every run's RL from their params (the variants of a seed then "
    "share their starting point); default: every run does its own SFT.", flag_values=FV)
_WARM_NUM = flags.DEFINE_enum(
    "warm_start_numerics", "bf16", ["bf16", "per_mode"], "With --warm_start: bf16 = one BF16 SFT "
    "per seed for every variant (the paper starts all variants from one BF16 checkpoint; QAT "
    "begins with RL); per_mode = one SFT per seed and trainer numerics (bf16, fp4_qat, "
    "fp4_qat_w4a16), so QAT variants start from a QAT-trained policy.", flag_values=FV)
_REQ_WARM = flags.DEFINE_bool(
    "require_warm_start", False, "With --warm_start: do not run missing warm starts here; runs "
    "whose warm start has not finished are skipped with a message (parallel launchers run the "
    "warm starts as separate jobs first, and several RL jobs share each one).", flag_values=FV)
_PHASE = flags.DEFINE_enum("phase", "all", ["all", "warm_start"], "warm_start: only run the "
                           "planned runs' shared warm starts (parallel launchers do these first).",
                           flag_values=FV)
_NO_DIAG = flags.DEFINE_bool("skip_diagnose", False, "Skip the code-distance histogram.",
                             flag_values=FV)
_POST = flags.DEFINE_list(
    "post_eval", [], "After training, evaluate this process's finished runs and cache the results "
    "in their workdirs, where aggregation reads them: 'deploy' (the deployment rows of its bf16 / "
    "trace runs), 'diagnose' (the code-distance histogram of its first trace run). Lets parallel "
    "launchers spread the evaluations over their training processes.", flag_values=FV)
POST_EVALS = ("deploy", "diagnose")

HEADLINE = ("bf16", "fp4_naive", "fp4_qat_rtn", "fp4_qat_w4a16", "trace")
STUDIES = ("headline", "hint_layers", "replay_is", "deployment")
# DEPLOYMENT rows: (name, trained variant, numerics mode, PTQ scale rule)
DEPLOY_ROWS = (
    ("bf16_policy/bf16_engine", "bf16", "bf16", "max"),
    ("bf16_policy/fp4_ptq_rtn", "bf16", "fp4_rollout", "max"),
    ("bf16_policy/fp4_ptq_4over6", "bf16", "fp4_rollout", "four_over_six"),
    ("trace_policy/fp4_engine", "trace", "fp4_rollout", "max"),
)


# --warm_start: the variant whose trainer numerics stand for each trainer mode's shared SFT (SFT
# never uses hints, so every trace variant shares the fp4_qat_rtn warm start)
WARM_VARIANT = {"bf16": "bf16", "fp4_qat": "fp4_qat_rtn", "fp4_qat_w4a16": "fp4_qat_w4a16"}


@dataclasses.dataclass(frozen=True)
class RunSpec:
    study: str
    variant: str  # the row name in the study's table
    seed: int
    overrides: tuple  # ((dotted config path, value), ...)
    workdir: str


def study_variants(study: str) -> list[tuple[str, dict]]:
    """(row name, config overrides) of a study's training runs."""
    if study == "headline":
        return [(v, {"variant": v}) for v in HEADLINE]
    if study == "hint_layers":
        return [(f"trace_hl{f}_{k}", {"variant": "trace", "numerics.hint_layers": f,
                                      "numerics.hint_kind": k})
                for k in ("mantissa", "exact") for f in (0.25, 0.5, 1.0)]
    if study == "replay_is":
        return [(f"trace_r3{'on' if r3 else 'off'}_is{is_mode}",
                 {"variant": "trace", "train.routing_replay": r3, "train.is_mode": is_mode})
                for r3 in (True, False) for is_mode in ("token_tis", "none")]
    if study == "deployment":
        return [(v, {"variant": v}) for v in ("bf16", "trace")]
    raise ValueError(f"unknown study {study!r}; expected one of {STUDIES}")


def plan(study: str, seeds, out: str, steps=None, only=None) -> list[RunSpec]:
    runs = []
    run_study = "headline" if study == "deployment" else study  # deployment reuses headline runs
    names = [name for name, _ in study_variants(study)]
    unknown = sorted(set(only or ()) - set(names))
    if unknown:
        raise ValueError(f"--variants {unknown} are not variants of study {study!r}: {names}")
    for name, ov in study_variants(study):
        if only and name not in only:
            continue
        ov = dict(ov)
        if steps is not None:
            ov["train.steps"] = int(steps)
        for s in seeds:
            wd = os.path.join(out, run_study, name, f"seed{s}")
            runs.append(RunSpec(study, name, int(s), tuple(sorted(ov.items())), wd))
    return runs


def warm_start_spec(base, spec: RunSpec, per_mode: bool = False) -> RunSpec:
    """The SFT-only run whose params start ``spec``'s RL under --warm_start, in
    OUT/warm_start/<mode>/seed<k>: one BF16 SFT per seed, or (``per_mode``) one per seed and
    trainer mode. It keeps none of the study's overrides."""
    from trace_jax import experiment as X
    mode = X.get_variant(make_config(base, spec).variant).train_mode if per_mode else "bf16"
    out = os.path.dirname(os.path.dirname(os.path.dirname(spec.workdir)))  # OUT/study/row/seed
    ov = (("train.steps", 0), ("variant", WARM_VARIANT[mode]))
    if per_mode:  # (SFT runs in BF16 by default whatever the variant)
        ov += (("sft.numerics", "trainer"),)
    return RunSpec("warm_start", mode, spec.seed, ov,
                   os.path.join(out, "warm_start", mode, f"seed{spec.seed}"))


def with_warm_start(base, spec: RunSpec, per_mode: bool = False) -> RunSpec:
    """``spec`` starting from its shared warm start's params, without an SFT of its own."""
    ov = dict(spec.overrides, init_from=warm_start_spec(base, spec, per_mode).workdir)
    ov["sft.steps"] = 0
    return dataclasses.replace(spec, overrides=tuple(sorted(ov.items())))


def warm_starts(base, runs: list[RunSpec], per_mode: bool = False) -> list[RunSpec]:
    """The distinct warm starts of ``runs``, in order."""
    return list(dict.fromkeys(warm_start_spec(base, s, per_mode) for s in runs))


def make_config(base, spec: RunSpec):
    c = base.copy_and_resolve_references()
    for path, value in spec.overrides:
        node = c
        *parents, leaf = path.split(".")
        for p in parents:
            node = node[p]
        if leaf not in node:
            raise ValueError(f"config has no field {path!r}")
        if type(node[leaf]) is not type(value) and not (
                isinstance(value, int) and isinstance(node[leaf], float)):
            with node.ignore_type():  # e.g. hint_layers: "last_half" -> 0.25
                node[leaf] = value
        else:
            node[leaf] = value
    c.seed = spec.seed
    c.workdir = spec.workdir
    return c


# --------------------------------------------------------------------------------------------
# Completion / resumption


def read_metrics(workdir: str) -> list[dict]:
    path = os.path.join(workdir, "metrics.jsonl")
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return rows


def is_complete(workdir: str, n_steps: int, total_steps: int | None = None) -> bool:
    """All RL steps 0..n_steps-1 logged and (if ``total_steps`` given) the final checkpoint there."""
    steps = {r.get("step") for r in read_metrics(workdir)}
    if not set(range(n_steps)) <= steps:
        return False
    if total_steps is not None:
        return os.path.isdir(os.path.join(workdir, "checkpoints", str(total_steps)))
    return True


def check_same_config(workdir: str, config) -> None:
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        return
    with open(path) as f:
        old = json.load(f)
    new = json.loads(config.to_json_best_effort())
    if old != new:
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        raise ValueError(f"{workdir} holds a run of a different config (fields {diff}); "
                         f"use another --out or delete it")


def execute(base, runs: list[RunSpec]) -> dict:
    """Run (or resume, or skip) every planned run in this process (compiled steps are shared
    between seeds). Returns {workdir: "done" | "skipped" | "failed: ..."}."""
    from trace_jax import run as RUN

    status = {}
    for i, spec in enumerate(runs):
        config = make_config(base, spec)
        total = config.sft.steps + config.train.steps
        if is_complete(spec.workdir, config.train.steps, total):
            check_same_config(spec.workdir, config)
            print(f"[{i + 1}/{len(runs)}] {spec.variant} seed {spec.seed}: finished, skipping",
                  flush=True)
            status[spec.workdir] = "skipped"
            continue
        check_same_config(spec.workdir, config)
        print(f"[{i + 1}/{len(runs)}] {spec.variant} seed {spec.seed} -> {spec.workdir}", flush=True)
        t0 = time.time()
        try:
            RUN.run(config)
            status[spec.workdir] = "done"
        except Exception as e:  # noqa: BLE001 - keep going; the table marks it
            traceback.print_exc()
            status[spec.workdir] = f"failed: {type(e).__name__}: {e}"[:300]
        os.makedirs(spec.workdir, exist_ok=True)  # (a run can fail before making it)
        with open(os.path.join(spec.workdir, "wall_time_s.txt"), "a") as f:
            f.write(f"{time.time() - t0:.1f}\n")
    return status


# --------------------------------------------------------------------------------------------
# Aggregation


def _nanmean(xs):
    xs = np.asarray([x for x in xs if x is not None], np.float64)
    xs = xs[np.isfinite(xs)]
    return float(xs.mean()) if xs.size else float("nan")


def summarize_run(rows: list[dict]) -> dict:
    """One run's numbers (see the module docstring for the definitions)."""
    rows = sorted(rows, key=lambda r: r["step"])
    n = len(rows)
    k = max(1, math.ceil(0.1 * n))
    last = rows[-k:]
    col = lambda key, rs=rows: [r.get(key) for r in rs]  # noqa: E731
    step_t = [r.get("time_rollout_s", 0) + r.get("time_train_s", 0) + r.get("time_sync_s", 0)
              for r in rows]
    gmax = [x for x in col("logprob_gap_max") if x is not None and np.isfinite(x)]
    return {
        "n_steps": n,  # RL steps logged
        "train_rollout_accuracy": _nanmean(col("accuracy", last)),
        "train_rollout_reward": _nanmean(col("reward_mean", last)),
        "logprob_gap_max": float(max(gmax)) if gmax else float("nan"),
        "logprob_gap_mean": _nanmean(col("logprob_gap_mean")),
        "kl_k3": _nanmean(col("kl_k3")),
        "code_agreement_hinted": _nanmean(col("code_agreement_hinted")),
        "code_agreement_unhinted": _nanmean(col("code_agreement_unhinted")),
        "routing_agreement": _nanmean(col("routing_agreement")),
        "hint_bytes_per_token": _nanmean(col("hint_bytes_per_token")),
        "step_time_s": float(np.median(step_t)) if step_t else float("nan"),
    }


SUMMARY_KEYS = ("train_rollout_accuracy", "train_rollout_reward", "logprob_gap_max",
                "logprob_gap_mean", "kl_k3", "code_agreement_hinted", "code_agreement_unhinted",
                "routing_agreement", "hint_bytes_per_token", "step_time_s")
# "{last}": the window of the train-rollout means, e.g. "last 10 steps" (see last_window)
HEADERS = ("train-rollout acc (T=1, {last})", "train-rollout reward (T=1, {last})", "gap max",
           "gap mean", "k3 KL", "codes hinted", "codes unhinted", "routing agr", "hint B/tok",
           "step s")
# keys of results JSONs written before the rename (read by --render_only)
LEGACY_KEYS = {"final_accuracy": "train_rollout_accuracy", "final_reward": "train_rollout_reward"}


def mean_std(xs) -> tuple[float, float, int]:
    """Mean and sample std (ddof=1; NaN for one value) over the finite values."""
    a = np.asarray([x for x in xs if x is not None], np.float64)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return float("nan"), float("nan"), 0
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else float("nan"), int(a.size)


def fmt_ms(m: float, s: float, digits: int) -> str:
    if not np.isfinite(m):
        return "–"
    if not np.isfinite(s):
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} ± {s:.{digits}f}"


_DIGITS = {"train_rollout_accuracy": 3, "train_rollout_reward": 3, "logprob_gap_max": 3,
           "logprob_gap_mean": 4, "kl_k3": 5, "code_agreement_hinted": 4,
           "code_agreement_unhinted": 4, "routing_agreement": 4, "hint_bytes_per_token": 0,
           "step_time_s": 3}


def configured_rl_steps(base, spec: RunSpec) -> int:
    """The RL steps ``spec``'s run was configured for: its recorded ``config.json``, else the
    planned config (``base`` with the spec's overrides)."""
    config = run_config(spec.workdir)
    return int((config if config is not None else make_config(base, spec)).train.steps)


def seed_stats(per_seed: dict) -> dict:
    """{"mean", "std", "n"} over seeds of every SUMMARY_KEYS entry of ``per_seed``'s summaries."""
    ms = {k: mean_std([p[k] for p in per_seed.values()]) for k in SUMMARY_KEYS}
    return {stat: {k: ms[k][i] for k in SUMMARY_KEYS}
            for i, stat in enumerate(("mean", "std", "n"))}


def aggregate_runs(runs: list[RunSpec], base) -> dict:
    """{variant: {"seeds": [...], "per_seed": {seed: summary}, "unfinished": {seed: summary},
    "mean": {...}, "std": {...}, "n": {...}, "curves": {metric: [seed-mean per step]},
    "curve_seeds": [...]}} for the runs that have metrics.

    A run is finished when its metrics hold each of its configured RL steps
    (:func:`configured_rl_steps`; a missing final checkpoint does not matter here). Only finished
    runs are in "seeds", "per_seed", the means and the stds; a run whose metrics stop earlier
    (killed by a time limit, still running) goes to "unfinished" with its summary over the steps it
    logged, so the table names it instead of averaging numbers from earlier in training. The
    curves average the finished runs (the unfinished ones where none finished), up to the
    shortest; "curve_seeds" lists them. Every summary has "n_steps" (logged) and "rl_steps"
    (configured). A run that started (its workdir exists) but logged no RL step, e.g. one killed
    in its SFT phase, is unfinished with "n_steps" 0, so a row never loses a seed without naming
    it; runs not started yet are left out."""
    by_var: dict[str, dict] = {}
    for spec in runs:
        rows = sorted(read_metrics(spec.workdir), key=lambda r: r["step"])
        if not rows and not os.path.isdir(spec.workdir):
            continue
        n_rl = configured_rl_steps(base, spec)
        summary = dict(summarize_run(rows) if rows else {"n_steps": 0}, rl_steps=n_rl)
        finished = set(range(n_rl)) <= {r["step"] for r in rows}
        v = by_var.setdefault(spec.variant, {"done": {}, "unfinished": {}, "rows": {}})
        v["done" if finished else "unfinished"][spec.seed] = summary
        v["rows"][spec.seed] = rows
    out = {}
    for name, v in by_var.items():
        per = {str(s): p for s, p in v["done"].items()}
        curve_seeds = list(v["done"] or [s for s in v["unfinished"] if v["rows"][s]])
        n = min((len(v["rows"][s]) for s in curve_seeds), default=0)
        curves = {key: [_nanmean([v["rows"][s][i].get(key) for s in curve_seeds])
                        for i in range(n)]
                  for key in ("reward_mean", "accuracy", "logprob_gap_max", "logprob_gap_mean")}
        out[name] = {"seeds": list(v["done"]), "per_seed": per,
                     "unfinished": {str(s): p for s, p in v["unfinished"].items()},
                     **seed_stats(per), "curves": curves, "curve_seeds": curve_seeds}
    return out


LEGEND = ("Per run: train-rollout acc / reward = mean over the last 10% of RL steps of the "
          "accuracy / reward of each step's own training rollouts (sampled at temperature 1 on the "
          "prompts the step trains on; not a held-out evaluation); gap max = the run's largest "
          "per-step max |log pi_train - log pi_rollout|; gap mean, k3 KL, code agreement "
          "(trainer vs rollout FP4 codes at hinted / unhinted sites), routing agreement and hint "
          "bytes per token = means over steps; step s = median rollout + train + sync seconds. "
          "Then mean ± sample std over the seeds whose runs logged every configured RL step; – = "
          "not applicable (no FP4 codes / no hinted sites) or no finished run.")


def seeds_cell(a: dict) -> str:
    """The table's seeds cell: how many runs the row averages, and of how many when some did not
    finish."""
    n_done, n_unf = len(a["seeds"]), len(a.get("unfinished", {}))
    return f"{n_done} of {n_done + n_unf} finished" if n_unf else str(n_done)


def last_window(agg: dict) -> str:
    """The train-rollout window in words: "last k steps" when every finished run of ``agg`` has the
    same configured RL steps (k = 10% of them, rounded up), else "last 10% of steps"."""
    ks = {max(1, math.ceil(0.1 * p["rl_steps"])) for a in agg.values()
          for p in a["per_seed"].values()}
    if len(ks) == 1:
        k = ks.pop()
        return f"last {k} step" + ("s" if k > 1 else "")
    return "last 10% of steps"


def markdown_table(agg: dict, order=None) -> str:
    names = [n for n in (order or agg) if n in agg]
    headers = [h.format(last=last_window(agg)) for h in HEADERS]
    lines = ["| variant | seeds | " + " | ".join(headers) + " |",
             "|---" * (len(HEADERS) + 2) + "|"]
    for n in names:
        a = agg[n]
        cells = [fmt_ms(a["mean"][k], a["std"][k], _DIGITS[k]) for k in SUMMARY_KEYS]
        lines.append(f"| {n} | {seeds_cell(a)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def unfinished_note(agg: dict, order=None) -> str | None:
    """A line naming the runs left out of the means for stopping early, or None if none did."""
    names = [n for n in (order or agg) if n in agg]
    unf = [f"{n} seed {s} ({p['n_steps']} of {p['rl_steps']} RL steps)"
           for n in names for s, p in sorted(agg[n].get("unfinished", {}).items(),
                                              key=lambda sp: int(sp[0]))]
    if not unf:
        return None
    return ("Unfinished runs, left out of the means and stds (their metrics stop before the "
            "configured RL steps): " + ", ".join(unf) + ".")


def plot(agg: dict, diag: dict | None, path: str, title: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not importable; no PNG written", flush=True)
        return False
    n_panels = 3 if diag else 2
    fig, axes = plt.subplots(1, n_panels, figsize=(5.2 * n_panels, 4))
    for name, a in agg.items():
        c = a["curves"]
        label = name if a["seeds"] else f"{name} (unfinished)"
        axes[0].plot(c["reward_mean"], label=label)
        axes[1].plot(c["logprob_gap_max"], label=label)
    axes[0].set(title="reward (mean over seeds)", xlabel="RL step", ylabel="reward")
    axes[1].set(title="max |log-prob gap| (mean over seeds)", xlabel="RL step", yscale="log")
    axes[0].legend(fontsize=7)
    if diag:
        width = 0.8 / max(len(diag), 1)
        for i, (name, h) in enumerate(diag.items()):
            h = np.asarray(h, np.float64)
            frac = h / max(h.sum(), 1)
            axes[2].bar(np.arange(len(h)) + i * width, np.where(frac > 0, frac, np.nan), width, label=name)
        axes[2].set(title="code distance trainer vs rollout", xlabel="code steps",
                    ylabel="fraction", yscale="log", xlim=(-0.5, 6.5))
        axes[2].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def run_config(workdir: str):
    """The config a run actually used (its ``config.json``), or None: aggregation, diagnosis and
    evaluation follow what was run, not the config file as it is now."""
    import ml_collections
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return ml_collections.ConfigDict(json.load(f))


def run_finished(workdir: str):
    """The run's recorded config if the run finished (all RL steps + final checkpoint), else None."""
    config = run_config(workdir)
    if config is None or not is_complete(workdir, config.train.steps,
                                         config.sft.steps + config.train.steps):
        return None
    return config


def diagnose_final(base, spec: RunSpec) -> dict | None:
    """diagnose() on the run's final checkpoint, cached in the workdir."""
    del base
    cache = os.path.join(spec.workdir, "diagnose.json")
    if os.path.exists(cache):
        with open(cache) as f:
            return json.load(f)
    config = run_finished(spec.workdir)
    if config is None:
        return None
    from trace_jax import checkpoint as CK
    from trace_jax import diagnose as D
    res = D.diagnose(config, CK.load_params(spec.workdir, config))
    with open(cache, "w") as f:
        json.dump(res, f)
    return res


def deployment_eval(base, runs: list[RunSpec], n_batches: int) -> dict:
    """{row: {"per_seed": {seed: acc}, "mean", "std"}} for DEPLOY_ROWS, cached per workdir."""
    from experiments import evaluate as EV
    from trace_jax import checkpoint as CK
    from trace_jax import experiment as X

    by = {(s.variant, s.seed): s for s in runs}
    out = {}
    for row, trained, mode, rule in DEPLOY_ROWS:
        per = {}
        for (v, seed), spec in sorted(by.items()):
            if v != trained:
                continue
            config = run_finished(spec.workdir)
            if config is None:
                continue
            cache = os.path.join(spec.workdir, f"deploy_eval_{n_batches}.json")
            done = json.load(open(cache)) if os.path.exists(cache) else {}
            if row not in done:
                params = CK.load_params(spec.workdir, config)
                exp = X.build(config)
                num = exp.rollout_numerics.with_mode(mode)
                done[row] = EV.evaluate(config, params, num, n_batches, scale_rule=rule)
                with open(cache, "w") as f:
                    json.dump(done, f)
            per[str(seed)] = done[row]
        m, s, _ = mean_std(list(per.values()))
        out[row] = {"per_seed": per, "mean": m, "std": s}
    return out


def diagnose_spec(runs: list[RunSpec]) -> RunSpec | None:
    """The run whose final checkpoint the code-distance histogram diagnoses: the plain ``trace``
    row's first seed if present, else the first trace-variant row's."""
    trace_specs = [s for s in runs if s.overrides and dict(s.overrides).get("variant") == "trace"]
    if not trace_specs:
        return None
    return sorted(trace_specs, key=lambda s: (s.variant != "trace", s.variant, s.seed))[0]


def post_evaluate(base, runs: list[RunSpec], what, n_eval_batches: int) -> None:
    """``--post_eval``: run the evaluations ``what`` names on this process's finished runs now, so
    that aggregation only reads their caches. A failure is printed, not raised: training stays."""
    spec = diagnose_spec(runs)
    for name, evaluate in (("deploy", lambda: deployment_eval(base, runs, n_eval_batches)),
                           ("diagnose", lambda: spec is not None and diagnose_final(base, spec))):
        if name in what:
            try:
                evaluate()
            except Exception:  # noqa: BLE001 - aggregation retries what is missing
                traceback.print_exc()


def table_block(result: dict) -> list[str]:
    """The .md lines of the variant table, its legend and the unfinished-runs line."""
    agg = result["variants"]
    order = [n for n, _ in study_variants(result["study"])]
    lines = [*markdown_table(agg, order).splitlines(), "", LEGEND]
    note = unfinished_note(agg, order)
    return lines + (["", note] if note else [])


def refresh_markdown(old: str, result: dict, png: str | None) -> str:
    """``old`` (a results .md) with its generated variant table, legend, unfinished-runs line and
    (``png`` given) curves link rendered anew from ``result``; every other line stays (headers and
    notes edited by hand after the run). ``old`` without a variant table: the whole .md anew."""
    lines = old.splitlines()
    starts = [i for i, l in enumerate(lines) if l.startswith("| variant | seeds |")]
    if not starts:
        return render_markdown(result, png)
    i = j = starts[0]
    while j < len(lines) and lines[j].startswith("|"):
        j += 1
    while (j + 1 < len(lines) and not lines[j]
           and lines[j + 1].startswith(("Per run:", "Unfinished runs"))):
        j += 2
    lines[i:j] = table_block(result)
    if png:
        lines = [f"![curves]({png})" if l.startswith("![curves](") else l for l in lines]
    return "\n".join(lines) + "\n"


def render_markdown(result: dict, png: str | None) -> str:
    """The .md of a results dict (what write_results stores as JSON); ``png``: the plot's file name
    to link, or None."""
    md = [result["header"], "", *table_block(result)]
    if "deployment" in result:
        md += ["", f"Held-out greedy accuracy ({result['eval_batches']} eval batches), FP4 rollout "
                   "engine:", "", "| policy / engine | seeds | accuracy |", "|---|---|---|"]
        for row, d in result["deployment"].items():
            md.append(f"| {row} | {len(d['per_seed'])} | {fmt_ms(d['mean'], d['std'], 3)} |")
    diag_res = result.get("diagnose")
    if diag_res:
        md += ["", f"Code-distance histogram (diagnose on `{diag_res['_checkpoint']}` final "
                   "checkpoint, one held-out batch; counts at distance 0..6, then > 6):", ""]
        for k, h in diagnose_hists(diag_res).items():
            h = [int(x) for x in h]
            mism = sum(h[1:])
            md.append(f"- {k}: {h[:7]} + {sum(h[7:])}; {mism:,} of {sum(h):,} codes differ"
                      + (f", {h[1] / mism:.4f} of them one step apart" if mism else ""))
    if png:
        md += ["", f"![curves]({png})"]
    return "\n".join(md) + "\n"


def diagnose_hists(diag_res: dict | None) -> dict:
    """{row: code-distance histogram} of a diagnose() result, for the rows the table shows."""
    return {k: diag_res[k]["code_distance_hist"] for k in ("fp4_qat_rtn", "trace", "trace+r3")
            if k in (diag_res or {}) and "code_distance_hist" in diag_res[k]}


def _write(prefix: str, result: dict, md: str) -> None:
    with open(prefix + ".md", "w") as f:
        f.write(md)
    with open(prefix + ".json", "w") as f:
        json.dump(result, f, indent=1, default=float)
    print(md, end="", flush=True)


def write_results(base, study: str, runs: list[RunSpec], prefix: str, header: str,
                  n_eval_batches: int, skip_diag: bool) -> dict:
    agg = aggregate_runs(runs, base)
    diag_res = None
    spec = diagnose_spec(runs)
    if not skip_diag and spec is not None:
        try:
            diag_res = diagnose_final(base, spec)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
        if diag_res:
            diag_res["_checkpoint"] = spec.workdir
    result = {"study": study, "header": header, "variants": agg, "diagnose": diag_res}
    if study == "deployment":
        result["deployment"] = deployment_eval(base, runs, n_eval_batches)
        result["eval_batches"] = n_eval_batches
    png = prefix + ".png"
    linked = bool(agg) and plot(agg, diagnose_hists(diag_res) or None, png,
                                header.splitlines()[0].lstrip("# "))
    _write(prefix, result, render_markdown(result, os.path.basename(png) if linked else None))
    return result


def upgrade_result(result: dict, rl_steps: int | None, eval_batches: int) -> dict:
    """A results JSON of any earlier schema in the current one (a current one comes back equal).

    Old summaries' "final_accuracy" / "final_reward" become "train_rollout_accuracy" /
    "train_rollout_reward". Where the JSON predates the unfinished-run split, each run's configured
    RL steps are ``rl_steps``, else the ``+ RL <n> steps`` of the header's recorded run config; runs
    that logged fewer move to "unfinished", and the means and stds are recomputed over the rest.
    The old curves stay as they were, over every seed with metrics ("curve_seeds" says so)."""
    result = json.loads(json.dumps(result))
    recorded = re.search(r"\+ RL (\d+) steps", result.get("header", ""))
    for a in result["variants"].values():
        per = {s: {LEGACY_KEYS.get(k, k): x for k, x in p.items()}
               for s, p in a["per_seed"].items()}
        unfinished = {s: {LEGACY_KEYS.get(k, k): x for k, x in p.items()}
                      for s, p in a.get("unfinished", {}).items()}
        a.setdefault("curve_seeds", [int(s) for s in per])
        for s, p in list(per.items()):
            if "rl_steps" not in p:
                n_rl = rl_steps if rl_steps is not None else (
                    int(recorded.group(1)) if recorded else None)
                if n_rl is None:
                    raise ValueError("the results JSON records no configured RL steps; "
                                     "pass --steps")
                p["rl_steps"] = n_rl
            if p["n_steps"] < p["rl_steps"]:
                unfinished[s] = per.pop(s)
        a["seeds"] = [int(s) for s in per]
        a["per_seed"], a["unfinished"] = per, unfinished
        a.update(seed_stats(per))
    if "deployment" in result:
        result.setdefault("eval_batches", eval_batches)
    return result


def render_only(path: str, rl_steps: int | None, eval_batches: int) -> dict:
    """--render_only: rewrite ``path`` (a results JSON, upgraded to the current schema) and the
    generated parts of the .md beside it (:func:`refresh_markdown`; the whole .md if there is none)
    from the JSON alone, linking the PNG beside it if there is one (it is not redrawn)."""
    with open(path) as f:
        result = upgrade_result(json.load(f), rl_steps, eval_batches)
    prefix = path[:-len(".json")] if path.endswith(".json") else path
    png = os.path.basename(prefix + ".png") if os.path.exists(prefix + ".png") else None
    old = open(prefix + ".md").read() if os.path.exists(prefix + ".md") else ""
    _write(prefix, result, refresh_markdown(old, result, png))
    return result


def main(argv):
    del argv
    from absl import logging
    logging.set_verbosity(logging.WARNING)  # orbax/jax INFO chatter
    if _RENDER.value:
        render_only(_RENDER.value, _STEPS.value, _EVAL_BATCHES.value)
        return
    base = _CONFIG.value
    if base is None:
        raise app.UsageError("--config is required")
    study = _STUDY.value
    if study not in STUDIES:
        raise app.UsageError(f"--study must be one of {STUDIES}")
    seeds = [int(s) for s in _SEEDS.value.split(",") if s.strip()]
    runs = plan(study, seeds, _OUT.value, _STEPS.value, _VARIANTS.value)
    tag = _TAG.value or os.path.splitext(os.path.basename(_config_path()))[0]
    prefix = f"{_RESULTS.value or _OUT.value}_{tag}_{study}"
    bad = [p for p in _POST.value if p not in POST_EVALS]
    if bad:
        raise app.UsageError(f"--post_eval: unknown {bad}; expected some of {POST_EVALS}")
    if _PHASE.value == "warm_start" and not _WARM.value:
        raise app.UsageError("--phase=warm_start needs --warm_start")
    if _WARM.value:  # the shared warm starts run first (runs lists them first)
        per_mode = _WARM_NUM.value == "per_mode"
        ws = warm_starts(base, runs, per_mode)
        if _REQ_WARM.value and _PHASE.value != "warm_start":
            ready = {w for w in ws if run_finished(w.workdir) is not None}
            for w in sorted(set(ws) - ready, key=lambda w: w.workdir):
                print(f"warm start {w.workdir} has not finished: skipping the runs that start "
                      "from it", flush=True)
            runs = [s for s in runs if warm_start_spec(base, s, per_mode) in ready]
            ws = []
        runs = ws if _PHASE.value == "warm_start" else ws + [
            with_warm_start(base, s, per_mode) for s in runs]

    if _DRY.value:
        from trace_jax import experiment as X
        from trace_jax import run as RUN
        print(f"study {study}: {len(runs)} runs, results -> {prefix}.{{md,json,png}}")
        for spec in runs:
            config = make_config(base, spec)
            if not config.init_from:  # (a warm start's directory may not exist yet)
                RUN.validate(config, X.build(config), RUN.train_config(config))
            total = config.sft.steps + config.train.steps
            state = "finished" if is_complete(spec.workdir, config.train.steps, total) else (
                "resume" if read_metrics(spec.workdir) else "new")
            ov = " ".join(f"{k}={v}" for k, v in spec.overrides)
            print(f"  {spec.variant:28s} seed {spec.seed}  sft {config.sft.steps} + rl "
                  f"{config.train.steps} steps  [{state}]  {spec.workdir}  ({ov})")
        if study == "deployment":
            print("  then evaluate: " + ", ".join(r[0] for r in DEPLOY_ROWS))
        return

    failed = {}
    if not _AGG_ONLY.value:
        status = execute(base, runs)
        failed = {k: v for k, v in status.items() if v.startswith("failed")}
        for k, v in failed.items():
            print(f"FAILED {k}: {v}", flush=True)
        if _PHASE.value == "warm_start":
            sys.exit(1 if failed else 0)
        post_evaluate(base, [r for r in runs if r.study != "warm_start"], _POST.value,
                      _EVAL_BATCHES.value)
    header = (f"# Reproduction study `{study}` on `{tag}` config\n\n"
              f"config `{_config_path()}`, seeds {seeds}, "
              f"device {_DEVICE.value or _device()}; mean ± sample std (ddof=1) over seeds.")
    runs = [r for r in runs if r.study != "warm_start"]
    for spec in runs:  # a finished run of another config (an --out reused) must not be averaged
        try:
            check_same_config(spec.workdir, make_config(base, spec))
        except ValueError as e:
            sys.exit(f"not writing the {study} tables: {e}")
    rc = next((c for c in (run_config(r.workdir) for r in runs) if c is not None), None)
    if rc is not None:
        ws = run_config(rc.init_from) if rc.get("init_from", "") else None
        modes = {os.path.basename(os.path.dirname(c.init_from)) for c in
                 (run_config(r.workdir) for r in runs) if c is not None and c.get("init_from", "")}
        shared = ("one BF16 warm start per seed, shared by every variant" if modes == {"bf16"}
                  else "one warm start per seed and trainer numerics, shared by the variants")
        sft = f"SFT {ws.sft.steps} steps ({shared})" if ws is not None else f"SFT {rc.sft.steps}"
        from trace_jax.tasks.dataset import EVAL_FRACTION

        held = rc.task.get("eval_fraction", EVAL_FRACTION)
        unit = "problems" if rc.task.get("split_by", "prompt") == "problem" else "prompts"
        header += (f"\n\nRecorded run config (`config.json` of the runs): task {rc.task.name} "
                   f"{dict(rc.task.kwargs)} ({held:g} of its {unit} held out), model "
                   f"{rc.model.n_layers} layers d_model "
                   f"{rc.model.d_model} {rc.model.n_experts} experts top-{rc.model.top_k}, "
                   f"{sft} + RL {rc.train.steps} steps at lr {rc.train.lr:g}, "
                   f"{rc.rollout.batch_prompts} prompts x {rc.rollout.group_size} samples per step.")
    if _NOTE.value:
        header += "\n\n" + _NOTE.value
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    write_results(base, study, runs, prefix, header, _EVAL_BATCHES.value, _NO_DIAG.value)
    if failed:  # (the tables list them as unfinished; a launcher reads the exit status)
        sys.exit(f"{len(failed)} of {len(runs)} runs failed (the FAILED lines above)")


def _config_path() -> str:
    return config_flags.get_config_filename(FV["config"])


def _device() -> str:
    import jax
    d = jax.devices()[0]
    return f"{d.platform}:{d.device_kind}"


if __name__ == "__main__":
    def _parse(argv):
        flags.FLAGS.mark_as_parsed()  # absl/logging read the global registry; ours is FV
        if any(a in ("-h", "--help", "--helpfull") for a in argv[1:]):
            print(__doc__ + "\nFlags:\n" + FV.get_help())
            sys.exit(0)
        return FV(argv)

    app.run(main, flags_parser=_parse)
