"""How far the FP4 QAT gradient is from the BF16 one: per parameter, the cosine between the two
gradients of the SFT loss on one SFT batch at the same params, their norm ratio, and the
fraction of exactly-zero entries.

The QAT trainer differentiates through fake quantization (straight-through values), so on a
healthy model the two gradients point the same way (cosine near 1); a quantizer whose backward
dropped or scaled a path would show as a low cosine or a norm ratio far from 1 on its parameters.

    python experiments/qat_gradient_cosine.py --config=configs/tiny.py \
        [--checkpoint=RUN/checkpoints/STEP] [--variant=trace] [--batch=64] [--out=PREFIX]

The loss is the trainer's own SFT loss (``train.sft_loss``: cross-entropy on the solution tokens
plus ``sft.router_aux_coef`` times the load-balancing loss).

Without ``--checkpoint`` the params are a random init. The QAT numerics are the variant's
trainer numerics (``trace``: the config's FP4 sites, RTN here as no hints are given). Writes
``PREFIX.{md,json}`` if ``--out`` is given.
"""

from __future__ import annotations

import json
import os
import sys

from absl import app, flags
from ml_collections import config_flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a get_config() file.")
_CKPT = flags.DEFINE_string("checkpoint", None, "A run's checkpoints/<step> (default: random init).")
_VARIANT = flags.DEFINE_string("variant", "trace", "Whose trainer numerics to compare with BF16.")
_BATCH = flags.DEFINE_integer("batch", 64, "SFT batch rows.")
_OUT = flags.DEFINE_string("out", None, "Write PREFIX.md and PREFIX.json.")


def main(argv):
    del argv
    import jax
    import numpy as np

    from trace_jax import checkpoint
    from trace_jax import experiment as X
    from trace_jax import model as M
    from trace_jax import run as RUN
    from trace_jax import train as TR

    config = _CONFIG.value
    exp = X.build(config, _VARIANT.value)
    cfg = exp.cfg
    params = (checkpoint.load_params(_CKPT.value, config) if _CKPT.value
              else M.init_params(cfg, jax.random.key(0)))
    tokens, loss_mask = RUN.sft_batch(exp, 0, _BATCH.value)
    nums = {"bf16": exp.train_numerics.with_mode("bf16"), "qat": exp.train_numerics}
    if nums["qat"].mode == "bf16":
        raise app.UsageError(f"variant {_VARIANT.value!r} trains in bf16: nothing to compare")
    aux = float(config.sft.router_aux_coef)
    runs = {k: jax.jit(jax.value_and_grad(
        lambda p, n=n: TR.sft_loss(p, tokens, loss_mask, cfg=cfg, numerics=n,
                                   router_aux_coef=aux)))(params) for k, n in nums.items()}
    losses = {k: float(v[0]) for k, v in runs.items()}
    rows = []
    for (path, gb), gq in zip(jax.tree_util.tree_flatten_with_path(runs["bf16"][1])[0],
                              jax.tree.leaves(runs["qat"][1])):
        gb = np.asarray(gb, np.float64).ravel()
        gq = np.asarray(gq, np.float64).ravel()
        nb, nq = np.linalg.norm(gb), np.linalg.norm(gq)
        rows.append(dict(param=jax.tree_util.keystr(path), cosine=float(gb @ gq / (nb * nq)),
                         norm_ratio=float(nq / nb), zero_qat=float(np.mean(gq == 0)),
                         zero_bf16=float(np.mean(gb == 0))))
    cmd = " ".join(["python experiments/qat_gradient_cosine.py"] + sys.argv[1:])
    lines = [f"# QAT vs BF16 gradient, {os.path.basename(flags.FLAGS['config'].config_filename)}, "
             f"variant {_VARIANT.value} ({nums['qat'].mode} {nums['qat'].fmt})", "",
             f"`{cmd}`; SFT batch of {_BATCH.value}; SFT loss bf16 {losses['bf16']:.5f}, "
             f"qat {losses['qat']:.5f}", "",
             "| param | cosine | norm qat / bf16 | zero entries qat / bf16 |", "|---|---|---|---|"]
    lines += [f"| `{r['param']}` | {r['cosine']:.4f} | {r['norm_ratio']:.3f} | "
              f"{r['zero_qat']:.3f} / {r['zero_bf16']:.3f} |" for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if _OUT.value:
        with open(_OUT.value + ".md", "w") as f:
            f.write(text)
        with open(_OUT.value + ".json", "w") as f:
            json.dump(dict(command=cmd, checkpoint=_CKPT.value, variant=_VARIANT.value,
                           losses=losses, rows=rows), f, indent=1)


if __name__ == "__main__":
    flags.mark_flags_as_required(["config"])
    app.run(main)
