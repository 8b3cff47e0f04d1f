"""The MoE feed-forward: route -> sort tokens by expert -> grouped matmul -> unsort/combine.

Letters: N tokens (B*T flattened), E experts, k experts per token, M model dim, F expert dim.
Each token's k chosen experts are kept in ascending expert-id order ("slots"), so a slot names
the same expert in rollout and trainer whenever both chose the same set -- the per-slot
``moe/expert_hidden`` hints stay aligned even if the routing probabilities' order flips.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from trace_jax import ops


def route(x_NxM, router_MxE, top_k: int, norm_topk: bool, forced_NxK=None):
    """Softmax router with top-k (or forced experts for routing replay).

    Returns experts (int32 [N, k], ascending), combine weights (f32 [N, k]), probs and logits
    (f32 [N, E])."""
    logits = jnp.dot(x_NxM, router_MxE.astype(x_NxM.dtype), preferred_element_type=jnp.float32)
    probs = jax.nn.softmax(logits, axis=-1)
    if forced_NxK is None:
        _, experts = jax.lax.top_k(probs, top_k)
    else:
        experts = forced_NxK.astype(jnp.int32)
    experts = jnp.sort(experts, axis=-1)
    weights = jnp.take_along_axis(probs, experts, axis=-1)
    if norm_topk:
        weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    return experts, weights, probs, logits


def router_losses(probs_NxE, logits_NxE, experts_NxK, valid_N):
    """Switch-style load-balancing loss ``E * sum_e f_e P_e`` and the router z-loss, over valid
    tokens."""
    E = probs_NxE.shape[-1]
    w = valid_N.astype(jnp.float32)
    n = jnp.maximum(jnp.sum(w), 1.0)
    counts = jnp.sum(jax.nn.one_hot(experts_NxK, E, dtype=jnp.float32), axis=1)  # N,E
    f = jnp.sum(counts * w[:, None], axis=0) / (n * experts_NxK.shape[-1])
    P = jnp.sum(probs_NxE * w[:, None], axis=0) / n
    lb = E * jnp.sum(f * P)
    z = jnp.sum(jnp.square(jax.nn.logsumexp(logits_NxE, axis=-1)) * w) / n
    return lb, z


def moe_block(p, x_BxTxM, *, cfg, sio, layer, valid_BxT, forced_BxTxK=None, hint_experts_BxTxK=None):
    """Routed experts (+ optional shared expert). Returns (y, experts_BxTxK, (lb_loss, z_loss))."""
    B, T, M = x_BxTxM.shape
    N, k, E = B * T, cfg.top_k, cfg.n_experts
    dt = x_BxTxM.dtype
    x = x_BxTxM.reshape(N, M)
    forced = None if forced_BxTxK is None else forced_BxTxK.reshape(N, k)
    experts, weights, probs, logits = route(x, p["router"], k, cfg.norm_topk_prob, forced)
    losses = router_losses(probs, logits, experts, valid_BxT.reshape(N))

    x_in, _ = sio.activation(f"layers/{layer}/moe/expert_in", x_BxTxM)
    flat_e = experts.reshape(N * k)
    order = jnp.argsort(flat_e, stable=True)  # sorted position -> (token, slot)
    inverse = jnp.argsort(order)  # (token, slot) -> sorted position
    group_sizes = jnp.bincount(flat_e, length=E).astype(jnp.int32)
    xs = x_in.reshape(N, M)[order // k]

    wname = f"layers/{layer}/moe/expert_weights"
    w_gate = sio.weight(wname, p["w_gate"])
    w_up = sio.weight(wname, p["w_up"])
    w_down = sio.weight(wname, p["w_down"])
    g = ops.grouped_matmul(xs, w_gate, group_sizes).astype(jnp.float32)
    u = ops.grouped_matmul(xs, w_up, group_sizes).astype(jnp.float32)
    h = (jax.nn.silu(g) * u).astype(dt)  # sorted order, [N*k, F]

    F = h.shape[-1]
    to_site = lambda a: a[inverse].reshape(B, T, k, F)  # noqa: E731
    from_site = lambda a: a.reshape(N * k, F)[order]  # noqa: E731
    hint_rows = None
    if hint_experts_BxTxK is not None:
        hint_rows = hint_experts_BxTxK.astype(jnp.int32) == experts.reshape(B, T, k)
    h, _ = sio.activation(f"layers/{layer}/moe/expert_hidden", h, hint_rows=hint_rows,
                          layout=(to_site, from_site))
    d = ops.grouped_matmul(h, w_down, group_sizes)  # [N*k, M] sorted
    d = d[inverse].reshape(N, k, M).astype(jnp.float32)
    y = jnp.sum(d * weights[:, :, None], axis=1)

    if "shared" in p:
        sp = p["shared"]
        sg = jnp.dot(x, sp["w_gate"].astype(dt), preferred_element_type=jnp.float32)
        su = jnp.dot(x, sp["w_up"].astype(dt), preferred_element_type=jnp.float32)
        sh = (jax.nn.silu(sg) * su).astype(dt)
        sy = jnp.dot(sh, sp["w_down"].astype(dt), preferred_element_type=jnp.float32)
        gate = jax.nn.sigmoid(jnp.dot(x, sp["gate"].astype(dt), preferred_element_type=jnp.float32))
        y = y + gate * sy
    return y.astype(dt).reshape(B, T, M), experts.reshape(B, T, k), losses
