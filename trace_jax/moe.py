"""The MoE feed-forward: route -> sort tokens by expert -> grouped matmul -> unsort/combine.

Letters: N tokens (B*T flattened), E experts, k experts per token, M model dim, F expert dim.
Each token's k chosen experts are kept in ascending expert-id order ("slots"), so a slot names
the same expert in rollout and trainer whenever both chose the same set -- the per-slot
``moe/expert_hidden`` hints stay aligned even if the routing probabilities' order flips. Where
the sets differ, each trainer slot takes the rollout's hint row of its expert if the rollout
chose that expert too (round-to-nearest otherwise).

Token parallelism. Under a mesh context without an ``expert`` axis (and without ``tensor``) whose
batch axes split the tokens, each stage runs in a ``shard_map`` over those axes: every device
its own tokens, the weights gathered (GSPMD cannot partition a Pallas call and would replicate
it).

Expert parallelism. Traced under a mesh context (``jax.set_mesh``) whose ``expert`` axis has
size ep > 1, the two expert GEMM stages run in a ``shard_map``: each device holds E/ep experts
and its own tokens (the batch is split over the expert axis too); per stage it all-gathers the
tokens of its expert group, computes the (token, slot) pairs routed to its local experts (zero
elsewhere) and reduce-scatters the slot outputs back to the tokens' owners. Each (token, slot)
is nonzero on exactly one device, so the reduction adds zeros only: on identical inputs a stage
reproduces one device bit for bit wherever the grouped matmul's row results do not depend on how
many rows it is given (tested on CPU; GPU matmul tiling may round differently). The ``moe/expert_hidden`` site sits between the stages in token layout, so its
quantization and hints are the same code on one device or many. (Exchanging [N, k, *] slot
tensors costs k x the bytes of an all-to-all of combined outputs; it buys exactness and keeps the
token exchange in two collectives that XLA schedules itself.)
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from trace_jax import ops
from trace_jax import sharding as SH

EXPERT_AXIS = "expert"


def route(x_NxM, router_MxE, top_k: int, norm_topk: bool, forced_NxK=None):
    """Softmax router with top-k (or forced experts for routing replay).

    Returns experts (int32 [N, k], ascending: the forced ones under replay), combine weights
    (f32 [N, k]), probs and logits (f32 [N, E]), and the router's own top-k (int32 [N, k],
    ascending; the same as experts without replay)."""
    logits = jnp.dot(x_NxM, router_MxE.astype(x_NxM.dtype), preferred_element_type=jnp.float32)
    probs = jax.nn.softmax(logits, axis=-1)
    own = jnp.sort(jax.lax.top_k(probs, top_k)[1], axis=-1)
    experts = own if forced_NxK is None else jnp.sort(forced_NxK.astype(jnp.int32), axis=-1)
    weights = jnp.take_along_axis(probs, experts, axis=-1)
    if norm_topk:
        weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    return experts, weights, probs, logits, own


def router_losses(probs_NxE, logits_NxE, experts_NxK, valid_N):
    """Switch-style load-balancing loss ``E * sum_e f_e P_e`` and the router z-loss, over valid
    tokens."""
    E = probs_NxE.shape[-1]
    w = valid_N.astype(jnp.float32)
    n = jnp.maximum(jnp.sum(w), 1.0)
    counts = jnp.sum(jax.nn.one_hot(experts_NxK, E, dtype=jnp.float32), axis=1)  # N,E
    f = jnp.sum(counts * w[:, None], axis=0) / (n * experts_NxK.shape[-1])
    p_mean = jnp.sum(probs_NxE * w[:, None], axis=0) / n
    lb = E * jnp.sum(f * p_mean)
    z = jnp.sum(jnp.square(jax.nn.logsumexp(logits_NxE, axis=-1)) * w) / n
    return lb, z


def moe_block(p, x_BxTxM, *, cfg, sio, layer, valid_BxT, forced_BxTxK=None, hint_experts_BxTxK=None):
    """Routed experts (+ optional shared expert). Returns (y, experts_BxTxK, (lb_loss, z_loss));
    ``experts`` is the router's own top-k choice, also under routing replay (``forced``), where
    the layer computes with the forced experts (so the caller can measure the router's drift)."""
    B, T, M = x_BxTxM.shape
    N, k, E = B * T, cfg.top_k, cfg.n_experts
    dt = x_BxTxM.dtype
    x = x_BxTxM.reshape(N, M)
    forced = None if forced_BxTxK is None else forced_BxTxK.reshape(N, k)
    experts, weights, probs, logits, own = route(x, p["router"], k, cfg.norm_topk_prob, forced)
    losses = router_losses(probs, logits, experts, valid_BxT.reshape(N))

    x_in, _ = sio.activation(f"layers/{layer}/moe/expert_in", x_BxTxM)
    wname = f"layers/{layer}/moe/expert_weights"
    w_gate = sio.weight(wname, p["w_gate"])
    w_up = sio.weight(wname, p["w_up"])
    w_down = sio.weight(wname, p["w_down"])

    # gate/up + SwiGLU for every (token, slot), in site layout [B, T, k, F]
    h = experts_apply(_gate_up_local, x_in.reshape(N, M), experts, w_gate, w_up)
    F = h.shape[-1]
    h = h.reshape(B, T, k, F)
    hint_rows, hname = None, f"layers/{layer}/moe/expert_hidden"
    if hint_experts_BxTxK is not None:
        # each slot takes the rollout's hint row of the same expert wherever the rollout chose
        # it (the slots of two different expert sets need not line up), RTN where it did not
        same = hint_experts_BxTxK.astype(jnp.int32)[:, :, None, :] == experts.reshape(B, T, k, 1)
        hint_rows = jnp.any(same, axis=-1)  # [B, T, k]
        sio.gather_hint_rows(hname, jnp.argmax(same, axis=-1))
    h, _ = sio.activation(hname, h, hint_rows=hint_rows)
    d = experts_apply(_down_local, h.reshape(N, k, F), experts, w_down)  # [N, k, M]
    y = jnp.sum(d.astype(jnp.float32) * weights[:, :, None], axis=1)

    if "shared" in p:
        sp = p["shared"]
        sg = jnp.dot(x, sp["w_gate"].astype(dt), preferred_element_type=jnp.float32)
        su = jnp.dot(x, sp["w_up"].astype(dt), preferred_element_type=jnp.float32)
        sh = (jax.nn.silu(sg) * su).astype(dt)
        sy = jnp.dot(sh, sp["w_down"].astype(dt), preferred_element_type=jnp.float32)
        gate = jax.nn.sigmoid(jnp.dot(x, sp["gate"].astype(dt), preferred_element_type=jnp.float32))
        y = y + gate * sy
    return y.astype(dt).reshape(B, T, M), own.reshape(B, T, k), losses


# --------------------------------------------------------------------------------------------
# Expert stages: local computation and the expert-parallel wrapper


def _n_experts(w) -> int:
    return w.shape[0]


# Up to this many (token, slot) pairs (decode batches), the routing order is a loop-free rank
# count (one [n, n] comparison sum) instead of a GPU sort: session 15's profile of the 30B decode
# step (888 pairs) spent 8.6 us per layer in the argsort and 3.4 us in the argsort of its inverse.
RANK_SORT_MAX = 4096


def stable_order(key_N: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(order, inverse)`` of integer keys: ``order = argsort(key, stable=True)`` and its
    inverse permutation (``inverse[order[i]] = i``), int32. Small ``N`` (<=
    :data:`RANK_SORT_MAX`): ``inverse`` is each element's rank (smaller keys plus equal keys
    before it) and ``order`` its scatter; larger: a sort, and the inverse by a scatter (not a
    second sort)."""
    n = key_N.shape[0]
    idx = jnp.arange(n, dtype=jnp.int32)
    if n > RANK_SORT_MAX:
        order = jnp.argsort(key_N, stable=True).astype(jnp.int32)
        inverse = jnp.zeros(n, jnp.int32).at[order].set(idx, unique_indices=True)
        return order, inverse
    k_row, k_col = key_N[:, None], key_N[None, :]
    before = (k_col < k_row) | ((k_col == k_row) & (idx[None, :] < idx[:, None]))
    inverse = jnp.sum(before, axis=1, dtype=jnp.int32)
    order = jnp.zeros(n, jnp.int32).at[inverse].set(idx, unique_indices=True)
    return order, inverse


def _local_slots(experts_NxK, e0, n_local: int):
    """(token, slot) pairs routed to experts e0..e0+n_local-1: mask, sort order, its inverse and
    the local group sizes. Pairs of other experts sort last, past the groups' sum."""
    flat = experts_NxK.reshape(-1).astype(jnp.int32) - e0
    local = (flat >= 0) & (flat < n_local)
    key = jnp.where(local, flat, n_local)
    order, inverse = stable_order(key)
    sizes = jnp.bincount(key, length=n_local).astype(jnp.int32)  # drops key == n_local
    return local, order, inverse, sizes


# Row gathers with gather backwards. XLA differentiates ``x[idx]`` into a scatter-add, which the
# GPU runs with atomics even for a permutation (~2 ms of a 15 ms small.py train step, ~8 ms of the
# 30B-shape one). A permutation's gradient is the gather by its inverse; the dispatch gather
# (each token repeated for its k slots) has the sum over its k slots as gradient.


@jax.custom_vjp
def _permute_rows(x, perm, inv):
    """``x[perm]`` for a permutation ``perm`` with inverse ``inv``; gradient ``g[inv]``."""
    return x[perm]


def _permute_rows_fwd(x, perm, inv):
    return x[perm], (perm, inv)


def _permute_rows_bwd(res, g):
    _, inv = res
    return g[inv], None, None


_permute_rows.defvjp(_permute_rows_fwd, _permute_rows_bwd)


@jax.custom_vjp
def _dispatch_rows(x_NxM, order, inverse):
    """Sorted slot rows ``x[order // k]`` (k = len(order) / N: token n's slots are pairs
    n*k..n*k+k-1); gradient: each token's sum over its k slots, ``g[inverse]`` summed over k
    (in f32)."""
    return x_NxM[order // (order.shape[0] // x_NxM.shape[0])]


def _dispatch_rows_fwd(x_NxM, order, inverse):
    return _dispatch_rows(x_NxM, order, inverse), (order, inverse, x_NxM.shape)


def _dispatch_rows_bwd(res, g):
    _, inverse, (N, M) = res
    k = inverse.shape[0] // N
    dx = jnp.sum(g[inverse].reshape(N, k, M).astype(jnp.float32), axis=1)
    return dx.astype(g.dtype), None, None


_dispatch_rows.defvjp(_dispatch_rows_fwd, _dispatch_rows_bwd)


def _gate_up_local(x_NxM, experts_NxK, w_gate, w_up, e0):
    """silu(x W_gate) * (x W_up) for the pairs of local experts, [N, k, F] (zero elsewhere)."""
    N, k = experts_NxK.shape
    local, order, inverse, sizes = _local_slots(experts_NxK, e0, _n_experts(w_gate))
    xs = _dispatch_rows(x_NxM, order, inverse)
    h = _permute_rows(ops.grouped_swiglu(xs, w_gate, w_up, sizes), inverse, order)
    return jnp.where(local[:, None], h, 0).reshape(N, k, -1)


def _down_local(h_NxKxF, experts_NxK, w_down, e0):
    """h W_down for the pairs of local experts, [N, k, M] (zero elsewhere)."""
    N, k, F = h_NxKxF.shape
    local, order, inverse, sizes = _local_slots(experts_NxK, e0, _n_experts(w_down))
    hs = _permute_rows(h_NxKxF.reshape(N * k, F), order, inverse)
    d = _permute_rows(ops.grouped_matmul(hs, w_down, sizes), inverse, order)
    return jnp.where(local[:, None], d, 0).reshape(N, k, -1)


def expert_parallel_size() -> int:
    """Size of the context mesh's ``expert`` axis (1 without a mesh context)."""
    mesh = SH.context_mesh()
    return 1 if mesh is None else int(dict(mesh.shape).get(EXPERT_AXIS, 1))


def _token_parallel(stage, tokens_NxX, experts_NxK, *weights):
    """No expert parallelism: under a mesh context whose token batch is split (data / FSDP), each
    device runs the stage on its own tokens with the whole weights (gathered for FSDP), in a
    ``shard_map``. Left to GSPMD, a Pallas call (the GPU path) cannot be partitioned and would
    be replicated: every device computing every token. Plain local computation (left to GSPMD,
    so replicated on the GPU path) without a mesh, when the tokens do not split evenly (with a
    warning), or when a ``tensor`` axis splits the expert width. Under FSDP the weights' gradients
    leave as the shard_map's psum, then a slice to the FSDP shard: on the CPU XLA combines them
    into the same all-reduce as the dense weights' GSPMD gradients
    (``experiments/fsdp_collectives.py``); XLA's GPU pipeline can turn all-reduce + slice into
    a reduce-scatter (not yet checked on a multi-GPU host)."""
    mesh = SH.context_mesh()
    if mesh is None or int(dict(mesh.shape).get("tensor", 1)) > 1:
        return stage(tokens_NxX, experts_NxK, *weights, 0)
    bax = SH.token_batch_axes(mesh)
    shards = 1
    for a in bax:
        shards *= mesh.shape[a]
    if shards == 1:
        return stage(tokens_NxX, experts_NxK, *weights, 0)
    if tokens_NxX.shape[0] % shards:
        warnings.warn(f"MoE expert stage: {tokens_NxX.shape[0]} tokens do not split over the "
                      f"{shards} devices of mesh axes {bax}; the stage runs replicated (use a "
                      f"(micro-)batch of sequences that is a multiple of {shards})", stacklevel=2)
        return stage(tokens_NxX, experts_NxK, *weights, 0)
    tok = P(bax)
    w_specs = tuple(jax.tree.map(lambda _: P(), w) for w in weights)
    return jax.shard_map(lambda x, e, *ws: stage(x, e, *ws, 0), mesh=mesh,
                         in_specs=(tok, tok, *w_specs), out_specs=tok,
                         check_vma=False)(tokens_NxX, experts_NxK, *weights)


def experts_apply(stage, tokens_NxX, experts_NxK, *weights):
    """Run an expert stage (``_gate_up_local`` / ``_down_local``) on one device, token parallel
    over the context mesh's batch axes (:func:`_token_parallel`), or expert parallel over its
    ``expert`` axis (see the module docstring)."""
    ep = expert_parallel_size()
    if ep == 1:
        return _token_parallel(stage, tokens_NxX, experts_NxK, *weights)
    mesh = SH.context_mesh()
    E = _n_experts(weights[0])
    if E % ep:
        raise ValueError(f"expert parallelism: {E} experts do not split over the mesh's "
                         f"'{EXPERT_AXIS}' axis of size {ep}")
    bax = SH.token_batch_axes(mesh)
    shards = 1
    for a in bax:
        shards *= mesh.shape[a]
    N = tokens_NxX.shape[0]
    if N % shards:
        raise ValueError(f"expert parallelism: {N} tokens (batch x sequence length, per "
                         f"micro-batch) do not split over the {shards} devices of mesh axes {bax}; "
                         f"use a (micro-)batch of sequences that is a multiple of {shards}")
    tok = P(bax)

    def body(x, e, *ws):
        e0 = jax.lax.axis_index(EXPERT_AXIS) * _n_experts(ws[0])
        xg = jax.lax.all_gather(x, EXPERT_AXIS, axis=0, tiled=True)
        eg = jax.lax.all_gather(e, EXPERT_AXIS, axis=0, tiled=True)
        y = stage(xg, eg, *ws, e0)
        return jax.lax.psum_scatter(y, EXPERT_AXIS, scatter_dimension=0, tiled=True)

    w_specs = tuple(jax.tree.map(lambda _: P(EXPERT_AXIS), w) for w in weights)
    # check_vma=False: the stages call Pallas kernels on the GPU, whose outputs carry no
    # varying-manual-axes type (with the check on, tracing the pallas_call fails)
    return jax.shard_map(body, mesh=mesh, in_specs=(tok, tok, *w_specs), out_specs=tok,
                         check_vma=False)(tokens_NxX, experts_NxK, *weights)
