"""A Qwen3-MoE-style decoder as pure functions of a params pytree.

``forward(params, tokens, ...)`` is the whole policy; its numerics (bf16, FP4 rollout, FP4 QAT)
come from the :class:`~trace_jax.numerics.Numerics` policy carried by a ``SiteIO``. The same code
runs the rollout's prefill and decode steps and the trainer's full-sequence forward.

Params (per-layer weights stacked on a leading L axis; ``layers`` is sliced per layer)::

    embed [V, M]; final_norm [M]; lm_head [M, V] (absent when tied)
    layers/attn_norm [L, M]; layers/mlp_norm [L, M]
    layers/attn/{wq [L, M, H*D], wk [L, M, K*D], wv [L, M, K*D], wo [L, H*D, M], q_norm [L, D], k_norm [L, D]}
    layers/moe/{router [L, M, E], w_gate [L, E, M, F], w_up [L, E, M, F], w_down [L, E, F, M]}
    layers/moe/shared/{w_gate [L, M, Fs], w_up [L, M, Fs], w_down [L, Fs, M], gate [L, M, 1]}  (optional)

Letters: B batch, T tokens, L layers, M model dim, H/K query/kv heads, D head dim, E experts,
F expert dim, V vocab.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from trace_jax import attention, checks, moe
from trace_jax import numerics as nx
from trace_jax import quant as Q
from trace_jax import sharding as SH


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    n_experts: int
    top_k: int
    d_expert: int
    d_shared: int = 0  # shared expert width; 0 = no shared expert
    norm_topk_prob: bool = True
    rope_theta: float = 1_000_000.0
    norm_eps: float = 1e-6
    tie_embeddings: bool = False
    max_seq_len: int = 4096
    param_dtype: str = "float32"  # the trainer's master weights
    dtype: str = "bfloat16"  # activations
    init_std: float = 0.02
    # training forwards (no cache) run each run of identically-quantized layers as one lax.scan:
    # compile time grows slowly with depth (experiments/results/compile_time.md: 1.8x faster at
    # 32 layers, within noise at 8-16); values equal up to fusion/rounding order (f32 gradients to
    # 1e-4; with bf16 activations a different rounding can flip unhinted FP4 codes). Rollouts stay
    # unrolled.
    scan_layers: bool = False

    def __post_init__(self):
        pos = ["vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim",
               "n_experts", "top_k", "d_expert", "max_seq_len"]
        for f in pos:
            if getattr(self, f) <= 0:
                raise ValueError(f"model.{f} must be positive, got {getattr(self, f)}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"model.n_heads={self.n_heads} is not divisible by model.n_kv_heads={self.n_kv_heads}")
        if self.top_k > self.n_experts:
            raise ValueError(f"model.top_k={self.top_k} exceeds model.n_experts={self.n_experts}")
        if self.head_dim % 2:
            raise ValueError(f"model.head_dim={self.head_dim} must be even for RoPE")
        if self.d_shared < 0:
            raise ValueError(f"model.d_shared must be >= 0, got {self.d_shared}")

    @classmethod
    def from_config(cls, cd) -> "ModelConfig":
        d = dict(cd)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown model config fields {unknown}; known: {sorted(known)}")
        return cls(**d)

    @property
    def expert_dtype(self):
        return jnp.dtype(self.param_dtype)

    def check_fp4(self, fmt: str):
        """Every quantized axis must be a whole number of FP4 blocks."""
        B = Q.get_format(fmt).block_size
        for name, n in [("d_model", self.d_model), ("d_expert", self.d_expert),
                        ("head_dim", self.head_dim)]:
            if n % B:
                raise ValueError(f"model.{name}={n} is not divisible by the {fmt} block size {B}")


# --------------------------------------------------------------------------------------------
# Parameters


def param_shapes(cfg: ModelConfig) -> dict:
    """The params pytree as (shape, logical axes) leaves; nothing is allocated."""
    L, M, H, K, D = cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    E, F, V = cfg.n_experts, cfg.d_expert, cfg.vocab_size
    p = {
        "embed": ((V, M), ("vocab", "embed")),
        "final_norm": ((M,), ("embed",)),
        "layers": {
            "attn_norm": ((L, M), ("layers", "embed")),
            "mlp_norm": ((L, M), ("layers", "embed")),
            "attn": {
                "wq": ((L, M, H * D), ("layers", "embed", "q_heads")),
                "wk": ((L, M, K * D), ("layers", "embed", "kv_heads")),
                "wv": ((L, M, K * D), ("layers", "embed", "kv_heads")),
                "wo": ((L, H * D, M), ("layers", "q_heads", "embed")),
                "q_norm": ((L, D), ("layers", "head_dim")),
                "k_norm": ((L, D), ("layers", "head_dim")),
            },
            "moe": {
                "router": ((L, M, E), ("layers", "embed", "experts")),
                "w_gate": ((L, E, M, F), ("layers", "experts", "embed_moe", "expert_mlp")),
                "w_up": ((L, E, M, F), ("layers", "experts", "embed_moe", "expert_mlp")),
                "w_down": ((L, E, F, M), ("layers", "experts", "expert_mlp", "embed_moe")),
            },
        },
    }
    if cfg.d_shared:
        Fs = cfg.d_shared
        p["layers"]["moe"]["shared"] = {
            "w_gate": ((L, M, Fs), ("layers", "embed", "mlp")),
            "w_up": ((L, M, Fs), ("layers", "embed", "mlp")),
            "w_down": ((L, Fs, M), ("layers", "mlp", "embed")),
            "gate": ((L, M, 1), ("layers", "embed", None)),
        }
    if not cfg.tie_embeddings:
        p["lm_head"] = ((M, V), ("embed", "vocab"))
    return p


def _is_spec(x):
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], tuple)


def param_axes(cfg: ModelConfig) -> dict:
    """Logical axis names for every parameter (mapped to mesh axes by ``trace_jax.sharding``)."""
    return jax.tree.map(lambda s: s[1], param_shapes(cfg), is_leaf=_is_spec)


@functools.partial(jax.jit, static_argnames=("cfg", "dtype"))
def init_params(cfg: ModelConfig, key: jax.Array, dtype=None) -> dict:
    """Random initial params (norms 1, weights N(0, init_std), output projections scaled by
    1/sqrt(2L)), one compiled program per (cfg, dtype): op by op, every leaf's draw would compile
    on its own. ``jax.eval_shape(lambda k: init_params(cfg, k), key)`` describes a 30B model
    without allocating it."""
    dtype = jnp.dtype(dtype or cfg.param_dtype)
    shapes = param_shapes(cfg)
    leaves, treedef = jax.tree.flatten(shapes, is_leaf=_is_spec)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(
        shapes, is_leaf=_is_spec)[0]]
    keys = jax.random.split(key, len(leaves))
    out = []
    for path, (shape, _), k in zip(paths, leaves, keys):
        if "norm" in path:
            out.append(jnp.ones(shape, dtype))
            continue
        std = cfg.init_std
        if "'wo'" in path or "'w_down'" in path:
            std = std / (2 * cfg.n_layers) ** 0.5
        out.append((std * jax.random.normal(k, shape, jnp.float32)).astype(dtype))
    return jax.tree.unflatten(treedef, out)


def pack_params(params: dict, numerics: nx.Numerics, dtype=jnp.bfloat16, scale_rule="max",
                kernel_layout: bool | str = False, per_layer: bool | None = None) -> dict:
    """Rollout params: every weight cast to ``dtype`` and, for ``fp4_rollout``, the quantized
    expert weights packed to FP4 QTensors (quantized once, the same way the QAT trainer
    fake-quantizes them, so identical masters give identical codes). ``scale_rule`` selects
    the block-scale rule (``"four_over_six"`` for that PTQ baseline). ``kernel_layout`` stores
    the packed experts in a Pallas FP4 grouped-matmul layout (the same codes and scales,
    rearranged once here, not per step; ``True`` or a kernel name, ``"auto"`` / ``"triton"`` /
    ``"mosaic"``: ``pallas_kernels.fp4_matmul.prepare_expert_weights``) and, unless
    ``per_layer=False``, the layers as a per-layer tuple (:func:`unstack_layers`)."""
    kernel = expert_kernel(kernel_layout)
    out = _pack_stacked(params, numerics, dtype, scale_rule, kernel)
    per_layer = kernel is not None if per_layer is None else per_layer
    return unstack_layers(out) if per_layer else out


EXPERT_KERNELS = ("auto", "triton", "mosaic")  # pallas_kernels.fp4_matmul.prepare_expert_weights


def expert_kernel(kernel_layout: bool | str) -> str | None:
    """The grouped-matmul kernel named by a ``kernel_layout`` argument: None (False: packed FP4
    QTensors, dequantize + grouped matmul), ``"auto"`` (True), ``"triton"`` or ``"mosaic"``."""
    if kernel_layout is False or kernel_layout is None:
        return None
    if kernel_layout is True:
        return "auto"
    if kernel_layout in EXPERT_KERNELS:
        return kernel_layout
    raise ValueError(f"kernel_layout={kernel_layout!r}: use False, True, 'auto', 'triton' or "
                     f"'mosaic'")


def _pack_stacked(params, numerics, dtype, scale_rule, kernel):
    out = jax.tree.map(lambda a: a.astype(dtype), params)
    if numerics.mode != "fp4_rollout":
        return out
    L = params["layers"]["moe"]["w_gate"].shape[0]
    names = [nx.site_name(l, "moe/expert_weights") for l in range(L)]
    flags = [numerics.quantizes(n) for n in names]
    if not any(flags):
        return out
    if not all(flags):
        raise ValueError("fp4_rollout with expert weights quantized on only some layers is not "
                         "supported (stacked params need one type per leaf)")
    moe_p = dict(out["layers"]["moe"])
    for w in ("w_gate", "w_up", "w_down"):
        moe_p[w] = nx.quantize_weight(params["layers"]["moe"][w].astype(jnp.float32), numerics.fmt,
                                      scale_rule)
        if kernel is not None:
            from pallas_kernels.fp4_matmul import prepare_expert_weights

            moe_p[w] = jax.vmap(functools.partial(prepare_expert_weights, kernel=kernel))(
                moe_p[w])  # over the stacked layers
    out["layers"] = dict(out["layers"], moe=moe_p)
    return out


def unstack_layers(params: dict) -> dict:
    """``params`` with ``params["layers"]`` as a tuple of per-layer dicts (leading axis dropped).

    The rollout layout for the Pallas kernels: a layer's slice of a stacked weight handed to a
    Pallas call must first be copied out (XLA cannot pass a sub-buffer to a custom call), which
    cost 0.16 ms per layer per decode step for the FP4 experts and 0.56 ms for bf16 on an H200
    (session 6 profile); separate per-layer arrays are passed as they are. ``forward`` takes
    either layout; the trainer keeps the stacked one (its forward is a ``lax.scan``)."""
    layers = params["layers"]
    if isinstance(layers, (tuple, list)):
        return dict(params, layers=tuple(layers))
    n = jax.tree.leaves(layers)[0].shape[0]
    per = tuple(jax.tree.map(lambda a, l=l: a[l], layers) for l in range(n))
    return dict(params, layers=per)


def stack_layers(params: dict) -> dict:
    """The inverse of :func:`unstack_layers`."""
    layers = params["layers"]
    if not isinstance(layers, (tuple, list)):
        return params
    return dict(params, layers=jax.tree.map(lambda *a: jnp.stack(a), *layers))


def layer_params(params: dict, layer: int) -> dict:
    """Layer ``layer``'s params from either layout (stacked arrays or a per-layer tuple)."""
    layers = params["layers"]
    if isinstance(layers, (tuple, list)):
        return layers[layer]
    return jax.tree.map(lambda a: a[layer], layers)


