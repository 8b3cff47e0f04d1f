"""Train-rollout mismatch diagnosis: the check to run before switching a policy to FP4 rollout.

``python -m trace_jax.diagnose --config=configs/tiny.py [--checkpoint=DIR] [--json]``

Generates one batch with the rollout engine, recomputes it with the trainer's forward for each
variant, and reports METHOD.md section 6's metrics:

* ``bf16``: BF16 rollout vs BF16 trainer (the engine-drift floor);
* ``fp4_naive``: FP4 rollout vs BF16 trainer;
* ``fp4_qat_rtn``: FP4 rollout vs round-to-nearest fake-quant trainer;
* ``trace``: FP4 rollout vs hint-guided trainer; ``fp4_qat_rtn+r3`` / ``trace+r3``: the RTN /
  hint-guided trainer with routing replay (what replay alone buys, and with the hints).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from trace_jax import experiment as X
from trace_jax import metrics as MT
from trace_jax import model as M
from trace_jax import numerics as nx
from trace_jax import rollout as R



def trainer_pass(params, ro: R.Rollout, exp: X.Experiment, numerics, *, hints: bool, replay: bool,
                 attention_p: str | None = None):
    """Trainer log-probs, codes and experts for a rollout's trajectories. The trainer's attention
    rounds P as the rollout's decode attention does (``attention_p`` overrides: "f32" is a
    trainer that does not replay a bf16 P)."""
    g = ro.guidance
    hint_dict = numerics.trainer_hints(g.hints) if hints else {}
    p = exp.rollout_numerics.attention_p if attention_p is None else attention_p
    return _trainer_pass(params, ro.tokens, hint_dict, g.experts, g.recorded, cfg=exp.cfg,
                         numerics=numerics.with_attention_p(p, "trainer attention_p"),
                         hints=hints, replay=replay)


@nx.model_jit(static_argnames=("cfg", "numerics", "hints", "replay"))
def _trainer_pass(params, tokens, hint_dict, experts, recorded, *, cfg, numerics, hints, replay):
    """(compiled once per model, numerics and variant, not per call: on a GPU a fresh compile
    per batch took ~30 s of each diagnosis)"""
    logits, aux, _ = M.forward(
        params, tokens, cfg=cfg, numerics=numerics,
        hints=hint_dict if hints else None,
        forced_experts_LxBxTxK=experts if replay else None,
        hint_experts_LxBxTxK=experts if hints else None,
        hint_valid_BxT=recorded if hints else None,
        capture_codes=True)
    return R.token_logprobs(logits, tokens), aux.codes, aux.experts


def diagnose(config, params=None, *, seed_step: int = 0, hint_cost: bool = True,
             trainer_attention_p: str | None = None) -> dict:
    """Metrics per variant (dict of dicts of floats / lists); with ``hint_cost`` also the
    ``"hint_cost"`` entry (hint bytes per token, and the capture's share of rollout time, which
    compiles and times two more rollouts). ``trainer_attention_p``: see :func:`trainer_pass`."""
    exp = X.build(config, "trace")
    if params is None:
        params = M.init_params(exp.cfg, jax.random.key(config.seed))
    examples = exp.eval_data.batch(seed_step)
    prompts, lens = X.encode_prompts(exp, examples)
    prompts, lens = R.repeat_prompts(prompts, lens, exp.group_size)
    key = jax.random.key(config.seed + 1)
    out = {}

    def report(name, ro, t_lp, t_codes, t_experts, hinted):
        mask = ro.response_mask
        m = MT.logprob_metrics(t_lp, ro.logprobs, mask)
        valid = ro.guidance.recorded
        if ro.guidance.hints and t_codes:
            m.update(MT.code_metrics(t_codes, ro.guidance.hints, valid, hinted))
        m["routing_agreement"] = MT.routing_agreement(t_experts, ro.guidance.experts, valid)
        out[name] = jax.tree.map(lambda a: np.asarray(a).tolist(), m)

    # BF16 rollout vs BF16 trainer
    bf = exp.rollout_numerics.with_mode("bf16")
    kl = X.rollout_kernel_layout(config)  # the weights run.py's rollout gets
    ro = R.generate(R.sync_weights(params, bf, dtype=exp.cfg.dtype, kernel_layout=kl), prompts,
                    lens, key, cfg=exp.cfg, numerics=bf, sampling=exp.sampling,
                    capture_hints=False)
    lp, codes, ex = trainer_pass(params, ro, exp, bf, hints=False, replay=False,
                                 attention_p=trainer_attention_p)
    report("bf16", ro, lp, codes, ex, frozenset())

    # One FP4 rollout, recording exact codes everywhere, shared by the FP4 variants.
    fp4 = exp.rollout_numerics
    rp = R.sync_weights(params, fp4, dtype=exp.cfg.dtype, kernel_layout=kl)
    rec = fp4.recording_all_codes()
    ro = R.generate(rp, prompts, lens, key, cfg=exp.cfg, numerics=rec, sampling=exp.sampling)
    trace_num = exp.train_numerics
    rows = [
        ("fp4_naive", fp4.with_mode("bf16"), False, False),
        ("fp4_qat_rtn", dataclasses.replace(trace_num, hinted=frozenset()), False, False),
        ("fp4_qat_rtn+r3", dataclasses.replace(trace_num, hinted=frozenset()), False, True),
        ("trace", trace_num, True, False),
        ("trace+r3", trace_num, True, True),
    ]
    for name, num, hints, replay in rows:
        lp, codes, ex = trainer_pass(params, ro, exp, num, hints=hints, replay=replay,
                                     attention_p=trainer_attention_p)
        report(name, ro, lp, codes, ex, trace_num.hinted)

    if not hint_cost:
        return out
    # Hint cost: bytes per token and capture time (second call of each: compile excluded).
    real = R.generate(rp, prompts, lens, key, cfg=exp.cfg, numerics=fp4, sampling=exp.sampling)
    times = {}
    for capture in (False, True):
        for _ in range(2):
            t0 = time.perf_counter()
            jax.block_until_ready(R.generate(rp, prompts, lens, key, cfg=exp.cfg, numerics=fp4,
                                             sampling=exp.sampling, capture_hints=capture))
            times[capture] = time.perf_counter() - t0
    out["hint_cost"] = {
        "hint_bytes_per_token": R.hint_bytes_per_token(real.guidance.hints),
        "expected_bytes_per_token": R.expected_hint_bytes_per_token(exp.cfg, fp4),
        "rollout_s_without_hints": times[False],
        "rollout_s_with_hints": times[True],
        "capture_overhead_frac": times[True] / times[False] - 1,
        "device": jax.devices()[0].device_kind,
        "compiler_options": dict(nx.COMPILER_OPTIONS),  # the model jits' (TRACE_JAX_* env)
    }
    return out


def format_table(res: dict) -> str:
    cols = ["logprob_gap_max", "logprob_gap_mean", "kl_k3", "prob_gap_max", "is_clip_frac",
            "code_agreement_hinted", "code_agreement_unhinted", "mismatch_one_step_frac",
            "routing_agreement"]
    lines = ["| variant | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, m in res.items():
        if name == "hint_cost":
            continue
        vals = [m.get(c) for c in cols]
        lines.append(f"| {name} | " + " | ".join(
            "-" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.4g}"
            for v in vals) + " |")
    hc = res.get("hint_cost")
    if hc:
        lines.append("")
        lines.append(f"hint bytes/token: {hc['hint_bytes_per_token']:.0f} "
                     f"(formula {hc['expected_bytes_per_token']:.0f}); capture overhead "
                     f"{hc['capture_overhead_frac']:+.1%} of rollout time on {hc['device']}")
        if "compiler_options" in hc:  # (results written before session 37 lack it)
            lines.append(f"model jits' XLA options: {hc['compiler_options']}")
    for name, m in res.items():
        if "code_distance_hist" in m:
            h = [int(x) for x in m["code_distance_hist"]]
            lines.append(f"code-distance histogram ({name}): {h[:5]} ...")
    return "\n".join(lines)


def check_checkpoint_config(path: str, config) -> None:
    """ValueError naming the fields, if the run that saved the checkpoint at ``path`` (its
    config.json, in the run directory at or above ``path``) trained another model, numerics or
    tokenizer than ``config``: loading checks only the params' shapes, so an MXFP4 run would be
    diagnosed under NVFP4 numerics without a word. No config.json: not checked."""
    from trace_jax import run as RUN

    p = os.path.normpath(path)
    for d in (p, os.path.dirname(p), os.path.dirname(os.path.dirname(p))):
        if os.path.exists(os.path.join(d, "config.json")):
            break
    else:
        return
    with open(os.path.join(d, "config.json")) as f:
        saved = RUN._flat(json.load(f))
    now = RUN._flat(json.loads(config.to_json_best_effort()))
    diff = sorted(k for k in saved.keys() & now.keys()
                  if k.startswith(("model.", "numerics.", "tokenizer.")) and saved[k] != now[k])
    if diff:
        raise ValueError(
            f"the run in {d} trained with another config than --config ("
            + ", ".join(f"{k}: {saved[k]!r} there, {now[k]!r} here" for k in diff[:5])
            + "); pass its own config (its config.json lists it, e.g. --config.numerics.fmt=...)")


def main(argv):
    del argv
    config = _CONFIG.value
    params = None
    if _CHECKPOINT.value:
        from trace_jax import checkpoint
        check_checkpoint_config(_CHECKPOINT.value, config)
        params = checkpoint.load_params(_CHECKPOINT.value, config)
    res = diagnose(config, params)
    print(json.dumps(res) if _JSON.value else format_table(res))


def _define_flags():
    """Flags are defined only when run as a program, so importing this module (tests, notebooks,
    other commands) never collides with another module's --config."""
    global _CONFIG, _JSON, _CHECKPOINT
    _CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a get_config() file.")
    _CHECKPOINT = flags.DEFINE_string(
        "checkpoint", None, "The params to diagnose: a run directory (its newest readable "
        "checkpoint), its checkpoints/ folder, or one checkpoint (checkpoints/<step>).")
    _JSON = flags.DEFINE_bool("json", False, "Print one JSON object instead of a table.")
    flags.mark_flags_as_required(["config"])


if __name__ == "__main__":
    from trace_jax.cli import parse_flags

    _define_flags()
    app.run(main, flags_parser=parse_flags)
