"""Expert parallelism on 8 faked CPU devices: forward, FP4 rollout forward with hint capture,
hint-guided QAT gradient and a rollout under a mesh with an ``expert`` axis equal the
single-device results; the expert stage really runs as a shard_map; clear errors."""

import dataclasses

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from trace_jax import model as M
from trace_jax import moe
from trace_jax import numerics as nx
from trace_jax import rollout as R
from trace_jax import sharding as S

from tests._params import numpy_params, pack_params

CFG = M.ModelConfig(vocab_size=32, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32,
                    n_experts=8, top_k=2, d_expert=32, max_seq_len=32, rope_theta=10_000.0,
                    dtype="float32")
AXES = ("data", "fsdp", "expert", "tensor")


def mesh_of(shape):
    return S.make_mesh(ml_collections.ConfigDict(dict(axes=AXES, shape=shape)))


@pytest.fixture(scope="module")
def params():
    return numpy_params(CFG, 0.08)


@pytest.fixture(scope="module")
def tokens():
    return jnp.asarray(np.random.default_rng(1).integers(1, CFG.vocab_size, (8, 6)), jnp.int32)


def _fwd(numerics, cfg=CFG, **kw):
    @jax.jit
    def f(params, tokens):
        logits, aux, _ = M.forward(params, tokens, cfg=cfg, numerics=numerics, **kw)
        return logits, aux.experts, aux.hints
    return f


# FP4 rollout numerics with hints at every layer (the expert_hidden site between the exchanges)
ROLL_ALL = nx.make_numerics("fp4_rollout", CFG.n_layers, hint_layers="all")


@pytest.fixture(scope="module")
def packed_all(params):
    return pack_params(params, ROLL_ALL, jnp.float32)


@pytest.fixture(scope="module")
def fp4_ref(packed_all, tokens):
    """The one-device FP4 rollout forward capturing hints at every layer: (logits, routing,
    hints), for the EP forward below and as the QAT gradient's hints."""
    return _fwd(ROLL_ALL, capture_hints=True)(packed_all, tokens)


# the sampled (temperature 1, EOS on) FP4 rollout of the two rollout tests below
ROLLOUT_SAMPLING = R.SamplingConfig(max_new_tokens=4, temperature=1.0, eos_id=2, pad_id=0)


@pytest.fixture(scope="module")
def rollout_ref(params):
    """(numerics, prompts, prompt lengths, the one-device rollout) shared by the rollout tests."""
    num = nx.make_numerics("fp4_rollout", CFG.n_layers)
    prompts = jnp.asarray(np.random.default_rng(2).integers(3, CFG.vocab_size, (8, 5)), jnp.int32)
    lens = jnp.asarray([5, 3, 4, 5, 2, 5, 1, 4], jnp.int32)
    ref = R.generate(R.sync_weights(params, num), prompts, lens, jax.random.key(3), cfg=CFG,
                     numerics=num, sampling=ROLLOUT_SAMPLING)
    return num, prompts, lens, ref


@pytest.mark.parametrize("shape", [(1, 1, 8, 1), (2, 1, 2, 2)])
def test_forward_expert_parallel_equals_one_device(params, tokens, shape):
    num = nx.make_numerics("bf16", CFG.n_layers)
    ref = _fwd(num)(params, tokens)
    mesh = mesh_of(shape)
    sp = jax.device_put(params, S.param_shardings(CFG, mesh, S.make_rules("training")))
    with jax.set_mesh(mesh):
        f = _fwd(num)
        assert "shard_map" in str(jax.make_jaxpr(f)(sp, tokens))  # the EP path is taken
        out = f(sp, tokens)
    np.testing.assert_array_equal(np.asarray(out[1]), np.asarray(ref[1]))  # routing
    np.testing.assert_allclose(np.asarray(out[0]), np.asarray(ref[0]), rtol=1e-5, atol=1e-5)


