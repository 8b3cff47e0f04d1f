"""The trainer: optimizer, the supervised warm-start step and the GRPO step with hint-guided FP4
QAT, routing replay and IS correction. Steps are jit-compiled with donated state; a step whose
loss or gradients are non-finite leaves params and optimizer state untouched and says so.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from trace_jax import distributed as D
from trace_jax import grpo
from trace_jax import metrics as MT
from trace_jax import model as M
from trace_jax import numerics as nx
from trace_jax import rollout as R


class TrainState(NamedTuple):
    params: dict
    opt_state: optax.OptState


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    steps: int = 100  # RL steps
    lr: float = 1e-4
    warmup_steps: int = 5
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    micro_batches: int = 1  # gradient accumulation over this many slices of the batch
    routing_replay: bool = True  # R3: replay the rollout's experts in the training forward
    router_aux_coef: float = 1e-3
    router_z_coef: float = 1e-4
    max_version_diff: int = 0  # k: the rollout of step s samples with the params of step s - k
    max_nonfinite_steps: int = 3  # stop after this many consecutive non-finite steps
    grpo: grpo.GRPOConfig = grpo.GRPOConfig()

    def __post_init__(self):
        if self.max_nonfinite_steps < 1:
            raise ValueError(f"train.max_nonfinite_steps must be >= 1 (the run stops at that "
                             f"many non-finite steps in a row), got {self.max_nonfinite_steps}")


def learning_rate_schedule(lr: float, warmup: int, steps: int):
    """The learning rate of update i (0-based): linear warmup lr * (i + 1) / warmup over the first
    `warmup` updates (so the first update is not a no-op, and update warmup - 1 takes lr), then
    cosine decay to lr / 10 at update steps - 1."""
    warmup = max(warmup, 1)  # (0 and 1 alike: the first update takes lr)
    base = optax.warmup_cosine_decay_schedule(0.0, lr, warmup, max(steps, warmup + 1),
                                              end_value=lr * 0.1)
    return lambda count: base(count + 1)


@functools.lru_cache(maxsize=64)
def make_optimizer(lr: float, warmup: int, steps: int, weight_decay: float, grad_clip: float):
    """AdamW with warmup-cosine decay and global-norm clipping. Cached: equal settings give the
    same (stateless) object, so jitted steps taking it as a static argument are not recompiled
    for every run of a process."""
    sched = learning_rate_schedule(lr, warmup, steps)
    return optax.chain(optax.clip_by_global_norm(grad_clip),
                       optax.adamw(sched, b1=0.9, b2=0.95, weight_decay=weight_decay))


class Batch(NamedTuple):
    """One RL batch, trajectory-major (every leaf with a leading B axis is split for micro-batches)."""

    tokens: jax.Array  # [B, T]
    response_mask: jax.Array  # [B, T]
    valid: jax.Array  # [B, T] positions inside the trajectory
    rollout_logprobs: jax.Array  # [B, T]
    advantages: jax.Array  # [B]
    hints: dict  # trainer hints (site name -> Hint [B, T, ...])
    experts: jax.Array  # [B, L, T, k]
    recorded: jax.Array  # [B, T]
    rollout_codes: dict  # exact codes at every site (for metrics) or {}
    in_loss: jax.Array | None = None  # [B] bool: trajectories in the policy loss; None = all


def loss_mask(batch: Batch):
    """[B, T] positions whose tokens the policy loss (and its KL term) sees: the response tokens
    of the trajectories ``in_loss``. Metrics use ``response_mask``, every trajectory."""
    if batch.in_loss is None:
        return batch.response_mask
    return batch.response_mask & batch.in_loss[:, None]


def check_alignment(tokens_BxT, guidance: R.HintBatch):
    """Raise if the hint batch was not recorded for these tokens (shifted or foreign batch)."""
    want = D.to_host(R.fingerprint(tokens_BxT))  # sharded (possibly multi-host) -> numpy
    got = D.to_host(guidance.fingerprint)
    bad = np.nonzero(want != got)[0]
    if bad.size:
        raise ValueError(f"hint batch does not belong to these trajectories: fingerprint mismatch "
                         f"for {bad.size} of {len(want)} rows (first: {bad[:5].tolist()})")


def make_batch(ro: R.Rollout, advantages, train_numerics: nx.Numerics, record_codes: bool,
               in_loss=None) -> Batch:
    check_alignment(ro.tokens, ro.guidance)
    g = ro.guidance
    t = jnp.arange(ro.tokens.shape[1])[None]
    valid = t < (ro.prompt_lens + ro.response_lens)[:, None]
    hints = train_numerics.trainer_hints(g.hints) if train_numerics.hinted else {}
    return Batch(ro.tokens, ro.response_mask, valid, ro.logprobs, advantages, hints,
                 jnp.swapaxes(g.experts, 0, 1), g.recorded, g.hints if record_codes else {},
                 None if in_loss is None else jnp.asarray(in_loss, bool))


def _split_micro(batch, n: int):
    """Stack batch-leading leaves into [n, B/n, ...]; scalars and leaves of leading size 1 (a
    per-tensor global scale) are shared constants; any other leading size is an error."""
    B = batch.tokens.shape[0]
    if B % n:
        raise ValueError(f"batch of {B} trajectories is not divisible by train.micro_batches={n}")
    paths, treedef = jax.tree_util.tree_flatten_with_path(batch)
    leaves = [l for _, l in paths]
    bad = [(jax.tree_util.keystr(p), l.shape) for p, l in paths
           if l.ndim > 0 and l.shape[0] not in (B, 1)]
    if bad:
        raise ValueError(f"batch leaves {bad[:3]} have a leading size other than the batch's {B} "
                         f"trajectories (hints or experts from another rollout?)")
    is_b = [l.ndim > 0 and l.shape[0] == B for l in leaves]
    xs = [l.reshape((n, B // n) + l.shape[1:]) for l, b in zip(leaves, is_b) if b]

    def rebuild(xs_i):
        it = iter(xs_i)
        return treedef.unflatten([next(it) if b else l for l, b in zip(leaves, is_b)])

    return xs, rebuild


def _apply_if_finite(opt, state: TrainState, loss, grads):
    finite = jnp.isfinite(loss) & jnp.all(jnp.stack(
        [jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)]))
    grads = jax.tree.map(lambda g: jnp.where(finite, g, 0), grads)
    updates, new_opt = opt.update(grads, state.opt_state, state.params)
    new_params = optax.apply_updates(state.params, updates)
    keep = lambda n, o: jnp.where(finite, n, o)  # noqa: E731
    return TrainState(jax.tree.map(keep, new_params, state.params),
                      jax.tree.map(keep, new_opt, state.opt_state)), finite


def _reduce_metrics(ms: dict, ws: dict) -> dict:
    """The full batch's metrics from the micro-batches' [n] values: a metric with weights ``ws``
    (the count its mean divides by, per micro-batch) is their weighted mean, NaN where every
    count is 0, so it does not depend on train.micro_batches; *_max keys take the max;
    histograms add; any other metric (the router terms) is the mean over micro-batches."""
    out = {}
    for k, v in ms.items():
        if k in ws:
            w = ws[k]
            total = jnp.sum(w)
            out[k] = jnp.where(total > 0, jnp.sum(jnp.where(w > 0, v, 0.0) * w)
                               / jnp.maximum(total, 1.0), jnp.nan)
        elif k.endswith("_max"):
            out[k] = jnp.max(v)
        elif k.endswith("_hist"):
            out[k] = jnp.sum(v, axis=0)
        else:
            out[k] = jnp.nanmean(v)
    return out


@nx.model_jit(static_argnames=("cfg", "numerics", "tc", "opt", "max_len", "metric_hinted"),
              donate_argnums=0)
def rl_step(state: TrainState, batch: Batch, ref_params, *, cfg: M.ModelConfig,
            numerics: nx.Numerics, tc: TrainConfig, opt, max_len: int,
            metric_hinted: frozenset | None = None):
    """One GRPO update on a rollout batch. Returns (state, metrics, finite). The code agreement
    metrics split the sites into ``metric_hinted`` and the rest (default: the sites this
    trainer follows hints at; a run passes its config's hint sites, so a variant without hints
    reports agreement over the same two site sets as one with them)."""
    code_hinted = numerics.hinted if metric_hinted is None else metric_hinted
    use_hints = bool(numerics.hinted)

    def loss_fn(params, mb: Batch):
        experts = jnp.swapaxes(mb.experts, 0, 1)

        def forward(p, capture_codes=False):  # the policy's and the KL reference's alike
            return M.forward(
                p, mb.tokens, cfg=cfg, numerics=numerics, valid_BxT=mb.valid,
                hints=mb.hints if use_hints else None,
                forced_experts_LxBxTxK=experts if tc.routing_replay else None,
                hint_experts_LxBxTxK=experts if use_hints else None,
                hint_valid_BxT=mb.recorded if use_hints else None,
                capture_codes=capture_codes)

        logits, aux, _ = forward(params, capture_codes=bool(mb.rollout_codes))
        logp = R.token_logprobs(logits, mb.tokens)
        ref_lp = None
        if tc.grpo.kl_coef:
            # (the same numerics, hints and routing as the policy: with equal params the KL
            # term is exactly 0, not the rollout-trainer mismatch the hints remove)
            ref_lp = jax.lax.stop_gradient(R.token_logprobs(forward(ref_params)[0], mb.tokens))
        lm = loss_mask(mb)
        pl, parts = grpo.policy_loss(logp, mb.rollout_logprobs, mb.advantages, lm, tc.grpo,
                                     max_len, ref_lp)
        router = tc.router_aux_coef * aux.lb_loss + tc.router_z_coef * aux.z_loss
        loss = pl + router
        m = dict(MT.logprob_metrics(logp, mb.rollout_logprobs, mb.response_mask, tc.grpo.is_cap))
        m.update(parts, loss=loss, pg_loss=pl, router_loss=router, lb_loss=aux.lb_loss,
                 z_loss=aux.z_loss,
                 entropy=grpo.entropy(logits, mb.response_mask),
                 routing_agreement=MT.routing_agreement(aux.experts, experts, mb.valid))
        # the positions each mean divides by, to weight the micro-batches' means
        n_resp = jnp.sum(mb.response_mask, dtype=jnp.float32)
        w = {k: n_resp for k in ("logprob_gap_mean", "kl_k3", "is_clip_frac", "entropy")}
        w.update(is_weight_mean=jnp.sum(lm, dtype=jnp.float32),
                 routing_agreement=jnp.sum(mb.valid, dtype=jnp.float32))
        if mb.rollout_codes:
            cm, counts = MT.code_metrics_and_counts(aux.codes, mb.rollout_codes, mb.recorded,
                                                    code_hinted)
            m.update(cm)
            w.update(counts)
        return loss, (m, w)

    xs, rebuild = _split_micro(batch, tc.micro_batches)
    n = tc.micro_batches
    share_N = pg_shares(loss_mask(batch), n, tc.grpo.loss_agg)

    def scaled_loss(params, mb: Batch, share):
        """This micro-batch's part of the full batch's loss: its share of the policy loss (so
        the summed policy gradients are the full batch's), 1/n of its own router terms (the
        load-balancing and z losses of its tokens: close to, not equal to, the full batch's)."""
        _, (m, w) = loss_fn(params, mb)
        return share * m["pg_loss"] + m["router_loss"] / n, (m, w)

    def body(acc, xs_i):
        xs_i, share = xs_i
        (loss, m), g = jax.value_and_grad(scaled_loss, has_aux=True)(
            state.params, rebuild(xs_i), share)
        return jax.tree.map(jnp.add, acc, g), (loss, m)

    zeros = jax.tree.map(jnp.zeros_like, state.params)
    grads, (losses, (ms, ws)) = jax.lax.scan(body, zeros, (xs, share_N))
    loss = jnp.sum(losses)
    state, finite = _apply_if_finite(opt, state, loss, grads)
    m = _reduce_metrics(ms, ws)
    m["loss"], m["pg_loss"] = loss, jnp.sum(share_N * ms["pg_loss"])
    m["grad_norm"] = optax.tree.norm(grads)
    return state, m, finite


def pg_shares(loss_mask_BxT, n: int, loss_agg: str):
    """[n] weights of the n micro-batches' policy losses in the full batch's: ``token_mean``
    divides by the whole batch's loss tokens, so a micro-batch counts by its tokens;
    ``seq_mean`` by the sequences with loss tokens; ``dr_grpo``'s constant divisor, 1/n each."""
    if loss_agg == "dr_grpo":
        return jnp.full((n,), 1.0 / n, jnp.float32)
    per_row = loss_mask_BxT.reshape(n, -1, loss_mask_BxT.shape[-1]).astype(jnp.float32)
    if loss_agg == "token_mean":
        cnt_N = jnp.sum(per_row, axis=(1, 2))
    else:
        cnt_N = jnp.sum(jnp.any(per_row > 0, axis=2).astype(jnp.float32), axis=1)
    total = jnp.sum(cnt_N)
    return jnp.where(total > 0, cnt_N / jnp.maximum(total, 1.0), 1.0 / n)


def sft_loss(params, tokens_BxT, loss_mask_BxT, *, cfg, numerics, router_aux_coef: float = 1e-3):
    """Cross-entropy on the masked (solution) tokens plus ``router_aux_coef`` times the routers'
    load-balancing loss (``sft.router_aux_coef``) over the sequences' tokens: each row is
    right-padded (``run.sft_batch``), so its tokens are those up to its last loss token."""
    valid_BxT = jnp.flip(jnp.cumsum(jnp.flip(loss_mask_BxT, 1).astype(jnp.int32), axis=1), 1) > 0
    logits, aux, _ = M.forward(params, tokens_BxT, cfg=cfg, numerics=numerics, valid_BxT=valid_BxT)
    lp = R.token_logprobs(logits, tokens_BxT)
    m = loss_mask_BxT.astype(jnp.float32)
    return -jnp.sum(lp * m) / jnp.maximum(jnp.sum(m), 1.0) + router_aux_coef * aux.lb_loss


@nx.model_jit(static_argnames=("cfg", "numerics", "opt", "router_aux_coef"), donate_argnums=0)
def sft_step(state: TrainState, tokens_BxT, loss_mask_BxT, *, cfg, numerics, opt,
             router_aux_coef: float = 1e-3):
    """One SFT update on :func:`sft_loss`. Returns (state, loss, finite)."""
    loss, grads = jax.value_and_grad(sft_loss)(state.params, tokens_BxT, loss_mask_BxT, cfg=cfg,
                                               numerics=numerics,
                                               router_aux_coef=router_aux_coef)
    state, finite = _apply_if_finite(opt, state, loss, grads)
    return state, loss, finite
