"""Held-out accuracy of a policy under a deployment numerics (the deployment study of issue 9).

``evaluate(config, params, numerics, n_batches, scale_rule="max") -> accuracy``: greedy
(temperature 0) generation with ``trace_jax.rollout.generate`` on ``exp.eval_data`` batches
0..n_batches-1 (one sample per prompt), scored with the task's ``is_correct``.

Post-training quantization. For ``numerics.mode == "fp4_rollout"`` the expert weights are packed
here with :func:`pack_params_ptq` (``trace_jax.model.pack_params`` with a ``scale_rule``):
``"max"`` is plain RTN (what ``rollout.sync_weights`` produces), ``"four_over_six"`` picks per block
the amax->6 or amax->4 scale with the lower squared error. Activations and K/V are quantized by the
engine itself (RTN, per-token scales) in both cases.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from trace_jax import experiment as X
from trace_jax import model as M
from trace_jax import numerics as nx
from trace_jax import rollout as R
from trace_jax import tasks


@functools.partial(jax.jit, static_argnames=("numerics", "scale_rule", "dtype"))
def pack_params_ptq(params: dict, numerics: nx.Numerics, scale_rule: str = "max",
                    dtype=jnp.bfloat16) -> dict:
    """Rollout params with the expert weights quantized under ``scale_rule`` (PTQ baselines)."""
    return M.pack_params(params, numerics, dtype, scale_rule)


def evaluate(config, params, numerics: nx.Numerics, n_batches: int, *,
             scale_rule: str = "max", return_details: bool = False):
    """Greedy accuracy on ``n_batches`` held-out batches under ``numerics`` (its mode picks the
    engine: ``bf16`` or ``fp4_rollout``; its ``attention_p`` the decode attention's P, so pass
    one derived from ``X.build(config).rollout_numerics`` to follow
    ``rollout.attention_p_precision``)."""
    if numerics.mode not in ("bf16", "fp4_rollout"):
        raise ValueError(f"evaluate runs the rollout engine: numerics mode must be 'bf16' or "
                         f"'fp4_rollout', got {numerics.mode!r}")
    if scale_rule != "max" and numerics.mode != "fp4_rollout":
        raise ValueError(f"scale_rule={scale_rule!r} only applies to fp4_rollout")
    if n_batches < 1:
        raise ValueError(f"n_batches must be >= 1, got {n_batches}")
    exp = X.build(config)
    sampling = dataclasses.replace(exp.sampling, temperature=0.0, top_k=0, top_p=1.0)
    rparams = pack_params_ptq(params, numerics, scale_rule, dtype=exp.cfg.dtype)  # (as the run's)
    key = jax.random.key(0)  # unused at temperature 0
    correct, comps_all, prompts_seen = [], [], set()
    for b in range(n_batches):
        examples = exp.eval_data.batch(b)
        prompts_seen.update(e.prompt for e in examples)
        prompts, lens = X.encode_prompts(exp, examples)
        ro = R.generate(rparams, prompts, lens, key, cfg=exp.cfg, numerics=numerics,
                        sampling=sampling, capture_hints=False)
        comps = X.completions(exp, ro)
        correct += [float(exp.task.is_correct(e, tasks.extract_answer(c)))
                    for e, c in zip(examples, comps)]
        comps_all += comps
    acc = float(np.mean(correct))
    if return_details:
        # (batches draw held-out problems with replacement: a small split repeats prompts)
        return acc, {"n": len(correct), "distinct_prompts": len(prompts_seen),
                     "completions": comps_all}
    return acc
