"""Meshes and shardings: one logical-axis rule table, two rule sets (training and sampling).

Every parameter carries logical axis names (``model.param_axes``); every activation, cache and
rollout record has them here. :data:`RULE_TABLE` maps each logical name to mesh axes, once for
**training** (FSDP: parameters split over ``fsdp`` and ``data``, optimizer state follows the
params) and once for **sampling** (rollout: parameters replicated over the batch axes, experts
over ``expert``, heads / vocab / expert width over ``tensor``). The same model code runs under
either; only the specs differ (the gemma example's "factory that returns different specs for
sampling and for training").

Guarantees:

* :func:`logical_to_spec` never produces an uneven shard: a mesh axis whose size does not divide
  the dimension (given the axes already kept for that dimension) is dropped, i.e. that dimension
  is replicated over it. A mesh axis is used at most once per spec; axes of size 1 are left out.
* Trajectory data (rollouts, hints, routing decisions, caches) is sharded over the batch axes
  **strictly**: a batch that does not divide raises (:func:`check_batch_divisible`) instead of
  silently replicating. Hints and routing stay sharded by trajectory: leaves ``[B, T, ...]`` on
  axis 0, experts ``[L, B, T, k]`` on axis 1; leaves without a trajectory axis (MXFP4's
  constant global scale) are replicated.
* FP4 :class:`~trace_jax.quant.QTensor` leaves (packed expert weights, FP4 KV cache) get one
  sharding per field: codes, scales and global_scale have the weight's rank, so each is sharded
  on the weight's logical axes where its own (halved / blocked / size-1) extent divides.

Meshes use ``AxisType.Auto`` (GSPMD propagation). Placing inputs and params (``jax.device_put``
or ``jit`` in/out shardings) is enough for data/FSDP/tensor parallelism. Inside ``forward`` the
residual stream is constrained to the batch sharding, and the routed experts run **expert
parallel** (``trace_jax.moe``: ``shard_map`` with a token all-gather / reduce-scatter over the
``expert`` axis) whenever the function is traced under a mesh context with an ``expert`` axis
of size > 1, and token parallel (a ``shard_map`` over the batch axes, weights gathered) when
only the batch is split: callers trace under ``with jax.set_mesh(mesh)`` (``run.run`` and
``rollout.generate(mesh=...)`` do). Without a mesh context the model code is purely local.

Config (``config.mesh``)::

    mesh.axes = ("data", "fsdp", "expert", "tensor")   # any left out have size 1
    mesh.shape = (-1, 1, 1, 1)   # one -1 = "the remaining devices"
    mesh.rules = {}              # optional overrides: logical name -> mesh axes (both rule sets)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from trace_jax import quant as Q

MeshAxes = str | tuple[str, ...] | None
Rules = Mapping[str, MeshAxes]

DEFAULT_AXES = ("data", "fsdp", "expert", "tensor")
BATCH = "activation_batch"  # the logical name of the trajectory / batch axis

# The one rule table: logical axis name -> (training mesh axes, sampling mesh axes).
# Multi-axis entries shard one dimension over several mesh axes (major to minor).
RULE_TABLE: dict[str, tuple[MeshAxes, MeshAxes]] = {
    # activations and trajectory records
    # B: trajectories / sequences; over the expert axis too (expert parallelism is also data
    # parallelism: each expert-group device holds its own tokens and exchanges them per layer)
    "activation_batch": (("data", "fsdp", "expert"), ("data", "fsdp", "expert")),
    "activation_length": (None, None),  # T
    "activation_embed": (None, None),  # M of the residual stream
    "activation_vocab": ("tensor", "tensor"),  # V of the logits
    "cache_length": (None, None),  # S: KV cache slots
    # parameters (model.param_axes)
    "layers": (None, None),  # L: stacked layers are scanned/sliced, never split
    "vocab": ("tensor", "tensor"),  # V
    "embed": (("fsdp", "data", "expert"), None),  # M: FSDP dimension of dense weights (over the
    # expert axis too: it splits the batch, and dense weights have no experts dimension to use it)
    "embed_moe": (("fsdp", "data"), None),  # M in expert weights
    "q_heads": ("tensor", "tensor"),  # H*D
    "kv_heads": ("tensor", "tensor"),  # K*D in wk/wv, K in the KV cache
    "head_dim": (None, None),  # D
    "experts": ("expert", "expert"),  # E
    "expert_mlp": ("tensor", "tensor"),  # F
    "mlp": ("tensor", "tensor"),  # Fs (shared expert)
}
RULE_SETS = ("training", "sampling")

# Logical axes of non-parameter tensors.
CACHE_AXES = (BATCH, "kv_heads", "cache_length", "head_dim")  # attention.py: [B, Hkv, S, Dh]
TOKENS_AXES = (BATCH, "activation_length")  # [B, T]


# --------------------------------------------------------------------------------------------
# Mesh


def _as_tuple(axes: MeshAxes) -> tuple[str, ...]:
    if axes is None:
        return ()
    if isinstance(axes, str):
        return (axes,)
    return tuple(axes)


def resolve_mesh_shape(axes: Sequence[str], shape: Sequence[int],
                       n_devices: int) -> tuple[int, ...]:
    """``shape`` with its (at most one) ``-1`` replaced by the remaining devices."""
    axes, shape = tuple(axes), tuple(int(s) for s in shape)
    if len(axes) != len(shape):
        raise ValueError(f"mesh.axes {axes} and mesh.shape {shape} have different lengths: give "
                         f"one size per axis (axes left out of mesh.axes have size 1)")
    if len(set(axes)) != len(axes):
        raise ValueError(f"mesh.axes {axes} repeats an axis name")
    if shape.count(-1) > 1:
        raise ValueError(f"mesh.shape {shape} has more than one -1 (only one axis can take "
                         f"'the rest')")
    bad = [s for s in shape if s != -1 and s < 1]
    if bad:
        raise ValueError(f"mesh.shape {shape}: sizes must be positive or a single -1")
    known = math.prod(s for s in shape if s != -1)
    if -1 in shape:
        if n_devices % known:
            raise ValueError(f"mesh.shape {shape}: {n_devices} devices are not divisible by the "
                             f"fixed axes' product {known}, so -1 cannot be resolved")
        shape = tuple(n_devices // known if s == -1 else s for s in shape)
    elif known != n_devices:
        raise ValueError(f"mesh.shape {shape} ({dict(zip(axes, shape))}) has {known} devices but "
                         f"{n_devices} are available; use -1 for 'the rest' or pass devices=")
    return shape


def _check_axes_used(axes: tuple[str, ...], shape: tuple[int, ...], mesh_cfg) -> None:
    """Every mesh axis of size > 1 is one of :data:`DEFAULT_AXES` or named by a
    ``mesh_cfg.rules`` override: nothing would be split over any other (a misspelled name)."""
    named = {a for v in dict(mesh_cfg.get("rules", None) or {}).values() for a in _as_tuple(v)}
    for a, n in zip(axes, shape):
        if n > 1 and a not in DEFAULT_AXES and a not in named:
            raise ValueError(f"mesh axis {a!r} (size {n}) is none of {DEFAULT_AXES} and no "
                             f"mesh.rules override names it, so nothing would be split over it")


def make_mesh(mesh_cfg, devices=None) -> Mesh:
    """A mesh from ``mesh_cfg`` (``axes``, ``shape`` with one optional -1, optional ``rules``);
    each of :data:`DEFAULT_AXES` that ``axes`` leaves out is added with size 1 (the rule table
    names all four). ``devices`` (default: all global devices, in JAX's topology-aware order)
    lets rollout and trainer use subsets."""
    axes, devices = tuple(mesh_cfg["axes"]), None if devices is None else list(devices)
    shape = resolve_mesh_shape(axes, mesh_cfg["shape"],
                               jax.device_count() if devices is None else len(devices))
    _check_axes_used(axes, shape, mesh_cfg)
    left_out = tuple(a for a in DEFAULT_AXES if a not in axes)
    axes, shape = axes + left_out, shape + (1,) * len(left_out)
    if devices is None:
        return jax.make_mesh(shape, axes, axis_types=(AxisType.Auto,) * len(axes))
    return Mesh(np.asarray(devices, dtype=object).reshape(shape), axes,
                axis_types=(AxisType.Auto,) * len(axes))


# --------------------------------------------------------------------------------------------
# Rules


def make_rules(kind: str, overrides: Rules | None = None, table=None) -> dict[str, MeshAxes]:
    """The ``"training"`` or ``"sampling"`` rule set of the table, with ``overrides`` (logical
    name -> mesh axes, applied to both sets; new logical names allowed)."""
    if kind not in RULE_SETS:
        raise ValueError(f"rule set must be one of {RULE_SETS}, got {kind!r}")
    i = RULE_SETS.index(kind)
    rules = {name: pair[i] for name, pair in (table or RULE_TABLE).items()}
    for name, axes in dict(overrides or {}).items():
        rules[name] = None if axes is None else (axes if isinstance(axes, str) else tuple(axes))
    return rules


def rules_from_config(mesh_cfg, kind: str) -> dict[str, MeshAxes]:
    """``make_rules(kind)`` with the optional ``mesh_cfg.rules`` overrides."""
    overrides = mesh_cfg.get("rules", None) if hasattr(mesh_cfg, "get") else None
    return make_rules(kind, overrides)


def check_rules(rules: Rules, mesh: Mesh) -> None:
    """Every mesh axis the rules name exists in the mesh."""
    for name, axes in rules.items():
        unknown = [a for a in _as_tuple(axes) if a not in mesh.shape]
        if unknown:
            raise ValueError(f"sharding rule {name!r} -> {axes!r} names mesh axes {unknown} that "
                             f"the mesh does not have (mesh axes: {tuple(mesh.axis_names)})")


def logical_to_spec(axes: Sequence[str | None], rules: Rules, mesh: Mesh,
                    shape: Sequence[int]) -> P:
    """The PartitionSpec for a tensor of ``shape`` with logical ``axes``.

    A mesh axis is kept for a dimension only if it exists with size > 1, was not already used by
    an earlier dimension, and the dimension stays divisible by the product of the axes kept so far
    for it; otherwise it is dropped (that dimension is replicated over it)."""
    axes, shape = tuple(axes), tuple(shape)
    if len(axes) != len(shape):
        raise ValueError(f"logical axes {axes} do not match the rank of shape {shape}")
    used: set[str] = set()
    spec = []
    for name, dim in zip(axes, shape):
        if name is None:
            spec.append(None)
            continue
        if name not in rules:
            raise ValueError(f"no sharding rule for logical axis {name!r}; known: {sorted(rules)}")
        kept, prod = [], 1
        for a in _as_tuple(rules[name]):
            if a not in mesh.shape:
                raise ValueError(f"sharding rule {name!r} -> {rules[name]!r} names mesh axis "
                                 f"{a!r} that the mesh does not have (mesh axes: "
                                 f"{tuple(mesh.axis_names)})")
            n = mesh.shape[a]
            if n == 1 or a in used or dim % (prod * n):
                continue
            kept.append(a)
            prod *= n
        used.update(kept)
        spec.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
    while spec and spec[-1] is None:
        spec.pop()
    return P(*spec)


def context_mesh():
    """The mesh of the enclosing ``jax.set_mesh`` (an AbstractMesh while tracing), or None."""
    m = jax.sharding.get_abstract_mesh()
    return None if m.empty else m


def token_batch_axes(mesh) -> tuple[str, ...]:
    """Mesh axes (size > 1) the token batch is split over inside the model: the table's
    ``activation_batch`` entry (the same in both rule sets). ``config.mesh.rules`` overrides of
    ``activation_batch`` place trajectories but do not reach inside ``forward`` (the model sees only
    the mesh): the layers then reshard to this layout; results are unchanged."""
    return tuple(a for a in _as_tuple(RULE_TABLE[BATCH][0])
                 if a in mesh.shape and mesh.shape[a] > 1)


def constrain_batch(x: jax.Array) -> jax.Array:
    """Inside ``forward``: split ``x``'s leading (batch) axis over the token batch axes of the
    context mesh; a no-op without a mesh context, or where the batch does not divide."""
    mesh = context_mesh()
    if mesh is None:
        return x
    axes, n = [], 1
    for a in token_batch_axes(mesh):
        if x.shape[0] % (n * mesh.shape[a]) == 0:
            axes.append(a)
            n *= mesh.shape[a]
    if not axes:
        return x
    return jax.lax.with_sharding_constraint(x, P(tuple(axes)))


def named(axes, rules: Rules, mesh: Mesh, shape) -> NamedSharding:
    return NamedSharding(mesh, logical_to_spec(axes, rules, mesh, shape))


def constrain(x: jax.Array, axes, mesh: Mesh, rules: Rules) -> jax.Array:
    """``with_sharding_constraint`` by logical axis names (inside ``jit``); axes that do not
    divide are dropped as in :func:`logical_to_spec`."""
    return jax.lax.with_sharding_constraint(x, named(axes, rules, mesh, x.shape))


def _sharding_for(axes, leaf, rules, mesh):
    """A NamedSharding for an array-like leaf, or a QTensor / kernel-layout FP4Weights /
    MgpuWeights of NamedShardings (one per field)."""
    if isinstance(leaf, Q.QTensor):
        return Q.QTensor(*(named(axes, rules, mesh, f.shape)
                           for f in (leaf.codes, leaf.scales, leaf.global_scale)),
                         fmt=leaf.fmt, axis=leaf.axis, layout=leaf.layout)
    from pallas_kernels.fp4_matmul import FP4Weights

    if isinstance(leaf, FP4Weights):
        # [..., (2,) K', N] ("kn") or [..., (2,) N, K'] ("nk"): each field keeps the weight's
        # leading axes and its K/N axes (in the layout's order); extra middle axes replicate
        kn = tuple(axes[-2:]) if leaf.layout == "kn" else tuple(axes[-2:])[::-1]

        def field(f):
            extra = len(f.shape) - len(axes)
            return named(tuple(axes[:-2]) + (None,) * extra + kn, rules, mesh, f.shape)
        return jax.tree.map(field, leaf)
    from pallas_kernels.fp4_matmul_mgpu import MgpuWeights
    from pallas_kernels.mgpu_kv_layout import MgpuKV

    if isinstance(leaf, MgpuKV):  # every field [B, Hkv, ...]: batch and kv heads as the axes say
        return jax.tree.map(lambda f: named(tuple(axes[:2]) + (None,) * (len(np.shape(f)) - 2),
                                            rules, mesh, np.shape(f)), leaf)
    if isinstance(leaf, MgpuWeights):
        # codes [..., N, K/8], scales [..., K/64, N], global_scale [...] (per tensor / expert)
        lead, (k_ax, n_ax) = tuple(axes[:-2]), tuple(axes[-2:])
        return MgpuWeights(codes=named(lead + (n_ax, k_ax), rules, mesh, leaf.codes.shape),
                          scales=named(lead + (k_ax, n_ax), rules, mesh, leaf.scales.shape),
                          global_scale=named(lead, rules, mesh, leaf.global_scale.shape),
                          fmt=leaf.fmt)
    return named(axes, rules, mesh, np.shape(leaf))


# --------------------------------------------------------------------------------------------
# Parameters


def param_shardings(cfg, mesh: Mesh, rules: Rules, params_like=None):
    """NamedShardings matching ``params_like`` (arrays, ShapeDtypeStructs or FP4 QTensor leaves,
    as from ``init_params`` or ``pack_params``; default: the master params' shapes)."""
    from trace_jax import model as M

    check_rules(rules, mesh)
    axes = M.param_axes(cfg)
    if params_like is None:
        params_like = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s[0], np.float32),
                                   M.param_shapes(cfg), is_leaf=M._is_spec)
    is_axes = lambda x: isinstance(x, tuple)  # noqa: E731
    try:
        return jax.tree.map(lambda a, leaf: _sharding_for(a, leaf, rules, mesh), axes,
                            params_like, is_leaf=is_axes)
    except ValueError as e:
        raise ValueError(f"params do not match model.param_axes(cfg): {e}") from e