def test_expert_stages_bit_identical(params):
    """On identical inputs the two EP stages reproduce one device exactly (the reduce-scatter
    adds zeros only), bf16 and packed FP4 weights."""
    rng = np.random.default_rng(4)
    N, k = 16, CFG.top_k
    x = jnp.asarray(rng.standard_normal((N, CFG.d_model)), jnp.bfloat16)
    h = jnp.asarray(rng.standard_normal((N, k, CFG.d_expert)), jnp.bfloat16)
    e = jnp.asarray(np.sort(np.stack([rng.choice(CFG.n_experts, k, replace=False)
                                      for _ in range(N)]), -1), jnp.int32)
    e = e.at[:, 0].set(jnp.minimum(e[:, 0], 2))  # crowd a few experts, leave some empty
    mp = {n: params["layers"]["moe"][n][0].astype(jnp.bfloat16) for n in ("w_gate", "w_up", "w_down")}
    quantize_weight = jax.jit(nx.quantize_weight, static_argnums=1)
    fp4 = {n: quantize_weight(w.astype(jnp.float32), "nvfp4") for n, w in mp.items()}
    mesh = mesh_of((1, 2, 4, 1))
    for w in (mp, fp4):
        def stages(x, h, e, w):
            return (moe.experts_apply(moe._gate_up_local, x, e, w["w_gate"], w["w_up"]),
                    moe.experts_apply(moe._down_local, h, e, w["w_down"]))
        ref = jax.jit(stages)(x, h, e, w)
        with jax.set_mesh(mesh):
            out = jax.jit(stages)(x, h, e, w)
        for a, b in zip(out, ref):
            np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
            assert float(jnp.max(jnp.abs(b.astype(jnp.float32)))) > 0


def test_fp4_rollout_forward_and_hints_match(packed_all, tokens, fp4_ref):
    """Packed FP4 experts split over the expert axis: logits and captured hints (incl. the
    per-slot expert_hidden site between the two exchanges) match one device (to the last-ulp
    differences XLA's CPU dots make on a different batch split)."""
    ref = fp4_ref
    mesh = mesh_of((1, 2, 4, 1))
    sh = S.param_shardings(CFG, mesh, S.make_rules("sampling"), packed_all)
    with jax.set_mesh(mesh):
        out = _fwd(ROLL_ALL, capture_hints=True)(jax.device_put(packed_all, sh), tokens)
    np.testing.assert_allclose(np.asarray(out[0]), np.asarray(ref[0]), rtol=1e-5, atol=1e-5)
    assert set(out[2]) == set(ref[2]) and any("expert_hidden" in k for k in out[2])
    for name in ref[2]:
        a, b = out[2][name], ref[2][name]
        assert np.mean(np.asarray(a.bits) == np.asarray(b.bits)) > 0.995, name
        # (the activations' amax, like the logits, carries those ulp differences: ~1e-6 seen)
        np.testing.assert_allclose(np.asarray(a.global_scale), np.asarray(b.global_scale),
                                   rtol=1e-5)


def test_guided_qat_gradient_expert_parallel(params, tokens, fp4_ref):
    """The trainer's hint-guided W4A4 loss and its gradient (through all-gather / reduce-scatter
    transposes) match one device."""
    qat = ROLL_ALL.with_mode("fp4_qat")
    hints, experts = fp4_ref[2], fp4_ref[1]  # the one-device rollout's, at every layer

    def loss(p, toks):
        logits, aux, _ = M.forward(p, toks, cfg=CFG, numerics=qat, hints=hints,
                                   hint_experts_LxBxTxK=experts)
        return jnp.mean(jax.nn.logsumexp(logits, -1)) + aux.lb_loss

    g_ref = jax.jit(jax.grad(loss))(params, tokens)
    mesh = mesh_of((1, 2, 4, 1))
    sp = jax.device_put(params, S.param_shardings(CFG, mesh, S.make_rules("training")))
    with jax.set_mesh(mesh):
        g = jax.jit(jax.grad(loss))(sp, tokens)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=1e-6)


def test_rollout_expert_parallel_equals_one_device(params, rollout_ref):
    num, prompts, lens, ref = rollout_ref
    mesh = mesh_of((1, 2, 4, 1))
    rules = S.make_rules("sampling")
    rp = R.sync_weights(params, num, shardings=S.rollout_param_shardings(CFG, mesh, rules, num))
    out = R.generate(rp, prompts, lens, jax.random.key(3), cfg=CFG, numerics=num,
                     sampling=ROLLOUT_SAMPLING, mesh=mesh, rules=rules)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ref.tokens))
    np.testing.assert_allclose(np.asarray(out.logprobs), np.asarray(ref.logprobs), atol=1e-5)
    assert out.tokens.sharding.spec[0] == ("fsdp", "expert")  # trajectories split over DP x EP


