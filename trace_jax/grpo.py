"""GRPO objective pieces: group-normalised advantages, the clipped policy-gradient loss with
truncated importance sampling between trainer and rollout probabilities, and loss aggregation.

Letters: B trajectories (= prompts x G), T positions, G group size.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

IS_MODES = ("token_tis", "seq_mask", "none")
LOSS_AGGS = ("token_mean", "seq_mean", "dr_grpo")
TRUNCATED = ("score", "fail", "mask")


@dataclasses.dataclass(frozen=True)
class GRPOConfig:
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.28
    is_mode: str = "token_tis"  # token-level truncated IS | sequence masking (MIS) | none
    is_cap: float = 5.0
    adv_std_norm: bool = True  # False = Dr.GRPO-style (no std normalisation)
    loss_agg: str = "token_mean"  # token_mean | seq_mean | dr_grpo (sum / (B * max_len))
    kl_coef: float = 0.0  # k3 KL to the reference policy
    # Responses cut at max_new_tokens (no EOS): score their text like any other (TRL's default),
    # fail them (reward 0), or mask them (out of the loss and its divisor; DAPO's overlong filter).
    truncated: str = "score"

    def __post_init__(self):
        if self.is_mode not in IS_MODES:
            raise ValueError(f"train.is_mode must be one of {IS_MODES}, got {self.is_mode!r}")
        if self.loss_agg not in LOSS_AGGS:
            raise ValueError(f"train.loss_agg must be one of {LOSS_AGGS}, got {self.loss_agg!r}")
        if self.truncated not in TRUNCATED:
            raise ValueError(f"train.truncated must be one of {TRUNCATED}, got {self.truncated!r}")
        if self.is_cap <= 1:
            raise ValueError(f"train.is_cap must be > 1, got {self.is_cap}")
        if self.clip_eps_low <= 0 or self.clip_eps_high <= 0:
            # (the ratio is 1 in value, so eps > 0 leaves the gradient alone; at 0 the clip's
            # and the min's ties would split it: 0.75x or 0.625x)
            raise ValueError(f"train.clip_eps_low/high must be > 0, got {self.clip_eps_low} / "
                             f"{self.clip_eps_high}")


def group_advantages(rewards_B, group_size: int, std_norm: bool = True, eps: float = 1e-6):
    """A_i = (r_i - mean_group) / (std_group + eps); without std_norm just r_i - mean_group.
    Trajectories of one prompt are consecutive (see ``rollout.repeat_prompts``). A group of
    equal rewards gets exactly 0: the rewards are taken relative to the group's first before
    the mean (the same advantages in exact arithmetic), since the f32 mean of e.g. eight 0.1s
    is not 0.1, and dividing that rounding error by its own std would give every sample of the
    group a push of the same sign."""
    B = rewards_B.shape[0]
    if B % group_size:
        raise ValueError(f"{B} trajectories are not a whole number of groups of {group_size}")
    r = rewards_B.reshape(B // group_size, group_size).astype(jnp.float32)
    c = r - r[:, :1]
    a = c - jnp.mean(c, axis=1, keepdims=True)
    if std_norm:
        a = a / (jnp.std(c, axis=1, keepdims=True) + eps)
    return a.reshape(B)


def rewards_and_advantages(rewards_B, finished_B, group_size: int, cfg: GRPOConfig):
    """(rewards, advantages, in_loss) [B] after ``cfg.truncated``: ``fail`` sets an unfinished
    response's reward to 0 before the group baseline; ``mask`` keeps its reward in the baseline
    but leaves it out of the loss (``in_loss`` False, advantage 0), so it adds no gradient and
    its tokens do not dilute the others' in the loss's divisor; ``score`` changes nothing.
    ``in_loss`` is None (every trajectory) unless masking."""
    rewards = jnp.asarray(rewards_B, jnp.float32)
    finished = jnp.asarray(finished_B, bool)
    if finished.shape != rewards.shape:
        raise ValueError(f"finished {finished.shape} does not match rewards {rewards.shape}")
    if cfg.truncated == "fail":
        rewards = jnp.where(finished, rewards, 0.0)
    adv = group_advantages(rewards, group_size, cfg.adv_std_norm)
    if cfg.truncated == "mask":
        return rewards, jnp.where(finished, adv, 0.0), finished
    return rewards, adv, None


def is_weights(old_lp_BxT, rollout_lp_BxT, mask_BxT, cfg: GRPOConfig):
    """Importance weights correcting trainer-vs-rollout mismatch (no gradient).

    token_tis: w_t = min(pi_train(t) / pi_rollout(t), cap). seq_mask: 1 for sequences whose
    geometric-mean ratio lies in [1/cap, cap], else 0. none: 1."""
    log_r = jnp.where(mask_BxT, old_lp_BxT - rollout_lp_BxT, 0.0)
    if cfg.is_mode == "token_tis":
        w = jnp.minimum(jnp.exp(log_r), cfg.is_cap)
    elif cfg.is_mode == "seq_mask":
        n = jnp.maximum(jnp.sum(mask_BxT, axis=1, keepdims=True), 1)
        g = jnp.sum(log_r, axis=1, keepdims=True) / n
        keep = jnp.abs(g) <= jnp.log(cfg.is_cap)
        w = jnp.broadcast_to(keep.astype(jnp.float32), log_r.shape)
    else:
        w = jnp.ones_like(log_r)
    return jax.lax.stop_gradient(w)


def policy_loss(logp_BxT, rollout_lp_BxT, adv_B, mask_BxT, cfg: GRPOConfig, max_len: int,
                ref_lp_BxT=None):
    """Clipped-ratio policy-gradient loss with IS correction, and its parts.

    One optimizer update per rollout batch, so the PPO "old" policy is the current trainer
    policy with gradients stopped (ratio = 1 in value, gradient of log pi)."""
    m = mask_BxT.astype(jnp.float32)
    old = jax.lax.stop_gradient(logp_BxT)
    ratio = jnp.exp(logp_BxT - old)
    a = adv_B[:, None]
    pg = -jnp.minimum(ratio * a, jnp.clip(ratio, 1 - cfg.clip_eps_low, 1 + cfg.clip_eps_high) * a)
    w = is_weights(old, rollout_lp_BxT, mask_BxT, cfg)
    per_tok = w * pg
    if cfg.kl_coef and ref_lp_BxT is not None:
        # (0 outside the mask: exp of a pad position's difference could overflow, and inf * 0
        # would make the loss NaN)
        d = jnp.where(mask_BxT, ref_lp_BxT - logp_BxT, 0.0)
        per_tok = per_tok + cfg.kl_coef * (jnp.exp(d) - d - 1)
    loss = aggregate(per_tok, m, cfg.loss_agg, max_len)
    return loss, {"is_weight_mean": jnp.sum(w * m) / jnp.maximum(jnp.sum(m), 1.0)}


def aggregate(per_tok_BxT, m_BxT, how: str, max_len: int):
    if how == "token_mean":
        return jnp.sum(per_tok_BxT * m_BxT) / jnp.maximum(jnp.sum(m_BxT), 1.0)
    if how == "seq_mean":  # over the sequences with loss tokens
        n_B = jnp.sum(m_BxT, axis=1)
        per_seq = jnp.sum(per_tok_BxT * m_BxT, axis=1) / jnp.maximum(n_B, 1.0)
        return jnp.sum(per_seq) / jnp.maximum(jnp.sum(n_B > 0), 1.0)
    return jnp.sum(per_tok_BxT * m_BxT) / (per_tok_BxT.shape[0] * max_len)


def entropy(logits_BxTxV, mask_BxT):
    """Mean per-token entropy of the policy over masked positions (logits at t-1 predict t)."""
    lp = jax.nn.log_softmax(logits_BxTxV[:, :-1].astype(jnp.float32), axis=-1)
    h = -jnp.sum(jnp.exp(lp) * lp, axis=-1)
    h = jnp.pad(h, ((0, 0), (1, 0)))
    m = mask_BxT.astype(jnp.float32)
    return jnp.sum(h * m) / jnp.maximum(jnp.sum(m), 1.0)