def rollout_param_shardings(cfg, mesh: Mesh, rules: Rules, numerics, dtype="bfloat16",
                            kernel_layout: bool | str = False):
    """Shardings for ``rollout.sync_weights(params, numerics, dtype=dtype,
    kernel_layout=...)``'s result (packed FP4 expert weights for ``fp4_rollout``); computed from
    shapes, nothing is allocated."""
    from trace_jax import model as M

    packed = jax.eval_shape(
        lambda k: M.pack_params(M.init_params(cfg, k), numerics, np.dtype(dtype),
                                kernel_layout=kernel_layout, per_layer=False),
        jax.random.key(0))
    stacked = param_shardings(cfg, mesh, rules, packed)
    return unstack_layer_shardings(stacked, cfg.n_layers) if kernel_layout else stacked


def unstack_layer_shardings(shardings: dict, n_layers: int) -> dict:
    """Shardings for ``model.unstack_layers`` of params whose stacked shardings are given: each
    layer's leaf drops the leading (layer) axis, which must not be split over the mesh."""
    def drop(s):
        spec = tuple(s.spec)
        if spec and spec[0] is not None:
            raise ValueError(f"the stacked layer axis is sharded ({s.spec}); the per-layer "
                             "rollout layout needs it replicated")
        return NamedSharding(s.mesh, P(*spec[1:]))

    per = jax.tree.map(drop, shardings["layers"])
    return dict(shardings, layers=tuple(per for _ in range(n_layers)))


