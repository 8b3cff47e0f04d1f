"""Hugging Face Qwen3-MoE import/export: a tiny checkpoint written here in HF's exact layout
(torch [out, in] weights, HF names, sharded safetensors + index), checked by value, against an
independent numpy forward, through a bit-exact round trip, and for clear errors."""

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from trace_jax import hf
from trace_jax import model as M
from trace_jax import numerics as nx

V, D_MODEL, L, H, K, HD, E, TOPK, F, FS = 48, 32, 2, 4, 2, 16, 4, 2, 16, 24


def hf_config(**over):
    c = {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "vocab_size": V, "hidden_size": D_MODEL, "intermediate_size": 64,
        "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": K,
        "head_dim": HD, "hidden_act": "silu", "max_position_embeddings": 128,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None,
        "attention_bias": False, "attention_dropout": 0.0, "use_sliding_window": False,
        "sliding_window": 4096, "max_window_layers": L, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "num_experts": E, "num_experts_per_tok": TOPK,
        "moe_intermediate_size": F, "norm_topk_prob": True, "output_router_logits": False,
        "router_aux_loss_coef": 0.001, "tie_word_embeddings": False, "torch_dtype": "float32",
        "shared_expert_intermediate_size": FS,
    }
    c.update(over)
    return c


def hf_tensors(seed=0, shared=True, tied=False, dtype=np.float32):
    """Random tensors under HF names and torch shapes ([out, in] for every Linear)."""
    rng = np.random.default_rng(seed)
    r = lambda *s: (0.2 * rng.standard_normal(s)).astype(dtype)  # noqa: E731
    norm = lambda n: (1.0 + 0.1 * rng.standard_normal(n)).astype(dtype)  # noqa: E731
    t = {"model.embed_tokens.weight": r(V, D_MODEL), "model.norm.weight": norm(D_MODEL)}
    if not tied:
        t["lm_head.weight"] = r(V, D_MODEL)
    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = norm(D_MODEL)
        t[p + "post_attention_layernorm.weight"] = norm(D_MODEL)
        t[p + "self_attn.q_proj.weight"] = r(H * HD, D_MODEL)
        t[p + "self_attn.k_proj.weight"] = r(K * HD, D_MODEL)
        t[p + "self_attn.v_proj.weight"] = r(K * HD, D_MODEL)
        t[p + "self_attn.o_proj.weight"] = r(D_MODEL, H * HD)
        t[p + "self_attn.q_norm.weight"] = norm(HD)
        t[p + "self_attn.k_norm.weight"] = norm(HD)
        t[p + "mlp.gate.weight"] = r(E, D_MODEL)
        for e in range(E):
            t[p + f"mlp.experts.{e}.gate_proj.weight"] = r(F, D_MODEL)
            t[p + f"mlp.experts.{e}.up_proj.weight"] = r(F, D_MODEL)
            t[p + f"mlp.experts.{e}.down_proj.weight"] = r(D_MODEL, F)
        if shared:
            t[p + "mlp.shared_expert.gate_proj.weight"] = r(FS, D_MODEL)
            t[p + "mlp.shared_expert.up_proj.weight"] = r(FS, D_MODEL)
            t[p + "mlp.shared_expert.down_proj.weight"] = r(D_MODEL, FS)
            t[p + "mlp.shared_expert_gate.weight"] = r(1, D_MODEL)
    return t