def test_errors_name_the_problem(params):
    mesh = mesh_of((1, 1, 8, 1))
    num = nx.make_numerics("bf16", CFG.n_layers)
    toks = jnp.ones((4, 3), jnp.int32)  # 12 tokens over 8 devices
    with jax.set_mesh(mesh), pytest.raises(ValueError, match="12 tokens .* do not split"):
        _fwd(num)(params, toks)
    w = jnp.zeros((6, 4, 4))  # 6 experts over 8
    with jax.set_mesh(mesh), pytest.raises(ValueError, match="6 experts do not split"):
        jax.jit(lambda x, e: moe.experts_apply(moe._down_local, x, e, w))(
            jnp.zeros((8, 2, 4)), jnp.zeros((8, 2), jnp.int32))


def test_rollout_on_a_device_subset_from_trainer_on_all_devices(params, rollout_ref):
    """Trainer params FSDP-sharded over all 8 devices; the rollout runs on a 4-device subset
    (expert parallel there): sync_weights reshards across the two meshes and the samples (the
    previous test's sampled rollout) match one device."""
    num, prompts, lens, ref = rollout_ref
    train_mesh = mesh_of((1, 8, 1, 1))
    tp = jax.device_put(params, S.param_shardings(CFG, train_mesh, S.make_rules("training")))
    sub = S.make_mesh(ml_collections.ConfigDict(dict(axes=AXES, shape=(1, 1, 4, 1))),
                      devices=jax.devices()[4:])
    rules = S.make_rules("sampling")
    rp = R.sync_weights(tp, num, shardings=S.rollout_param_shardings(CFG, sub, rules, num))
    assert rp["layers"]["moe"]["w_gate"].codes.sharding.device_set == set(jax.devices()[4:])
    out = R.generate(rp, prompts, lens, jax.random.key(3), cfg=CFG, numerics=num,
                     sampling=ROLLOUT_SAMPLING, mesh=sub, rules=rules)
    assert out.tokens.sharding.device_set == set(jax.devices()[4:])
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ref.tokens))


@pytest.mark.parametrize("kernel", ["auto", "mosaic"])
def test_kernel_layout_weights_through_the_model(params, tokens, kernel):
    """FP4 experts packed once in a Pallas kernel layout (``sync_weights(kernel_layout=...)``:
    "auto" gives the Triton layout at d_expert 32, "mosaic" the Mosaic GPU one at d_expert 64)
    run through the model (the kernel's pure-JAX reference off the GPU), one device and expert
    parallel; the expert stages agree with the QTensor path to bf16 rounding (the kernel path
    returns bf16 and applies the global scale in f32); sharding specs cover the layout."""
    cfg = CFG if kernel == "auto" else dataclasses.replace(CFG, d_expert=64)
    params = params if kernel == "auto" else numpy_params(cfg, 0.08)
    num = nx.make_numerics("fp4_rollout", cfg.n_layers)
    qp = R.sync_weights(params, num, dtype=jnp.float32)
    kp = R.sync_weights(params, num, dtype=jnp.float32, kernel_layout=kernel)
    assert isinstance(kp["layers"], tuple) and len(kp["layers"]) == cfg.n_layers  # per-layer
    layout = {"auto": "FP4Weights", "mosaic": "MgpuWeights"}[kernel]
    assert type(kp["layers"][0]["moe"]["w_gate"]).__name__ == layout
    rng = np.random.default_rng(6)
    x = jnp.asarray(rng.standard_normal((12, cfg.d_model)), jnp.float32)
    e = jnp.asarray(np.sort(np.stack([rng.choice(cfg.n_experts, 2, replace=False)
                                      for _ in range(12)]), -1), jnp.int32)

    @jax.jit
    def stages(moe_p):
        h = moe.experts_apply(moe._gate_up_local, x, e, moe_p["w_gate"], moe_p["w_up"])
        return h, moe.experts_apply(moe._down_local, h, e, moe_p["w_down"])

    (h_ref, d_ref), (h, d) = (stages(M.layer_params(p, 0)["moe"]) for p in (qp, kp))
    # bf16 gate / up outputs: an absolute error up to ~2**-9 of their size (~1) in h
    np.testing.assert_allclose(np.asarray(h, np.float32), np.asarray(h_ref), rtol=2e-2, atol=3e-3)
    np.testing.assert_allclose(np.asarray(d, np.float32), np.asarray(d_ref), rtol=2e-2, atol=3e-3)

    out = _fwd(num, cfg=cfg)(kp, tokens)
    if kernel == "auto":  # (the stage comparison above covers the mosaic layout's values)
        ref = _fwd(num, cfg=cfg)(qp, tokens)
        assert np.mean(np.asarray(out[1]) == np.asarray(ref[1])) > 0.9  # routing mostly the same
    mesh = mesh_of((1, 2, 4, 1))
    sh = S.rollout_param_shardings(cfg, mesh, S.make_rules("sampling"), num, dtype="float32",
                                   kernel_layout=kernel)
    assert len(sh["layers"]) == cfg.n_layers
    assert sh["layers"][0]["moe"]["w_gate"].codes.spec == jax.sharding.PartitionSpec("expert")
    with jax.set_mesh(mesh):
        ep = _fwd(num, cfg=cfg)(jax.device_put(kp, sh), tokens)
    np.testing.assert_array_equal(np.asarray(ep[1]), np.asarray(out[1]))
    np.testing.assert_allclose(np.asarray(ep[0]), np.asarray(out[0]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(1, 2, 4, 1), (2, 4, 1, 1)])