# --------------------------------------------------------------------------------------------
# Trajectory data


def batch_axes(mesh: Mesh, rules: Rules) -> tuple[str, ...]:
    """The mesh axes (size > 1) the batch / trajectory axis is split over."""
    check_rules({BATCH: rules.get(BATCH)}, mesh)
    return tuple(a for a in _as_tuple(rules.get(BATCH)) if mesh.shape[a] > 1)


def check_batch_divisible(batch, mesh: Mesh, rules: Rules) -> int:
    """Raise unless ``batch`` (an int or an array with a leading batch axis) splits evenly over
    the batch mesh axes; returns the number of batch shards."""
    b = batch if isinstance(batch, (int, np.integer)) else np.shape(batch)[0]
    axes = batch_axes(mesh, rules)
    n = math.prod(mesh.shape[a] for a in axes)
    if b % n:
        names = "(" + ",".join(repr(a) for a in axes) + ")"
        raise ValueError(f"batch of {b} trajectories is not divisible by the {n} devices of mesh "
                         f"axes {names}; use a batch that is a multiple of {n}")
    return n


def _batch_spec(ndim: int, axis: int, mesh, rules) -> P:
    axes = batch_axes(mesh, rules)
    spec = [None] * ndim
    spec[axis] = None if not axes else axes[0] if len(axes) == 1 else axes
    return P(*spec)


