"""How long to warm-start a config with SFT before RL: the held-out accuracy of *sampled*
(temperature-1, what GRPO sees) and greedy completions after each block of SFT steps.

    python experiments/calibrate_sft.py --config=configs/small.py --max_steps=400 --every=25

GRPO learns only from groups whose rewards differ, so a useful warm start leaves sampled accuracy
well inside (0, 1) -- roughly 0.2-0.6. Prints a markdown table; ``--json`` writes it too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

from absl import app, flags
from ml_collections import config_flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a get_config() file.")
_MAX = flags.DEFINE_integer("max_steps", 400, "SFT steps in all.")
_EVERY = flags.DEFINE_integer("every", 25, "Evaluate after every this many steps.")
_BATCHES = flags.DEFINE_integer("eval_batches", 4, "Held-out batches per evaluation.")
_JSON = flags.DEFINE_string("json", "", "Write the table as JSON here.")


def main(argv):
    del argv
    import jax
    import numpy as np

    from trace_jax import experiment as X
    from trace_jax import rollout as R
    from trace_jax import run as RUN
    from trace_jax import tasks
    from trace_jax import train as TR

    config = _CONFIG.value
    config.sft.steps = _MAX.value  # the LR schedule of a run with this many SFT steps
    exp = X.build(config)
    num = dataclasses.replace(exp.train_numerics.with_mode("bf16"), hinted=frozenset())  # evals
    sft_num = RUN.sft_numerics(config, exp)  # the warm start's own (sft.numerics)
    opt = RUN.sft_optimizer(config)
    params = RUN.initial_state(exp, config, RUN.train_config(config))["params"]
    ts = TR.TrainState(params, opt.init(params))
    key = jax.random.key(config.seed)

    def accuracy(temperature):
        sampling = dataclasses.replace(exp.sampling, temperature=temperature)
        rp = R.sync_weights(ts.params, num, dtype=exp.cfg.dtype)
        hits = []
        for b in range(_BATCHES.value):
            ex = exp.eval_data.batch(b)
            p, lens = X.encode_prompts(exp, ex)
            ro = R.generate(rp, p, lens, jax.random.fold_in(key, b), cfg=exp.cfg, numerics=num,
                            sampling=sampling, capture_hints=False)
            hits += [exp.task.is_correct(e, tasks.extract_answer(c))
                     for e, c in zip(ex, X.completions(exp, ro))]
        return float(np.mean(hits))

    rows = []
    print("| SFT steps | loss | sampled acc (T=1) | greedy acc | s |")
    print("|---|---|---|---|---|")
    t0 = time.perf_counter()
    for step in range(_MAX.value + 1):
        if step % _EVERY.value == 0:
            r = dict(step=step, loss=float(loss) if step else float("nan"),
                     sampled=accuracy(config.rollout.temperature), greedy=accuracy(0.0),
                     seconds=time.perf_counter() - t0)
            rows.append(r)
            print(f"| {step} | {r['loss']:.3f} | {r['sampled']:.3f} | {r['greedy']:.3f} | "
                  f"{r['seconds']:.0f} |", flush=True)
        if step == _MAX.value:
            break
        toks, mask = RUN.sft_batch(exp, step, config.sft.batch_size)
        ts, loss, _ = TR.sft_step(ts, toks, mask, cfg=exp.cfg, numerics=sft_num, opt=opt)
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    flags.mark_flags_as_required(["config"])
    app.run(main)
