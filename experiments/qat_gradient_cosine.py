"""How far the FP4 QAT gradient is from the BF16 one: per parameter, the cosine between the two
gradients of the SFT loss on one SFT batch at the same params, their norm ratio, and the
fraction of exactly-zero entries.

The QAT trainer differentiates through fake quantization (straight-through values), so on a
healthy model the two gradients point the same way (cosine near 1); a quantizer whose backward
dropped or scaled a path would show as a low cosine or a norm ratio far from 1 on its parameters.

    python experiments/qat_gradient_cosine.py --config=configs/tiny.py \
        [--checkpoint=RUN/checkpoints/STEP] [--variant=trace] [--batch=64] [--out=PREFIX]

Without ``--checkpoint`` the params are a random init. The QAT numerics are the variant's
trainer numerics (``trace``: the config's FP4 sites, RTN here as no hints are given). Writes
``PREFIX.{md,json}`` if ``--out`` is given.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--variant", default="trace")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    sys.path.insert(0, ROOT)
    import jax
    import jax.numpy as jnp
    import numpy as np

    from trace_jax import checkpoint
    from trace_jax import experiment as X
    from trace_jax import model as M
    from trace_jax import numerics as nx
    from trace_jax import run as RUN

    spec = importlib.util.spec_from_file_location("config", a.config)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    config = mod.get_config()
    exp = X.build(config, a.variant)
    cfg = exp.cfg
    params = (checkpoint.load_params(a.checkpoint, config) if a.checkpoint
              else M.init_params(cfg, jax.random.key(0)))
    tokens, loss_mask = RUN.sft_batch(exp, 0, a.batch)
    valid = tokens != exp.tokenizer.pad_id

    def loss(p, num):
        logits = M.forward(p, tokens, cfg=cfg, numerics=num, valid_BxT=valid)[0]
        lp = jax.nn.log_softmax(logits[:, :-1], -1)
        nll = -jnp.take_along_axis(lp, tokens[:, 1:, None], -1)[..., 0]
        m = loss_mask[:, 1:]
        return jnp.sum(nll * m) / jnp.sum(m)

    nums = {"bf16": nx.make_numerics("bf16", cfg.n_layers), "qat": exp.train_numerics}
    if nums["qat"].mode == "bf16":
        raise SystemExit(f"variant {a.variant!r} trains in bf16: nothing to compare")
    grads = {k: jax.jit(jax.grad(lambda p, n=n: loss(p, n)))(params) for k, n in nums.items()}
    losses = {k: float(jax.jit(lambda p, n=n: loss(p, n))(params)) for k, n in nums.items()}
    rows = []
    for (path, gb), gq in zip(jax.tree_util.tree_flatten_with_path(grads["bf16"])[0],
                              jax.tree.leaves(grads["qat"])):
        gb = np.asarray(gb, np.float64).ravel()
        gq = np.asarray(gq, np.float64).ravel()
        nb, nq = np.linalg.norm(gb), np.linalg.norm(gq)
        rows.append(dict(param=jax.tree_util.keystr(path), cosine=float(gb @ gq / (nb * nq)),
                         norm_ratio=float(nq / nb), zero_qat=float(np.mean(gq == 0)),
                         zero_bf16=float(np.mean(gb == 0))))
    lines = [f"# QAT vs BF16 gradient, {os.path.basename(a.config)}, variant {a.variant} "
             f"({nums['qat'].mode} {nums['qat'].fmt})", "",
             f"`python experiments/qat_gradient_cosine.py {' '.join(argv or sys.argv[1:])}`; "
             f"SFT batch of {a.batch}; loss bf16 {losses['bf16']:.5f}, qat {losses['qat']:.5f}",
             "", "| param | cosine | norm qat / bf16 | zero entries qat / bf16 |",
             "|---|---|---|---|"]
    lines += [f"| `{r['param']}` | {r['cosine']:.4f} | {r['norm_ratio']:.3f} | "
              f"{r['zero_qat']:.3f} / {r['zero_bf16']:.3f} |" for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out + ".md", "w") as f:
            f.write(text)
        with open(a.out + ".json", "w") as f:
            json.dump(dict(config=a.config, checkpoint=a.checkpoint, variant=a.variant,
                           losses=losses, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
