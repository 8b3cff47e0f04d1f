"""Train-rollout alignment metrics (METHOD.md section 6), all jit-able and masked to the positions
that matter.

* log-prob gap: max and mean |log pi_train - log pi_rollout| over response tokens;
* k3 KL estimate of KL(rollout || train): mean of r - log r - 1 with r = pi_train / pi_rollout;
* max |p_train - p_rollout|; share of IS ratios r outside [1/cap, cap];
* FP4 code agreement (hinted and unhinted sites separately) and the code-distance histogram;
* routing agreement: share of (token, layer) whose top-k expert set matches: the trainer's
  routers' own choice against the rollout's, also under routing replay (where the trainer
  computes with the rollout's experts; before session 33 the metric compared those with
  themselves and read 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from trace_jax import e2m1
from trace_jax import quant as Q


def logprob_metrics(train_lp_BxT, rollout_lp_BxT, mask_BxT, is_cap: float = 5.0) -> dict:
    m = mask_BxT.astype(jnp.float32)
    n = jnp.maximum(jnp.sum(m), 1.0)
    d = train_lp_BxT - rollout_lp_BxT
    gap = jnp.where(mask_BxT, jnp.abs(d), 0.0)
    r_log = jnp.where(mask_BxT, d, 0.0)
    r = jnp.exp(r_log)
    pgap = jnp.where(mask_BxT, jnp.abs(jnp.exp(train_lp_BxT) - jnp.exp(rollout_lp_BxT)), 0.0)
    out_of_cap = (r > is_cap) | (r < 1.0 / is_cap)
    return {
        "logprob_gap_max": jnp.max(gap),
        "logprob_gap_mean": jnp.sum(gap) / n,
        "kl_k3": jnp.sum((r - r_log - 1.0) * m) / n,
        "prob_gap_max": jnp.max(pgap),
        "is_clip_frac": jnp.sum(out_of_cap * m) / n,
    }


def _signed(h: Q.Hint):
    return e2m1.signed_index(Q.unpacked_codes(h))


def code_stats(trainer: dict, rollout: dict, valid_BxT,
               names) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(equal codes, compared codes, distance histogram [15]) over ``names``, counting only
    positions where ``valid`` (codes are exact Hints with leading [B, T]).

    Each site is counted exactly in int32 (up to 2**31 codes per site); the per-site counts are
    summed as float32 (relative error < 1e-6 per site added). Counting in float32 directly
    stalls: a float32 bin stops growing at 2**24 (XLA's GPU scatter-add even at 2**25)."""
    f32 = jnp.float32
    eq, tot = f32(0), f32(0)
    hist = jnp.zeros(Q.MAX_CODE_DISTANCE + 1, f32)
    for name in names:
        a, b = _signed(trainer[name]), _signed(rollout[name])
        if a.size >= 2**31:  # (static shapes: checked at trace time)
            raise ValueError(f"site {name}: {a.size} codes overflow the int32 count; measure "
                             "code statistics on a smaller batch")
        w = valid_BxT.reshape(valid_BxT.shape + (1,) * (a.ndim - 2)).astype(jnp.int32)
        w = jnp.broadcast_to(w, a.shape)
        eq += jnp.sum((a == b) * w, dtype=jnp.int32).astype(f32)
        tot += jnp.sum(w, dtype=jnp.int32).astype(f32)
        hist += Q.distance_counts(jnp.abs(a - b), w).astype(f32)
    return eq, tot, hist


def code_metrics(trainer_codes: dict, rollout_codes: dict, valid_BxT, hinted: frozenset) -> dict:
    """Code agreement at hinted and unhinted sites, the distance histogram and the share of
    mismatches one step apart (NaN where nothing was compared or nothing mismatched)."""
    return code_metrics_and_counts(trainer_codes, rollout_codes, valid_BxT, hinted)[0]


def code_metrics_and_counts(trainer_codes: dict, rollout_codes: dict, valid_BxT,
                            hinted: frozenset) -> tuple[dict, dict]:
    """:func:`code_metrics` and, for each ratio among them, the count it divides by (to combine
    the metrics of several micro-batches, weighted)."""
    names = sorted(set(trainer_codes) & set(rollout_codes))
    h_names = [n for n in names if n in hinted]
    u_names = [n for n in names if n not in hinted]
    eq_h, n_h, hist_h = code_stats(trainer_codes, rollout_codes, valid_BxT, h_names)
    eq_u, n_u, hist_u = code_stats(trainer_codes, rollout_codes, valid_BxT, u_names)
    nan = jnp.float32(jnp.nan)
    hist = hist_h + hist_u
    mism = jnp.sum(hist[1:])
    return {
        "code_agreement_hinted": jnp.where(n_h > 0, eq_h / jnp.maximum(n_h, 1), nan),
        "code_agreement_unhinted": jnp.where(n_u > 0, eq_u / jnp.maximum(n_u, 1), nan),
        "code_distance_hist": hist,
        "mismatch_one_step_frac": jnp.where(mism > 0, hist[1] / jnp.maximum(mism, 1), nan),
    }, {"code_agreement_hinted": n_h, "code_agreement_unhinted": n_u,
        "mismatch_one_step_frac": mism}


def routing_agreement(a_LxBxTxK, b_LxBxTxK, valid_BxT) -> jax.Array:
    """Share of valid (layer, token) whose expert sets match (slots are sorted by expert id)."""
    same = jnp.all(a_LxBxTxK == b_LxBxTxK, axis=-1)  # L,B,T
    w = jnp.broadcast_to(valid_BxT[None], same.shape).astype(jnp.float32)
    return jnp.sum(same * w) / jnp.maximum(jnp.sum(w), 1.0)