# --------------------------------------------------------------------------------------------
# Forward


class Aux(NamedTuple):
    # [L, B, T, k] the routers' own top-k (smallest unsigned int dtype that fits); under routing
    # replay the layers compute with the forced experts, and this says what the router chose
    experts: jax.Array
    lb_loss: jax.Array  # mean over layers
    z_loss: jax.Array
    hints: dict  # site name -> Hint (captured hinted sites)
    codes: dict  # site name -> exact Hint (all quantized activation sites, if asked)


def expert_dtype(n_experts: int):
    return jnp.uint8 if n_experts <= 256 else jnp.uint16


def forward(
    params: dict,
    tokens_BxT: jax.Array,
    *,
    cfg: ModelConfig,
    numerics: nx.Numerics,
    positions_BxT: jax.Array | None = None,
    valid_BxT: jax.Array | None = None,
    cache: Any = None,
    hints: dict | None = None,
    forced_experts_LxBxTxK: jax.Array | None = None,
    hint_experts_LxBxTxK: jax.Array | None = None,
    hint_valid_BxT: jax.Array | None = None,
    capture_hints: bool = False,
    capture_codes: bool = False,
):
    """Logits (f32 [B, T, V]), :class:`Aux`, and the updated cache (None without a cache).

    ``cache`` + T == 1: one decode step at slot ``positions[b]``; ``cache`` + T > 1: prefill of an
    empty cache; no cache: training forward (causal over the whole sequence). ``hints`` (site name
    -> Hint in site layout) steer the QAT rounding; ``forced_experts`` replays routing;
    ``hint_experts`` (the rollout's experts) say which ``expert_hidden`` hint rows apply and
    ``hint_valid`` which positions carry hints at all (RTN elsewhere).
    """
    B, T = tokens_BxT.shape
    if T > cfg.max_seq_len:
        raise ValueError(f"sequence of {T} tokens exceeds model.max_seq_len={cfg.max_seq_len}")
    if numerics.is_fp4:
        cfg.check_fp4(numerics.fmt)
    dt = jnp.dtype(cfg.dtype)
    if positions_BxT is None:
        positions_BxT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32)[None], (B, T))
    if valid_BxT is None:
        valid_BxT = jnp.ones((B, T), bool)
    for name, arr in (("positions_BxT", positions_BxT), ("valid_BxT", valid_BxT),
                      ("hint_valid_BxT", hint_valid_BxT)):
        if arr is not None and tuple(arr.shape) != (B, T):  # (a [T, B] mask would reshape fine)
            raise ValueError(f"{name} shape {tuple(arr.shape)} != the tokens' (B, T) = {(B, T)}")
    for name, arr in (("forced_experts", forced_experts_LxBxTxK),
                      ("hint_experts", hint_experts_LxBxTxK)):
        if arr is not None and arr.shape != (cfg.n_layers, B, T, cfg.top_k):
            raise ValueError(f"{name} shape {arr.shape} != (L, B, T, k) = "
                             f"{(cfg.n_layers, B, T, cfg.top_k)}")
        if arr is not None:  # (concrete ids only; an id past the experts gave NaN logits)
            checks.check_range(f"{name} ids", arr, 0, cfg.n_experts - 1, "the experts")
    if hints is not None and numerics.mode != "fp4_rollout":
        missing = sorted(n for n in numerics.hinted - set(hints) if numerics.quantizes(n))
        if missing:  # (RTN there would turn TRACE into plain QAT without a word)
            raise ValueError(f"no hint given for {len(missing)} of the numerics' hinted sites "
                             f"({missing[:3]}...); pass hints=None for round-to-nearest at all")
    if hint_experts_LxBxTxK is None and any(k.endswith("/moe/expert_hidden") for k in hints or {}):
        raise ValueError("expert_hidden hints need hint_experts_LxBxTxK (the rollout's experts): "
                         "their rows belong to the rollout's (token, expert) slots")
    sio = nx.SiteIO(numerics, hints, capture_hints, capture_codes, hint_valid_BxT)

    V = params["embed"].shape[0]
    checks.check_range("token ids", tokens_BxT, 0, V - 1, "the vocabulary")
    # Traced ids cannot be checked here: one outside 0..V-1 embeds as NaN (not a clamped or
    # wrapped row), so its logits are NaN and the trainer's non-finite guard stops it.
    x = params["embed"].at[tokens_BxT].get(mode="fill", fill_value=jnp.nan,
                                           wrap_negative_indices=False)
    x = SH.constrain_batch(x.astype(dt))
    forced, hexp = forced_experts_LxBxTxK, hint_experts_LxBxTxK

    def layer_fn(p, x, layer, sio, cache_l, forced_l, hexp_l):
        h = attention.rms_norm(x, p["attn_norm"], cfg.norm_eps)
        a, c = attention.attention_block(p["attn"], h, positions_BxT, cfg=cfg, sio=sio,
                                         layer=layer, cache=cache_l)
        x = x + a
        h = attention.rms_norm(x, p["mlp_norm"], cfg.norm_eps)
        m, experts, (lb, z) = moe.moe_block(p["moe"], h, cfg=cfg, sio=sio, layer=layer,
                                            valid_BxT=valid_BxT, forced_BxTxK=forced_l,
                                            hint_experts_BxTxK=hexp_l)
        return SH.constrain_batch(x + m), experts.astype(expert_dtype(cfg.n_experts)), lb, z, c

    all_experts, lbs, zs, new_cache = [], [], [], []
    per_layer = isinstance(params["layers"], (tuple, list))
    if per_layer and len(params["layers"]) != cfg.n_layers:
        raise ValueError(f"params hold {len(params['layers'])} layers (per-layer layout), "
                         f"model.n_layers={cfg.n_layers}")
    if cache is None and cfg.scan_layers and not per_layer:
        for l0, l1 in _layer_groups(numerics, sio.hints_in, cfg.n_layers):
            x, ex, lb, z = _scan_group(layer_fn, params["layers"], x, l0, l1, sio, forced, hexp)
            all_experts += list(ex)
            lbs += list(lb)
            zs += list(z)
    else:
        for layer in range(cfg.n_layers):
            p = layer_params(params, layer)
            x, experts, lb, z, c = layer_fn(
                p, x, layer, sio, None if cache is None else cache[layer],
                None if forced is None else forced[layer], None if hexp is None else hexp[layer])
            new_cache.append(c)
            all_experts.append(experts)
            lbs.append(lb)
            zs.append(z)

    x = attention.rms_norm(x, params["final_norm"], cfg.norm_eps)
    head = params["embed"].T if cfg.tie_embeddings else params["lm_head"]
    logits = lm_logits(x, head.astype(dt))
    aux = Aux(jnp.stack(all_experts), jnp.mean(jnp.stack(lbs)), jnp.mean(jnp.stack(zs)),
              sio.hints_out, sio.codes_out)
    return logits, aux, (None if cache is None else tuple(new_cache))