def trajectory_shardings(tree, mesh: Mesh, rules: Rules, batch: int, batch_axis: int = 0):
    """Shard every leaf whose ``batch_axis`` has extent ``batch`` over the batch mesh axes;
    other leaves (no trajectory axis) are replicated. Raises if ``batch`` does not divide."""
    check_batch_divisible(batch, mesh, rules)

    def one(leaf):
        shape = np.shape(leaf)
        if len(shape) > batch_axis and shape[batch_axis] == batch:
            return NamedSharding(mesh, _batch_spec(len(shape), batch_axis, mesh, rules))
        return NamedSharding(mesh, P())

    return jax.tree.map(one, tree)


def hint_shardings(guidance, mesh: Mesh, rules: Rules, batch: int | None = None):
    """Shardings for a ``rollout.HintBatch`` (hints and ``recorded``/``fingerprint`` on axis 0,
    ``experts [L, B, T, k]`` on axis 1) or a plain ``{site: Hint}`` dict (give ``batch``)."""
    from trace_jax import rollout as R

    if isinstance(guidance, R.HintBatch):
        b = np.shape(guidance.recorded)[0]
        return R.HintBatch(
            hints=trajectory_shardings(guidance.hints, mesh, rules, b),
            experts=trajectory_shardings(guidance.experts, mesh, rules, b, batch_axis=1),
            recorded=trajectory_shardings(guidance.recorded, mesh, rules, b),
            fingerprint=trajectory_shardings(guidance.fingerprint, mesh, rules, b))
    if batch is None:
        raise ValueError("hint_shardings of a plain hints dict needs batch=")
    return trajectory_shardings(guidance, mesh, rules, batch)