def write_checkpoint(path, tensors, config, n_shards=3):
    """HF layout: config.json, model-0000i-of-0000n.safetensors and the index (or one file)."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    names = list(tensors)
    if n_shards == 1:
        save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
        return
    chunks = np.array_split(np.arange(len(names)), n_shards)
    weight_map = {}
    for s, idx in enumerate(chunks):
        fn = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        save_file({names[j]: tensors[names[j]] for j in idx}, os.path.join(path, fn),
                  metadata={"format": "pt"})
        weight_map.update({names[j]: fn for j in idx})
    total = sum(a.nbytes for a in tensors.values())
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)


# ---- an independent numpy forward in HF's formulation (x @ W.T with torch-layout weights) ----


def _rms(x, w, eps=1e-6):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rope(x_TxNxD, theta):
    T, _, Dh = x_TxNxD.shape
    inv = 1.0 / theta ** (np.arange(0, Dh, 2) / Dh)
    ang = np.arange(T)[:, None] * inv[None]
    emb = np.concatenate([ang, ang], -1)[:, None, :]
    x1, x2 = x_TxNxD[..., : Dh // 2], x_TxNxD[..., Dh // 2:]
    return x_TxNxD * np.cos(emb) + np.concatenate([-x2, x1], -1) * np.sin(emb)


def _silu(x):
    return x / (1.0 + np.exp(-x))


def _bf(x):
    """The routed-expert grouped matmul computes in the activation dtype (float32 in this test),
    so nothing to round: kept as the one place to change if that ever differs."""
    return np.asarray(x, np.float64)


def hf_reference_logits(t, tokens, theta=10000.0, shared=True, tied=False):
    t = {k: v.astype(np.float64) for k, v in t.items()}
    x = t["model.embed_tokens.weight"][tokens]  # [T, M]
    T = len(tokens)
    for i in range(L):
        p = f"model.layers.{i}."
        h = _rms(x, t[p + "input_layernorm.weight"])
        q = (h @ t[p + "self_attn.q_proj.weight"].T).reshape(T, H, HD)
        k = (h @ t[p + "self_attn.k_proj.weight"].T).reshape(T, K, HD)
        v = (h @ t[p + "self_attn.v_proj.weight"].T).reshape(T, K, HD)
        q = _rope(_rms(q, t[p + "self_attn.q_norm.weight"]), theta)
        k = _rope(_rms(k, t[p + "self_attn.k_norm.weight"]), theta)
        k, v = np.repeat(k, H // K, axis=1), np.repeat(v, H // K, axis=1)  # repeat_kv
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(HD)
        s = np.where(np.tril(np.ones((T, T), bool))[None], s, -np.inf)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", a, v).reshape(T, H * HD)
        x = x + o @ t[p + "self_attn.o_proj.weight"].T
        h = _rms(x, t[p + "post_attention_layernorm.weight"])
        logits = h @ t[p + "mlp.gate.weight"].T
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        top = np.argsort(-probs, axis=-1)[:, :TOPK]
        w = np.take_along_axis(probs, top, -1)
        w /= w.sum(-1, keepdims=True)  # norm_topk_prob
        y = np.zeros_like(x)
        for n in range(T):
            for j in range(TOPK):
                e = f"mlp.experts.{top[n, j]}."
                g = _bf(_bf(h[n]) @ _bf(t[p + e + "gate_proj.weight"]).T)
                u = _bf(_bf(h[n]) @ _bf(t[p + e + "up_proj.weight"]).T)
                d = _bf(_bf(_silu(g) * u) @ _bf(t[p + e + "down_proj.weight"]).T)
                y[n] += w[n, j] * d
        if shared:
            sp = p + "mlp.shared_expert."
            sy = (_silu(h @ t[sp + "gate_proj.weight"].T) * (h @ t[sp + "up_proj.weight"].T)
                  ) @ t[sp + "down_proj.weight"].T
            y += 1.0 / (1.0 + np.exp(-(h @ t[p + "mlp.shared_expert_gate.weight"].T))) * sy
        x = x + y
    x = _rms(x, t["model.norm.weight"])
    head = t["model.embed_tokens.weight"] if tied else t["lm_head.weight"]
    return x @ head.T


# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("hf") / "tiny")
    tensors = hf_tensors()
    write_checkpoint(path, tensors, hf_config())
    return path, tensors


def test_config_mapping(ckpt):
    cfg = hf.load_hf_config(ckpt[0])
    assert cfg == M.ModelConfig(vocab_size=V, d_model=D_MODEL, n_layers=L, n_heads=H,
                                n_kv_heads=K, head_dim=HD, n_experts=E, top_k=TOPK, d_expert=F,
                                d_shared=FS, norm_topk_prob=True, rope_theta=10000.0,
                                norm_eps=1e-6, tie_embeddings=False, max_seq_len=128)


def test_config_defaults(tmp_path):
    c = hf_config()
    for f in ("head_dim", "shared_expert_intermediate_size", "norm_topk_prob",
              "tie_word_embeddings"):
        del c[f]
    c["hidden_size"] = H * 8
    (tmp_path / "config.json").write_text(json.dumps(c))
    cfg = hf.load_hf_config(tmp_path / "config.json")
    assert (cfg.head_dim, cfg.d_shared, cfg.norm_topk_prob, cfg.tie_embeddings) == (8, 0, False,
                                                                                  False)


def test_tensor_mappings_by_value(ckpt):
    path, t = ckpt
    cfg, p = hf.import_hf(path)
    assert cfg.param_dtype == "float32"
    lay, at, moe = p["layers"], p["layers"]["attn"], p["layers"]["moe"]
    eq = np.testing.assert_array_equal
    eq(p["embed"], t["model.embed_tokens.weight"])
    eq(p["lm_head"], t["lm_head.weight"].T)
    eq(p["final_norm"], t["model.norm.weight"])
    eq(lay["attn_norm"][1], t["model.layers.1.input_layernorm.weight"])
    eq(lay["mlp_norm"][0], t["model.layers.0.post_attention_layernorm.weight"])
    eq(at["wq"][0], t["model.layers.0.self_attn.q_proj.weight"].T)
    eq(at["wk"][1], t["model.layers.1.self_attn.k_proj.weight"].T)
    eq(at["wv"][0], t["model.layers.0.self_attn.v_proj.weight"].T)
    eq(at["wo"][1], t["model.layers.1.self_attn.o_proj.weight"].T)
    eq(at["k_norm"][1], t["model.layers.1.self_attn.k_norm.weight"])
    eq(moe["router"][1], t["model.layers.1.mlp.gate.weight"].T)
    eq(moe["w_gate"][1, 3], t["model.layers.1.mlp.experts.3.gate_proj.weight"].T)
    eq(moe["w_up"][0, 2], t["model.layers.0.mlp.experts.2.up_proj.weight"].T)
    eq(moe["w_down"][1, 1], t["model.layers.1.mlp.experts.1.down_proj.weight"].T)
    eq(moe["shared"]["w_down"][0], t["model.layers.0.mlp.shared_expert.down_proj.weight"].T)
    eq(moe["shared"]["gate"][1], t["model.layers.1.mlp.shared_expert_gate.weight"].T)
    # one checked piece by hand: layer-0 q projection and router logits of an embedded token
    x = t["model.embed_tokens.weight"][7].astype(np.float64)
    np.testing.assert_allclose(np.asarray(x @ at["wq"][0]),
                               x @ t["model.layers.0.self_attn.q_proj.weight"].T.astype(np.float64),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(x @ moe["router"][0]),
                               x @ t["model.layers.0.mlp.gate.weight"].T.astype(np.float64),
                               rtol=1e-5, atol=1e-6)


def test_forward_matches_numpy_hf_reference(ckpt):
    path, t = ckpt
    cfg, p = hf.import_hf(path)
    cfg = dataclasses.replace(cfg, dtype="float32")
    tokens = np.random.default_rng(1).integers(0, V, 10)
    num = nx.make_numerics("bf16", cfg.n_layers)
    logits, _, _ = jax.jit(lambda p, x: M.forward(p, x, cfg=cfg, numerics=num))(
        p, jnp.asarray(tokens)[None])
    ref = hf_reference_logits(t, tokens)
    # f32 everywhere: agreement is ~1e-6
    # of scale; a wrong head layout or transpose is O(1), a dropped shared expert O(0.1)
    np.testing.assert_allclose(np.asarray(logits[0]), ref, atol=1e-4 * np.abs(ref).max())


def test_single_file_checkpoint_and_bf16(tmp_path):
    t = hf_tensors(seed=3, shared=False, tied=True, dtype=ml_dtypes.bfloat16)
    c = hf_config(tie_word_embeddings=True, torch_dtype="bfloat16")
    del c["shared_expert_intermediate_size"]
    write_checkpoint(str(tmp_path), t, c, n_shards=1)
    cfg, p = hf.import_hf(tmp_path, dtype=None)
    assert cfg.tie_embeddings and not cfg.d_shared and "lm_head" not in p
    assert "shared" not in p["layers"]["moe"] and cfg.param_dtype == "bfloat16"
    assert all(a.dtype == jnp.bfloat16 for a in jax.tree.leaves(p))
    np.testing.assert_array_equal(
        np.asarray(p["layers"]["moe"]["w_down"][0, 3]).view(np.uint16),
        t["model.layers.0.mlp.experts.3.down_proj.weight"].T.view(np.uint16))
    _, p32 = hf.import_hf(tmp_path)  # bf16 on disk -> f32 params, exactly
    np.testing.assert_array_equal(p32["embed"], t["model.embed_tokens.weight"].astype(np.float32))


def _is_spec(x):  # a (shape, axes) leaf of model.param_shapes
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], tuple)


def _bits(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


@pytest.mark.parametrize("dtype,tied", [(jnp.float32, False), (jnp.bfloat16, True)])
def test_export_import_round_trip_bit_exact(tmp_path, dtype, tied):
    cfg = M.ModelConfig(vocab_size=V, d_model=D_MODEL, n_layers=L, n_heads=H, n_kv_heads=K,
                        head_dim=HD, n_experts=E, top_k=TOPK, d_expert=F, d_shared=FS,
                        norm_topk_prob=False, rope_theta=5e5, norm_eps=1e-5, tie_embeddings=tied,
                        max_seq_len=64, param_dtype=jnp.dtype(dtype).name)
    # random values in every leaf (norms too, so a swapped norm would show); numpy rather than
    # init_params, whose first jax.random call costs seconds of compilation
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda s: jnp.asarray(rng.standard_normal(s[0]), dtype),
                          M.param_shapes(cfg), is_leaf=_is_spec)
    hf.export_hf(params, cfg, tmp_path, max_shard_bytes=20_000)
    shards = sorted(f for f in os.listdir(tmp_path) if f.endswith(".safetensors"))
    assert len(shards) >= 3 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards)
    with safe_open(str(tmp_path / index["weight_map"]["model.layers.1.mlp.gate.weight"]),
                   "np") as f:  # written in torch layout
        np.testing.assert_array_equal(_bits(f.get_tensor("model.layers.1.mlp.gate.weight")),
                                      _bits(params["layers"]["moe"]["router"][1].T))
    assert ("lm_head.weight" in index["weight_map"]) == (not tied)

    cfg2, params2 = hf.import_hf(tmp_path, dtype=dtype)
    assert cfg2 == cfg
    assert jax.tree.structure(params2) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(params2)):
        assert a.dtype == b.dtype == dtype and a.shape == b.shape
        np.testing.assert_array_equal(_bits(a), _bits(b))

    with pytest.raises(FileExistsError, match="overwrite"):
        hf.export_hf(params, cfg, tmp_path)
    hf.export_hf(params, cfg, tmp_path, overwrite=True)  # one file now; stale shards removed
    assert sorted(f for f in os.listdir(tmp_path) if "safetensors" in f) == ["model.safetensors"]
    _, params3 = hf.import_hf(tmp_path, dtype=dtype)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(params3)):
        np.testing.assert_array_equal(_bits(a), _bits(b))


def test_import_export_reproduces_hf_files(ckpt, tmp_path):
    path, t = ckpt
    cfg, p = hf.import_hf(path)
    hf.export_hf(p, cfg, tmp_path, max_shard_bytes=50_000)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(t)
    for name, fn in index["weight_map"].items():
        with safe_open(str(tmp_path / fn), "np") as f:
            np.testing.assert_array_equal(f.get_tensor(name), t[name])


# ---- errors ----


def _broken(tmp_path, edit_tensors=None, **cfg_over):
    t = hf_tensors(seed=5)
    if edit_tensors:
        edit_tensors(t)
    write_checkpoint(str(tmp_path), t, hf_config(**cfg_over))
    return tmp_path


def test_missing_tensor(tmp_path):
    path = _broken(tmp_path, lambda t: t.pop("model.layers.1.mlp.experts.2.up_proj.weight"))
    with pytest.raises(ValueError, match=r"1 missing.*layers\.1\.mlp\.experts\.2\.up_proj"):
        hf.import_hf(path)


def test_extra_tensor(tmp_path):
    path = _broken(tmp_path, lambda t: t.update(
        {"model.layers.0.self_attn.q_proj.bias": np.zeros(H * HD, np.float32)}))
    with pytest.raises(ValueError, match=r"1 unexpected.*q_proj\.bias"):
        hf.import_hf(path)


def test_wrong_shape(tmp_path):
    name = "model.layers.0.self_attn.o_proj.weight"
    path = _broken(tmp_path, lambda t: t.update({name: np.zeros((H * HD, D_MODEL), np.float32)}))
    with pytest.raises(ValueError, match=r"o_proj\.weight: \(64, 32\) \(expected \(32, 64\)\)"):
        hf.import_hf(path)


def test_mixed_stored_dtypes_need_a_dtype(tmp_path):
    """dtype=None keeps the stored dtype: f32 norms beside bf16 weights are refused by name (a
    stacked leaf would round an f32 tensor to its first tensor's bf16); a dtype converts all."""
    name = "model.layers.1.input_layernorm.weight"

    def mix(t):
        for k in t:
            t[k] = t[k].astype(ml_dtypes.bfloat16)
        t[name] = t[name].astype(np.float32)
        t[name][0] = np.float32(1.0001)  # (not a bf16 value)

    path = _broken(tmp_path, mix)
    with pytest.raises(ValueError, match=r"stored in 2 dtypes \(BF16: \d+, e\.g\..*F32: 1, e\.g\. "
                                         r"\['model\.layers\.1\.input_layernorm\.weight'\]"):
        hf.import_hf(path, dtype=None)
    cfg, p = hf.import_hf(path, dtype=jnp.float32)
    assert cfg.param_dtype == "float32"
    assert float(p["layers"]["attn_norm"][1, 0]) == np.float32(1.0001)


@pytest.mark.parametrize("field,value", [
    ("decoder_sparse_step", 2), ("mlp_only_layers", [1]), ("use_sliding_window", True),
    ("rope_scaling", {"rope_type": "yarn", "factor": 4.0}), ("attention_bias", True),
    ("hidden_act", "gelu"), ("model_type", "qwen2_moe"),
    ("rope_parameters", {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4})])
def test_unsupported_config_field(tmp_path, field, value):
    (tmp_path / "config.json").write_text(json.dumps(hf_config(**{field: value})))
    with pytest.raises(ValueError, match=field):
        hf.load_hf_config(tmp_path)


def test_plain_rope_parameters_accepted(tmp_path):
    c = hf_config(rope_parameters={"rope_type": "default", "rope_theta": 1234.0})
    del c["rope_theta"]
    (tmp_path / "config.json").write_text(json.dumps(c))
    assert hf.load_hf_config(tmp_path).rope_theta == 1234.0


def test_export_rejects_mismatched_params(tmp_path, ckpt):
    cfg, p = hf.import_hf(ckpt[0])
    with pytest.raises(ValueError, match="shared"):
        hf.export_hf(p, dataclasses.replace(cfg, d_shared=0), tmp_path)