@jax.custom_vjp
def lm_logits(x_BxTxM, head_MxV):
    """f32 logits ``x @ head`` (f32 accumulation). The backward casts the f32 logit cotangent
    to x's dtype before its two GEMMs, so with bf16 activations they run as bf16 GEMMs with f32
    accumulation; XLA's own VJP promotes them to f32 (TF32 on the GPU: 29 of 117 ms in the
    30B-shape train step, 2 layers x 8K tokens, vocab 152K). Reverse mode only (no jvp rule)."""
    return jnp.dot(x_BxTxM, head_MxV, preferred_element_type=jnp.float32)


def _lm_logits_fwd(x, head):
    return lm_logits(x, head), (x, head)


def _lm_logits_bwd(res, g_BxTxV):
    x, head = res
    g = g_BxTxV.astype(x.dtype)
    dx = jnp.dot(g, head.T, preferred_element_type=jnp.float32).astype(x.dtype)
    dhead = jnp.einsum("...m,...v->mv", x, g, preferred_element_type=jnp.float32)
    return dx, dhead.astype(head.dtype)


lm_logits.defvjp(_lm_logits_fwd, _lm_logits_bwd)


def _layer_groups(numerics: nx.Numerics, hints_in: dict, n_layers: int) -> list[tuple[int, int]]:
    """Maximal runs [l0, l1) of consecutive layers that quantize, hint and receive hints at the
    same site kinds (one lax.scan each)."""
    def signature(layer):
        names = [nx.site_name(layer, k) for k in nx.SITE_KINDS]
        return tuple((numerics.quantizes(n), numerics.hints(n), n in hints_in) for n in names)

    groups, start = [], 0
    for layer in range(1, n_layers + 1):
        if layer == n_layers or signature(layer) != signature(start):
            groups.append((start, layer))
            start = layer
    return groups