def test_expert_stages_on_the_pallas_path_under_a_mesh(monkeypatch, shape):
    """What the GPU runs: the expert stages through the Pallas bf16 grouped kernels (interpret
    mode here) inside the expert-parallel shard_map (``expert`` axis 4) or the token-parallel
    one (data x FSDP, no expert axis: GSPMD would replicate a Pallas call), forward and
    gradient, equal the one-device reference path (ragged_dot) to bf16 precision. (With
    shard_map's vma check on, tracing the pallas_call failed: only visible with the kernels in
    the program.)"""
    from pallas_kernels import fp4_matmul as FM
    from trace_jax import ops

    rng = np.random.default_rng(5)
    N, k, E, M_, F = 16, 2, 8, 64, 64  # K, N multiples of 64: the kernel path
    x = jnp.asarray(rng.standard_normal((N, M_)), jnp.bfloat16)
    e = jnp.asarray(np.sort(np.stack([rng.choice(E, k, replace=False) for _ in range(N)]), -1),
                    jnp.int32)
    w = {n: jnp.asarray(0.1 * rng.standard_normal((E, M_, F)), jnp.bfloat16)
         for n in ("w_gate", "w_up")}
    w["w_down"] = jnp.asarray(0.1 * rng.standard_normal((E, F, M_)), jnp.bfloat16)

    def loss(x, w):
        h = moe.experts_apply(moe._gate_up_local, x, e, w["w_gate"], w["w_up"])
        d = moe.experts_apply(moe._down_local, h, e, w["w_down"])
        return jnp.sum(d.astype(jnp.float32) ** 2)

    grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    ref_l, ref_g = grad(x, w)
    calls = []
    orig = FM.bf16_grouped_matmul
    monkeypatch.setattr(ops, "_on_gpu", lambda: True)
    monkeypatch.setattr(FM, "bf16_grouped_matmul",
                        lambda *a, **kw: calls.append(1) or orig(*a, **{**kw, "backend": "triton"}))
    with jax.set_mesh(mesh_of(shape)):
        f = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
        assert "shard_map" in str(jax.make_jaxpr(f)(x, w))
        l, g = f(x, w)
    assert calls  # the kernel path was traced
    assert abs(float(l - ref_l)) <= 1e-2 * abs(float(ref_l))
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(ref_g)):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        assert np.linalg.norm(b) > 0 and np.linalg.norm(a - b) <= 2e-2 * np.linalg.norm(b)
