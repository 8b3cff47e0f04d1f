"""Hugging Face Qwen3-MoE checkpoints <-> trace_jax params.

``load_hf_config(path)`` reads a ``config.json``; ``import_hf(path)`` reads it plus the sharded
``*.safetensors`` (with ``model.safetensors.index.json``) or a single ``model.safetensors``;
``export_hf(params, cfg, path)`` writes the same layout back. ``import_hf(export_hf(p))`` is
bit-exact in the dtype the params had.

Name mapping (torch ``Linear`` weights are ``[out, in]``; ours are ``[in, out]``, so every
projection is transposed; per-layer tensors are stacked on the leading ``L`` (and ``E``) axes)::

    model.embed_tokens.weight [V, M]                        -> embed [V, M]
    model.norm.weight [M]                                   -> final_norm [M]
    lm_head.weight [V, M]                                   -> lm_head [M, V]     (absent when tied)
    model.layers.{i}.input_layernorm.weight                 -> layers/attn_norm[i]
    model.layers.{i}.post_attention_layernorm.weight        -> layers/mlp_norm[i]
    model.layers.{i}.self_attn.{q,k,v,o}_proj.weight        -> layers/attn/{wq,wk,wv,wo}[i]   (.T)
    model.layers.{i}.self_attn.{q,k}_norm.weight            -> layers/attn/{q,k}_norm[i]
    model.layers.{i}.mlp.gate.weight [E, M]                 -> layers/moe/router[i] [M, E]
    model.layers.{i}.mlp.experts.{e}.{gate,up}_proj.weight  -> layers/moe/{w_gate,w_up}[i, e] [M, F]
    model.layers.{i}.mlp.experts.{e}.down_proj.weight       -> layers/moe/w_down[i, e] [F, M]
    model.layers.{i}.mlp.shared_expert.{gate,up,down}_proj.weight
                                                        -> layers/moe/shared/{w_gate,w_up,w_down}[i]
    model.layers.{i}.mlp.shared_expert_gate.weight [1, M]   -> layers/moe/shared/gate[i] [M, 1]

RoPE needs no q/k row permutation: ``attention.rope`` uses HF's rotate-half convention.

The shared expert uses Qwen2-MoE's tensor names, but a real ``qwen2_moe`` checkpoint is refused by
``load_hf_config``: its attention has (hard-wired) q/k/v biases and no q/k RMSNorm, which this
model does not have. A ``qwen3_moe`` config with ``shared_expert_intermediate_size > 0`` (what
``export_hf`` writes for a model with a shared expert) is accepted; note that Hugging Face's own
Qwen3-MoE class ignores that field, so such an export is for trace_jax (or a custom HF class).

Loading is tensor by tensor with ``safetensors.safe_open(framework="np")`` (memory-mapped), one
stacked leaf at a time, so host memory peaks at about one leaf on top of the params themselves.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Iterator, NamedTuple

import jax
import jax.numpy as jnp
import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy; safetensors' numpy API uses it)
import numpy as np

from trace_jax.model import ModelConfig, param_shapes

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
CONFIG = "config.json"
DEFAULT_MAX_SHARD_BYTES = 5_000_000_000  # Hugging Face's default "5GB"
_SHOW = 8  # names listed in error messages


# --------------------------------------------------------------------------------------------
# config.json


def _config_file(path) -> str:
    path = os.fspath(path)
    return os.path.join(path, CONFIG) if os.path.isdir(path) else path


def load_hf_config(path) -> ModelConfig:
    """A :class:`ModelConfig` from a Hugging Face Qwen3-MoE ``config.json`` (``path`` is the file
    or its directory). Features that would silently change the math raise ``ValueError`` naming
    the field."""
    fn = _config_file(path)
    with open(fn) as f:
        c = json.load(f)

    def bad(field, why):
        raise ValueError(f"{fn}: unsupported Hugging Face config {field}={c.get(field)!r}: {why}")

    mt = c.get("model_type", "qwen3_moe")
    if mt == "qwen2_moe":
        bad("model_type", "Qwen2-MoE attention has q/k/v projection biases and no q/k RMSNorm; "
            "trace_jax's attention (Qwen3) has q/k RMSNorm and no biases")
    if mt != "qwen3_moe":
        bad("model_type", "only 'qwen3_moe' checkpoints are supported")
    if c.get("hidden_act", "silu") != "silu":
        bad("hidden_act", "experts are SwiGLU with silu")
    for f in ("attention_bias", "qkv_bias"):
        if c.get(f, False):
            bad(f, "attention projections have no bias")
    if c.get("use_sliding_window", False):
        bad("use_sliding_window", "only full causal attention is implemented")
    lt = c.get("layer_types")
    if lt is not None and any(t != "full_attention" for t in lt):
        bad("layer_types", "only full_attention layers are implemented")
    if c.get("decoder_sparse_step", 1) != 1:
        bad("decoder_sparse_step", "every layer must be an MoE layer (step 1)")
    if c.get("mlp_only_layers"):
        bad("mlp_only_layers", "dense-MLP layers are not implemented")
    if c.get("attention_dropout", 0.0):
        bad("attention_dropout", "the model has no dropout")

    rope_theta = c.get("rope_theta", 10_000.0)
    for f in ("rope_scaling", "rope_parameters"):
        rp = c.get(f)
        if rp is None:
            continue
        kind = rp.get("rope_type", rp.get("type", "default"))
        extra = sorted(set(rp) - {"rope_type", "type", "rope_theta"})
        if kind != "default" or extra:
            bad(f, "only plain RoPE (no scaling) is implemented")
        rope_theta = rp.get("rope_theta", rope_theta)

    required = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "num_experts", "num_experts_per_tok", "moe_intermediate_size"]
    missing = [f for f in required if c.get(f) is None]
    if missing:
        raise ValueError(f"{fn}: Hugging Face config lacks required fields {missing}")
    M, H = int(c["hidden_size"]), int(c["num_attention_heads"])
    head_dim = c.get("head_dim")
    if head_dim is None:
        if M % H:
            raise ValueError(f"{fn}: head_dim absent and hidden_size={M} is not divisible by "
                             f"num_attention_heads={H}")
        head_dim = M // H
    return ModelConfig(
        vocab_size=int(c["vocab_size"]),
        d_model=M,
        n_layers=int(c["num_hidden_layers"]),
        n_heads=H,
        n_kv_heads=int(c.get("num_key_value_heads") or H),
        head_dim=int(head_dim),
        n_experts=int(c["num_experts"]),
        top_k=int(c["num_experts_per_tok"]),
        d_expert=int(c["moe_intermediate_size"]),
        d_shared=int(c.get("shared_expert_intermediate_size") or 0),
        norm_topk_prob=bool(c.get("norm_topk_prob", False)),  # HF's Qwen3MoeConfig default
        rope_theta=float(rope_theta),
        norm_eps=float(c.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(c.get("tie_word_embeddings", False)),
        max_seq_len=int(c.get("max_position_embeddings", 32768)),
    )


def hf_config_dict(cfg: ModelConfig, torch_dtype: str = "bfloat16") -> dict:
    """The ``config.json`` contents for ``cfg`` (Qwen3-MoE naming)."""
    d = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.d_expert,  # dense-MLP width; unused (every layer is MoE)
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_seq_len,
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "num_experts": cfg.n_experts,
        "num_experts_per_tok": cfg.top_k,
        "moe_intermediate_size": cfg.d_expert,
        "norm_topk_prob": cfg.norm_topk_prob,
        "tie_word_embeddings": cfg.tie_embeddings,
        "torch_dtype": torch_dtype,
    }
    if cfg.d_shared:
        d["shared_expert_intermediate_size"] = cfg.d_shared
    return d


# --------------------------------------------------------------------------------------------
# The name table


class Entry(NamedTuple):
    name: str  # Hugging Face tensor name
    leaf: tuple  # path of keys into the params pytree
    index: tuple  # position inside the stacked leaf
    shape: tuple  # Hugging Face shape
    transpose: bool  # HF tensor is the transpose of params[leaf][index]


def hf_entries(cfg: ModelConfig) -> list[Entry]:
    """Every Hugging Face tensor of ``cfg``'s checkpoint, grouped leaf by leaf (the order
    ``export_hf`` writes and ``import_hf`` reads)."""
    shapes = param_shapes(cfg)
    L, E = cfg.n_layers, cfg.n_experts
    out: list[Entry] = []

    def leaf_shape(leaf):
        s = shapes
        for k in leaf:
            s = s[k]
        return s[0]

    def add(leaf, fmt, transpose, per_expert=False):
        full = leaf_shape(leaf)
        if leaf[0] != "layers":
            out.append(Entry(fmt, leaf, (), full[::-1] if transpose else full, transpose))
            return
        inner = full[2:] if per_expert else full[1:]
        hf_shape = inner[::-1] if transpose else inner
        for i in range(L):
            for e in (range(E) if per_expert else [None]):
                idx = (i,) if e is None else (i, e)
                out.append(Entry(fmt.format(i=i, e=e), leaf, idx, hf_shape, transpose))

    pre = "model.layers.{i}."
    add(("embed",), "model.embed_tokens.weight", False)
    add(("layers", "attn_norm"), pre + "input_layernorm.weight", False)
    add(("layers", "mlp_norm"), pre + "post_attention_layernorm.weight", False)
    for ours, theirs in (("wq", "q_proj"), ("wk", "k_proj"), ("wv", "v_proj"), ("wo", "o_proj")):
        add(("layers", "attn", ours), pre + f"self_attn.{theirs}.weight", True)
    add(("layers", "attn", "q_norm"), pre + "self_attn.q_norm.weight", False)
    add(("layers", "attn", "k_norm"), pre + "self_attn.k_norm.weight", False)
    add(("layers", "moe", "router"), pre + "mlp.gate.weight", True)
    for ours, theirs in (("w_gate", "gate_proj"), ("w_up", "up_proj"), ("w_down", "down_proj")):
        add(("layers", "moe", ours), pre + "mlp.experts.{e}." + theirs + ".weight", True,
            per_expert=True)
    if cfg.d_shared:
        for ours, theirs in (("w_gate", "gate_proj"), ("w_up", "up_proj"),
                             ("w_down", "down_proj")):
            add(("layers", "moe", "shared", ours), pre + f"mlp.shared_expert.{theirs}.weight", True)
        add(("layers", "moe", "shared", "gate"), pre + "mlp.shared_expert_gate.weight", True)
    add(("final_norm",), "model.norm.weight", False)
    if not cfg.tie_embeddings:
        add(("lm_head",), "lm_head.weight", True)
    return out


def _group_by_leaf(entries) -> Iterator[tuple[tuple, list[Entry]]]:
    cur, group = None, []
    for e in entries:
        if e.leaf != cur and group:
            yield cur, group
            group = []
        cur = e.leaf
        group.append(e)
    if group:
        yield cur, group


def _few(names) -> str:
    names = list(names)
    more = f" ... and {len(names) - _SHOW} more" if len(names) > _SHOW else ""
    return f"{names[:_SHOW]}{more}"


def _set_leaf(tree: dict, leaf: tuple, value):
    for k in leaf[:-1]:
        tree = tree.setdefault(k, {})
    tree[leaf[-1]] = value


def _get_leaf(tree: dict, leaf: tuple):
    for k in leaf:
        tree = tree[k]
    return tree


# --------------------------------------------------------------------------------------------
# Import


def _checkpoint_files(path: str) -> dict[str, str]:
    """HF tensor name -> file name (relative to ``path``)."""
    from safetensors import safe_open

    idx = os.path.join(path, INDEX)
    if os.path.exists(idx):
        with open(idx) as f:
            weight_map = json.load(f)["weight_map"]
        absent = sorted({fn for fn in weight_map.values()
                         if not os.path.exists(os.path.join(path, fn))})
        if absent:
            raise FileNotFoundError(f"{idx} names shard files that do not exist: {_few(absent)}")
        return dict(weight_map)
    single = os.path.join(path, SINGLE)
    if os.path.exists(single):
        with safe_open(single, framework="np") as f:
            return {k: SINGLE for k in f.keys()}
    raise FileNotFoundError(f"{path} has neither {INDEX} nor {SINGLE}")


def import_hf(path, *, dtype=jnp.float32) -> tuple[ModelConfig, dict]:
    """``(cfg, params)`` from a Hugging Face Qwen3-MoE checkpoint directory.

    ``dtype``: the params' dtype (``None`` keeps the stored dtype, which must then be one for
    every tensor); ``cfg.param_dtype`` is set to match. Missing or unexpected tensors, shape
    mismatches and mixed stored dtypes with ``dtype=None`` raise ``ValueError`` before any
    weight is read."""
    from safetensors import safe_open

    path = os.fspath(path)
    cfg = load_hf_config(path)
    entries = hf_entries(cfg)
    files = _checkpoint_files(path)

    expected = {e.name for e in entries}
    missing = [e.name for e in entries if e.name not in files]
    unexpected = sorted(set(files) - expected)
    if missing or unexpected:
        msg = [f"{path}: checkpoint tensors do not match the config"]
        if missing:
            msg.append(f"{len(missing)} missing: {_few(missing)}")
        if unexpected:
            msg.append(f"{len(unexpected)} unexpected: {_few(unexpected)}")
        raise ValueError("; ".join(msg))

    handles = {}
    try:
        for fn in sorted(set(files.values())):
            handles[fn] = safe_open(os.path.join(path, fn), framework="np")

        bad, stored = [], {}
        for e in entries:
            sl = handles[files[e.name]].get_slice(e.name)
            got = tuple(sl.get_shape())
            if got != tuple(e.shape):
                bad.append(f"{e.name}: {got} (expected {tuple(e.shape)})")
            stored.setdefault(sl.get_dtype(), []).append(e.name)
        if bad:
            raise ValueError(f"{path}: {len(bad)} tensors have the wrong shape: {_few(bad)}")
        if dtype is None and len(stored) > 1:  # (one stacked leaf, one param_dtype: no mixing)
            raise ValueError(
                f"{path}: dtype=None keeps the stored dtype, but the tensors are stored in "
                f"{len(stored)} dtypes ("
                + "; ".join(f"{k}: {len(v)}, e.g. {_few(v)}" for k, v in sorted(stored.items()))
                + "); pass dtype= (e.g. jnp.bfloat16 or jnp.float32) to convert them to one")

        shapes = param_shapes(cfg)
        params: dict = {}
        leaf_dtypes = set()
        for leaf, group in _group_by_leaf(entries):
            buf = None
            for e in group:
                t = handles[files[e.name]].get_tensor(e.name)
                if buf is None:
                    full = _get_leaf(shapes, leaf)[0]
                    buf = np.empty(full, dtype=t.dtype if dtype is None else jnp.dtype(dtype))
                buf[e.index] = t.T if e.transpose else t
                del t
            _set_leaf(params, leaf, jnp.asarray(buf))
            leaf_dtypes.add(buf.dtype)
            del buf
    finally:
        for h in handles.values():
            if hasattr(h, "__exit__"):
                h.__exit__(None, None, None)
    (param_dtype,) = {d.name for d in leaf_dtypes}  # (one: dtype given, or every tensor's)
    return dataclasses.replace(cfg, param_dtype=param_dtype), params


# --------------------------------------------------------------------------------------------
# Export


def _check_params(params: dict, cfg: ModelConfig):
    want = {jax.tree_util.keystr(p): s[0] for p, s in jax.tree_util.tree_flatten_with_path(
        param_shapes(cfg), is_leaf=lambda x: isinstance(x, tuple) and isinstance(x[0], tuple))[0]}
    have = {jax.tree_util.keystr(p): a for p, a in jax.tree_util.tree_flatten_with_path(params)[0]}
    missing, extra = sorted(set(want) - set(have)), sorted(set(have) - set(want))
    bad = [f"{k}: {tuple(getattr(have[k], 'shape', ()))} (expected {want[k]})"
           for k in sorted(set(want) & set(have))
           if tuple(getattr(have[k], "shape", ())) != tuple(want[k])]
    if missing or extra or bad:
        raise ValueError(f"params do not match the config: missing {_few(missing)}, "
                         f"unexpected {_few(extra)} (packed FP4 params cannot be exported), "
                         f"wrong shape {_few(bad)}")


def export_hf(params: dict, cfg: ModelConfig, path, *,
              max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES, overwrite: bool = False) -> None:
    """Write ``config.json`` and the weights as Hugging Face Qwen3-MoE safetensors to ``path``:
    one ``model.safetensors`` if everything fits in ``max_shard_bytes``, else
    ``model-0000i-of-0000n.safetensors`` shards plus ``model.safetensors.index.json``. Each tensor
    keeps its leaf's dtype (bf16 stays bf16). A directory already holding a checkpoint is refused
    unless ``overwrite`` (which deletes its ``model*.safetensors`` and index first)."""
    from safetensors.numpy import save_file

    path = os.fspath(path)
    _check_params(params, cfg)
    os.makedirs(path, exist_ok=True)
    stale = sorted(fn for fn in os.listdir(path)
                   if fn == INDEX or (fn.startswith("model") and fn.endswith(".safetensors")))
    if stale:
        if not overwrite:
            raise FileExistsError(f"{path} already holds a checkpoint ({_few(stale)}); "
                                  "pass overwrite=True to replace it")
        for fn in stale:
            os.remove(os.path.join(path, fn))

    entries = hf_entries(cfg)
    itemsize = {e.leaf: jnp.dtype(_get_leaf(params, e.leaf).dtype).itemsize for e in entries}
    shards: list[list[Entry]] = [[]]
    size, total = 0, 0
    for e in entries:
        n = int(np.prod(e.shape)) * itemsize[e.leaf]
        if shards[-1] and size + n > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(e)
        size += n
        total += n

    n_sh = len(shards)
    names = [SINGLE] if n_sh == 1 else [f"model-{i + 1:05d}-of-{n_sh:05d}.safetensors"
                                        for i in range(n_sh)]
    cached = (None, None)  # (leaf, host array): shards are leaf-major, so each leaf is read once
    weight_map = {}
    for fn, shard in zip(names, shards):
        tensors = {}
        for e in shard:
            if cached[0] != e.leaf:
                cached = (e.leaf, np.asarray(_get_leaf(params, e.leaf)))
            a = cached[1][e.index]
            # safetensors writes raw buffers: the array must be C-contiguous
            tensors[e.name] = np.ascontiguousarray(a.T if e.transpose else a)
            weight_map[e.name] = fn
        save_file(tensors, os.path.join(path, fn), metadata={"format": "pt"})
        del tensors
    del cached
    if n_sh > 1:
        with open(os.path.join(path, INDEX), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)

    torch_dtype = jnp.dtype(params["embed"].dtype).name
    with open(os.path.join(path, CONFIG), "w") as f:
        json.dump(hf_config_dict(cfg, torch_dtype), f, indent=2)