def _scan_group(layer_fn, layers_p, x, l0, l1, sio: nx.SiteIO, forced, hexp):
    """Layers l0..l1-1 as one lax.scan over their stacked params, hints and routing; the body is
    traced once as layer ``l0`` (every layer of the group has its site decisions). Captured hints
    and codes come back keyed by each layer's own site names."""
    def kind_of(name):
        return name.split("/", 2)[2]  # "layers/{l}/moe/expert_in" -> "moe/expert_in"

    stack = lambda trees: jax.tree.map(lambda *a: jnp.stack(a), *trees)  # noqa: E731
    kinds_in = sorted({kind_of(n) for n in sio.hints_in if n.startswith(f"layers/{l0}/")})
    hints = {k: stack([sio.hints_in[nx.site_name(l, k)] for l in range(l0, l1)]) for k in kinds_in}
    xs = (jax.tree.map(lambda a: a[l0:l1], layers_p), hints,
          None if forced is None else forced[l0:l1], None if hexp is None else hexp[l0:l1])

    def body(x, xs_l):
        p, h, forced_l, hexp_l = xs_l
        sub = nx.SiteIO(sio.numerics, {nx.site_name(l0, k): v for k, v in h.items()},
                        sio.capture_hints, sio.capture_codes, sio.hint_valid)
        x, experts, lb, z, _ = layer_fn(p, x, l0, sub, None, forced_l, hexp_l)
        outs = ({kind_of(n): v for n, v in sub.hints_out.items()},
                {kind_of(n): v for n, v in sub.codes_out.items()})
        return x, (experts, lb, z, outs)

    x, (experts, lb, z, (h_out, c_out)) = jax.lax.scan(body, x, xs)
    for i, layer in enumerate(range(l0, l1)):
        for k, v in h_out.items():
            sio.hints_out[nx.site_name(layer, k)] = jax.tree.map(lambda a, i=i: a[i], v)
        for k, v in c_out.items():
            sio.codes_out[nx.site_name(layer, k)] = jax.tree.map(lambda a, i=i: a[i], v)
    return x, experts, lb, z