def rollout_shardings(rollout, mesh: Mesh, rules: Rules):
    """Shardings for a ``rollout.Rollout`` (arrays or ShapeDtypeStructs): everything by
    trajectory (see :func:`hint_shardings` for the guidance)."""
    b = np.shape(rollout.tokens)[0]
    other = trajectory_shardings(rollout._replace(guidance=None), mesh, rules, b)
    return other._replace(guidance=hint_shardings(rollout.guidance, mesh, rules))


def cache_shardings(cache, mesh: Mesh, rules: Rules):
    """Shardings for a KV cache (``attention.init_cache``: a tuple of ``{"k", "v"}``, each
    ``[B, Hkv, S, Dh]`` bf16 or an FP4 QTensor, or of ``{"kv": MgpuKV}``, each field
    ``[B, Hkv, ...]``): batch strictly over the batch axes, KV heads by
    the ``kv_heads`` rule where divisible; MXFP4's constant global scale is replicated."""
    from pallas_kernels.mgpu_kv_layout import MgpuKV

    first = jax.tree.leaves(cache)[0]
    check_batch_divisible(np.shape(first)[0], mesh, rules)
    is_q = lambda x: isinstance(x, (Q.QTensor, MgpuKV))  # noqa: E731
    return jax.tree.map(lambda leaf: _sharding_for(CACHE_AXES, leaf, rules, mesh), cache,
                        is_leaf=is_q)


def data_sharding(mesh: Mesh, rules: Rules, ndim: int = 2) -> NamedSharding:
    """Batch-leading inputs (tokens [B, T], lengths [B], ...): axis 0 over the batch axes."""
    return NamedSharding(mesh, _batch_spec(ndim, 0, mesh, rules))


def reshard(tree: Any, shardings: Any):
    """Move ``tree`` onto ``shardings`` (e.g. trainer mesh -> rollout mesh, or a restored
    checkpoint onto a new mesh shape). A thin ``jax.device_put``: XLA moves only what changes."""
    return jax.device_put(tree, shardings)
