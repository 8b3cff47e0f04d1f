"""Sharding on 8 faked CPU devices: sharded forward / gradient / rollout equal the single-device
results, hints and routing come out sharded by trajectory, the rule table's specs, clear errors."""

import dataclasses

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from trace_jax import model as M
from trace_jax import numerics as nx
from trace_jax import quant as Q
from trace_jax import rollout as R
from trace_jax import sharding as S

from tests._params import init_params, numpy_params

CFG = M.ModelConfig(vocab_size=32, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32,
                    n_experts=8, top_k=2, d_expert=32, d_shared=16, max_seq_len=32,
                    rope_theta=10_000.0, dtype="float32")
AXES = ("data", "fsdp", "expert", "tensor")


def mesh_of(shape, devices=None):
    return S.make_mesh(ml_collections.ConfigDict(dict(axes=AXES, shape=shape)), devices)


@pytest.fixture(scope="module")
def params():
    return numpy_params(CFG, 0.05)


@pytest.fixture(scope="module")
def tokens():
    return jnp.asarray(np.random.default_rng(1).integers(1, CFG.vocab_size, (4, 8)), jnp.int32)


def _spec_axes(spec, dim):
    entry = spec[dim] if dim < len(spec) else None
    return () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)


def _assert_sharded_like(tree, shardings):
    for x, s in zip(jax.tree.leaves(tree), jax.tree.leaves(shardings)):
        assert x.sharding.is_equivalent_to(s, x.ndim), (x.sharding, s)


# --------------------------------------------------------------------------------------------
# Specs


def test_make_mesh_resolves_minus_one_and_device_subsets():
    m = mesh_of((-1, 2, 1, 1))
    assert dict(m.shape) == dict(data=4, fsdp=2, expert=1, tensor=1)
    sub = mesh_of((2, -1, 1, 1), devices=jax.devices()[4:])
    assert dict(sub.shape)["fsdp"] == 2 and set(sub.devices.flat) == set(jax.devices()[4:])


def test_rule_sets_training_fsdp_sampling_replicated():
    m = mesh_of((2, 2, 2, 1))
    train = S.param_shardings(CFG, m, S.make_rules("training"))
    samp = S.param_shardings(CFG, m, S.make_rules("sampling"))
    # FSDP: a dense weight's embed dim over fsdp+data+expert (the expert axis splits the batch,
    # so dense weights and their Adam moments are not copied over it); an expert weight's over
    # fsdp+data, its experts over expert; tensor axis of size 1 left out
    assert train["layers"]["attn"]["wq"].spec == P(None, ("fsdp", "data", "expert"))
    assert train["layers"]["moe"]["w_gate"].spec == P(None, "expert", ("fsdp", "data"))
    assert train["lm_head"].spec == P(("fsdp", "data", "expert"))
    # sampling: replicated over the batch axes, experts still split
    assert samp["layers"]["attn"]["wq"].spec == P()
    assert samp["layers"]["moe"]["w_down"].spec == P(None, "expert")
    # config overrides apply to both rule sets; activations constrained by logical names
    mc = ml_collections.ConfigDict(dict(axes=AXES, shape=(2, 2, 2, 1), rules={"vocab": "expert"}))
    assert S.param_shardings(CFG, m, S.rules_from_config(mc, "sampling"))["embed"].spec == P(
        "expert")
    x = jax.jit(lambda a: S.constrain(a, (S.BATCH, "activation_length", "activation_embed"),
                                      m, S.make_rules("training")))(jnp.zeros((4, 3, 8)))
    assert x.sharding.spec == P(("data", "fsdp"))


def test_logical_to_spec_drops_axes_that_do_not_divide_and_reuses_none():
    m = mesh_of((2, 4, 1, 1))
    r = {"a": ("fsdp", "data"), "b": "data", "c": "fsdp"}
    assert S.logical_to_spec(("a", "b"), r, m, (8, 6)) == P(("fsdp", "data"))  # data used
    assert S.logical_to_spec(("a",), r, m, (12,)) == P("fsdp")  # 4 | 12, 8 does not
    assert S.logical_to_spec(("a",), r, m, (6,)) == P("data")  # 4 does not divide 6, 2 does
    assert S.logical_to_spec(("b", "c"), r, m, (3, 4)) == P(None, "fsdp")
    assert S.logical_to_spec((None, "b"), r, m, (5, 1)) == P()


def test_fp4_qtensor_fields_sharded_where_divisible(monkeypatch):
    m = mesh_of((1, 2, 2, 2))
    num = nx.make_numerics("fp4_rollout", CFG.n_layers)
    rules = S.make_rules("training")
    sh = S.rollout_param_shardings(CFG, m, rules, num)
    w = sh["layers"]["moe"]["w_gate"]  # [L, E, M, F] packed along M: codes M/2, scales M/16
    assert isinstance(w, Q.QTensor)
    assert w.codes.spec == P(None, "expert", "fsdp", "tensor")
    assert w.scales.spec == P(None, "expert", "fsdp", "tensor")
    assert w.global_scale.spec == P(None, "expert")  # [L, E, 1, 1]: size-1 axes unsharded
    # the FP4 KV cache: batch strictly, KV heads on tensor, per-row global scale [B, K, S, 1]
    from trace_jax import attention

    cache = jax.eval_shape(lambda: attention.init_cache(CFG, num, 4, 16))
    cs = S.cache_shardings(cache, m, rules)
    assert cs[0]["k"].codes.spec == P(("fsdp", "expert"), "tensor")  # batch over DP x EP
    assert cs[0]["k"].global_scale.spec == P(("fsdp", "expert"), "tensor")
    mx = jax.eval_shape(lambda: attention.init_cache(CFG, dataclasses.replace(num, fmt="mxfp4"),
                                                     4, 16))
    assert S.cache_shardings(mx, m, rules)[1]["v"].global_scale.spec == P()
    # the "mgpu" layout (one MgpuKV per layer): every field batch and kv heads first
    monkeypatch.setattr(attention, "FP4_CACHE_LAYOUT", "mgpu")
    mg = jax.eval_shape(lambda: attention.init_cache(dataclasses.replace(CFG, head_dim=64), num,
                                                     4, 16))
    ms = S.cache_shardings(mg, m, rules)[0]["kv"]
    assert ms.v_codes.spec == ms.k_gscale.spec == P(("fsdp", "expert"), "tensor")


def test_bad_mesh_rules_and_batch_raise_clear_errors():
    with pytest.raises(ValueError, match="more than one -1"):
        mesh_of((-1, -1, 1, 1))
    with pytest.raises(ValueError, match="has 4 devices but 8 are available"):
        mesh_of((2, 2, 1, 1))
    with pytest.raises(ValueError, match="not divisible by the fixed axes"):
        mesh_of((-1, 3, 1, 1))
    with pytest.raises(ValueError, match="different lengths"):
        S.make_mesh(dict(axes=("data",), shape=(2, 4)))
    m = mesh_of((2, 2, 2, 1))
    with pytest.raises(ValueError, match="mesh axes \\['model'\\] that the mesh does not have"):
        S.param_shardings(CFG, m, S.make_rules("training", {"vocab": "model"}))
    with pytest.raises(ValueError, match="no sharding rule for logical axis 'experts'"):
        S.logical_to_spec(("experts",), {}, m, (8,))
    with pytest.raises(ValueError, match="rule set must be one of"):
        S.make_rules("serving")
    with pytest.raises(ValueError, match=r"batch of 6 trajectories is not divisible by the 8 "
                                         r"devices of mesh axes \('data','fsdp','expert'\)"):
        S.check_batch_divisible(6, m, S.make_rules("sampling"))
    assert S.check_batch_divisible(jnp.zeros((8, 3)), m, S.make_rules("sampling")) == 8
    ro = jax.eval_shape(lambda: R.Rollout(*(jnp.zeros((6, 4)),) * 5, R.HintBatch(
        {}, jnp.zeros((2, 6, 4, 2)), jnp.zeros((6, 4)), jnp.zeros(6)), jnp.zeros(6)))
    with pytest.raises(ValueError, match="batch of 6 trajectories"):
        S.rollout_shardings(ro, m, S.make_rules("sampling"))


# --------------------------------------------------------------------------------------------
# Sharded == single device


@pytest.mark.parametrize("mode", ["bf16", "fp4_qat"])
def test_sharded_forward_matches_single_device(params, tokens, mode):
    num = nx.make_numerics(mode, CFG.n_layers)
    m = mesh_of((2, 2, 1, 2))
    rules = S.make_rules("training")
    psh = S.param_shardings(CFG, m, rules, params)
    fwd = jax.jit(lambda p, t: M.forward(p, t, cfg=CFG, numerics=num)[:2])
    ref, ref_aux = fwd(params, tokens)
    sp, st = S.reshard(params, psh), S.reshard(tokens, S.data_sharding(m, rules))
    _assert_sharded_like(sp, psh)
    assert st.addressable_shards[0].data.shape == (1, 8)  # 4 rows over data*fsdp = 4
    out, aux = fwd(sp, st)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=2e-5, rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(aux.experts), np.asarray(ref_aux.experts))


def test_sharded_fp4_qat_gradient_matches_single_device(params, tokens):
    num = nx.make_numerics("fp4_qat", CFG.n_layers)
    m = mesh_of((2, 2, 2, 1))
    rules = S.make_rules("training")
    psh = S.param_shardings(CFG, m, rules, params)

    def loss(p, t):
        logits, _, _ = M.forward(p, t, cfg=CFG, numerics=num)
        return jnp.mean(jax.nn.log_softmax(logits, axis=-1)[..., 0])

    tokens = jnp.concatenate([tokens, tokens[::-1]])  # 8 sequences: batch over data x fsdp x expert
    ref = jax.jit(jax.grad(loss))(params, tokens)
    step = jax.jit(jax.grad(loss), in_shardings=(psh, S.data_sharding(m, rules)),
                   out_shardings=psh)
    g = step(S.reshard(params, psh), tokens)
    _assert_sharded_like(g, psh)
    assert g["layers"]["moe"]["w_up"].addressable_shards[0].data.shape == (2, 4, 16, 32)
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(g)[0], jax.tree.leaves(ref)):
        scale = float(np.max(np.abs(np.asarray(b)))) + 1e-12
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5 * scale, rtol=1e-4,
                                   err_msg=jax.tree_util.keystr(path))


def test_sharded_rollout_matches_single_device_and_keeps_hints_sharded(params):
    num = nx.make_numerics("fp4_rollout", CFG.n_layers)  # hints on the last layer
    m = mesh_of((4, 1, 2, 1))
    rules = S.make_rules("sampling")
    samp = R.SamplingConfig(max_new_tokens=5, temperature=0.0, eos_id=-1)
    prompts = jnp.asarray(np.random.default_rng(2).integers(1, CFG.vocab_size, (8, 5)), jnp.int32)
    lens = jnp.asarray([5, 2, 4, 3, 5, 1, 2, 5], jnp.int32)
    kw = dict(cfg=CFG, numerics=num, sampling=samp)
    ref = R.generate(R.sync_weights(params, num, dtype="float32"), prompts, lens,
                     jax.random.key(0), **kw)

    psh = S.rollout_param_shardings(CFG, m, rules, num, dtype="float32")
    assert psh["layers"]["moe"]["w_gate"].codes.spec == P(None, "expert")
    rp = R.sync_weights(S.reshard(params, S.param_shardings(CFG, mesh_of((2, 2, 2, 1)),
                                                            S.make_rules("training"), params)),
                        num, shardings=psh, dtype="float32")  # trainer mesh -> rollout mesh
    _assert_sharded_like(rp, psh)
    out = R.generate(rp, S.reshard(prompts, S.data_sharding(m, rules)),
                     S.reshard(lens, S.data_sharding(m, rules, 1)), jax.random.key(0), **kw)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ref.tokens))
    np.testing.assert_array_equal(np.asarray(out.guidance.experts),
                                  np.asarray(ref.guidance.experts))
    # hints: batch-split (and expert-parallel, on gathered tokens) matmuls may round float32
    # differently (a few ulp), so the recorded grids agree to float tolerance and the bits
    # almost everywhere
    for name, h in out.guidance.hints.items():
        hr = ref.guidance.hints[name]
        np.testing.assert_allclose(np.asarray(h.global_scale), np.asarray(hr.global_scale),
                                   rtol=1e-5, err_msg=name)
        for f in ("bits", "scales"):
            a, b = (np.asarray(getattr(x, f)).view(np.uint8) for x in (h, hr))
            assert np.mean(a == b) > 0.99, (name, f, np.mean(a == b))

    # hints and routing stay sharded by trajectory (data x expert: 8 shards of 1 row), no gather
    g = out.guidance
    assert g.hints, "fp4_rollout must record hints on the last half of the layers"
    for leaf in jax.tree.leaves(g.hints) + [g.recorded, g.fingerprint]:
        assert _spec_axes(leaf.sharding.spec, 0) == ("data", "expert"), leaf.sharding
        assert {s.data.shape[0] for s in leaf.addressable_shards} == {1}
    assert _spec_axes(g.experts.sharding.spec, 1) == ("data", "expert")
    # and rollout_shardings describes that layout (only logprobs may still need a reshard)
    want = S.rollout_shardings(out, m, rules)
    _assert_sharded_like(out.guidance, want.guidance)
    moved = S.reshard(out, want)
    _assert_sharded_like(moved, want)


@pytest.mark.parametrize("variant", ["bf16", "trace"])
def test_placement_and_sync_weights_agree_with_kernel_layout(variant):
    """rollout.kernel_layout on a sharded run: the rollout shardings and sync_weights' params
    have the same (per-layer) tree for a BF16 rollout and an FP4 one, so device_put works."""
    from configs import tiny
    from trace_jax import experiment as X
    from trace_jax import run as RUN

    c = tiny.get_config()
    c.model.n_layers = 2
    c.rollout.update(batch_prompts=8, kernel_layout=True)
    c.sft.batch_size = 8
    c.mesh.shape = (1, 2, 4, 1)
    exp = X.build(c, variant)
    placement = RUN.make_placement(c, exp)
    params = init_params(exp.cfg, jax.random.key(0))
    kl = X.rollout_kernel_layout(c)
    assert kl
    rp = R.sync_weights(params, exp.rollout_numerics, shardings=placement.rollout_params,
                        kernel_layout=kl)
    assert isinstance(rp["layers"], tuple)
    # same tree (tree.map raises otherwise), every leaf placed as its sharding says
    jax.tree.map(lambda a, s: None if a.sharding == s else pytest.fail(f"{a.sharding} != {s}"),
                 rp, placement.rollout_params)


def test_mesh_axes_left_out_have_size_one():
    """A config mesh that names only some of data/fsdp/expert/tensor places the run as the
    four-axis mesh with the others of size 1; an axis no rule uses, or a shape of another
    length than the axes, is refused by name."""
    from configs import tiny
    from trace_jax import experiment as X
    from trace_jax import run as RUN

    c = tiny.get_config()
    c.model.n_layers = 2
    c.rollout.update(batch_prompts=8)
    c.sft.batch_size = 8
    exp = X.build(c)
    c.mesh.update(axes=("data", "fsdp"), shape=(2, -1))
    two = RUN.make_placement(c, exp)
    assert dict(two.mesh.shape) == dict(data=2, fsdp=4, expert=1, tensor=1)
    c.mesh.update(axes=("data", "fsdp", "expert", "tensor"), shape=(2, 4, 1, 1))
    four = RUN.make_placement(c, exp)
    spec = lambda sh: jax.tree.map(lambda s: s.spec, sh)  # noqa: E731
    assert spec(two.params) == spec(four.params)
    assert spec(two.rollout_params) == spec(four.rollout_params)
    with pytest.raises(ValueError, match=r"mesh axis 'fdsp' \(size 4\) is none of "
                                         r"\('data', 'fsdp', 'expert', 'tensor'\)"):
        S.make_mesh(dict(axes=("data", "fdsp"), shape=(2, 4)))
    # an axis of another name is fine where a rule override names it, or where it has size 1
    m = S.make_mesh(dict(axes=("data", "model"), shape=(2, 4), rules={"vocab": "model"}))
    assert dict(m.shape) == dict(data=2, model=4, fsdp=1, expert=1, tensor=1)
    assert dict(S.make_mesh(dict(axes=("data", "spare"), shape=(-1, 1))).shape)["data"] == 8
    with pytest.raises(ValueError, match=r"mesh.axes \('data', 'fsdp', 'expert', 'tensor'\) "
                                         r"and mesh.shape \(1, -1\) have different lengths"):
        S.make_mesh(dict(axes=S.DEFAULT_AXES, shape=(1, -1)))


def test_placement_checks_batches_by_field_and_skips_sft_without_sft():
    """A batch that does not split over the mesh is named by its config field; sft.batch_size
    only matters when there are SFT steps (an init_from run has none)."""
    from configs import tiny
    from trace_jax import experiment as X
    from trace_jax import run as RUN

    c = tiny.get_config()
    c.model.n_layers = 2
    c.rollout.update(batch_prompts=4, group_size=2)
    c.sft.batch_size = 6
    c.mesh.shape = (4, 1, 1, 1)
    exp = X.build(c)
    with pytest.raises(ValueError, match="sft.batch_size = 6: batch of 6 trajectories"):
        RUN.make_placement(c, exp)
    c.sft.steps = 0
    assert RUN.make_placement(c, exp).mesh.shape["data"] == 4
    # each micro-batch splits over the batch axes too (it failed at the first train step)
    c.train.micro_batches = 4
    with pytest.raises(ValueError, match=r"rollout.group_size / train.micro_batches = 2: batch of "
                                         r"2 trajectories"):
        RUN.make_placement(c, exp)
    c.train.micro_batches = 1
    # experts that do not split over the expert axis (it failed at the first SFT step)
    c.mesh.shape = (1, 1, 4, 1)
    c.model.n_experts = 6
    with pytest.raises(ValueError, match=r"model.n_experts = 6 does not split over the mesh's "
                                         r"expert axis of 4 devices"):
        RUN.make_placement(c, X.build(c))
    c.model.n_experts, c.mesh.shape = 8, (4, 1, 1, 1)
    c.rollout.batch_prompts = 3
    with pytest.raises(ValueError, match=r"rollout.batch_prompts \* rollout.group_size = 6"):
        RUN.make_placement(c, X.build(c))


@pytest.mark.parametrize("mesh_shape", [(1, 1, 1, 1), (2, 2, 2, 1)])
def test_abstract_state_is_the_placed_fresh_state(mesh_shape):
    """A resume restores into ``abstract_state`` instead of building a fresh state first: it
    must equal the fresh placed state leaf for leaf (shape, dtype, sharding), the optimizer's
    moments sharded like the params, on one device and on a mesh, with a KL reference too."""
    from configs import tiny
    from trace_jax import checkpoint as C
    from trace_jax import experiment as X
    from trace_jax import run as RUN

    c = tiny.get_config()
    c.model.n_layers = 2
    c.rollout.update(batch_prompts=8)
    c.sft.batch_size = 8
    c.train.kl_coef = 0.01
    c.mesh.shape = mesh_shape
    exp, tc = X.build(c), RUN.train_config(c)
    pl = RUN.make_placement(c, exp)
    assert (pl is None) == (mesh_shape == (1, 1, 1, 1))
    fresh = C.abstract_like(RUN.place_state(RUN.initial_state(exp, c, tc, pl), pl,
                                            RUN.rl_optimizer(tc)))
    got = RUN.abstract_state(exp, c, tc, pl)
    assert jax.tree.structure(got) == jax.tree.structure(fresh)
    assert "ref" in got
    n_split = 0
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(fresh)):
        name = jax.tree_util.keystr(path)
        assert (a.shape, a.dtype) == (b.shape, b.dtype), name
        assert a.sharding.is_equivalent_to(b.sharding, len(a.shape)), (name, a.sharding, b.sharding)
        n_split += "mu" in name and not a.sharding.is_fully_replicated
    assert n_split > 0 or pl is None  # (the moments really are sharded on the mesh)


def test_warm_start_reads_params_straight_into_the_mesh_placement(tmp_path):
    """init_from on a mesh: the source's params come back with the placement's shardings
    (read shard by shard, never whole on one device first) and the values saved."""
    from configs import tiny
    from trace_jax import checkpoint as C
    from trace_jax import experiment as X
    from trace_jax import run as RUN

    c = tiny.get_config()
    c.model.n_layers = 2
    c.rollout.update(batch_prompts=8)
    c.update(init_from=str(tmp_path / "src"))
    c.sft.update(steps=0, batch_size=8)
    exp, tc = X.build(c), RUN.train_config(c)
    saved = RUN.initial_state(exp, c, tc)  # (one device, as a one-device run saves)
    ck = C.Checkpointer(str(tmp_path / "src" / "checkpoints"))
    ck.save(3, saved)
    ck.close()
    c.mesh.shape = (2, 2, 2, 1)
    pl = RUN.make_placement(c, exp)
    got = RUN.warm_start_params(c, pl)
    jax.tree.map(lambda a, s: None if a.sharding == s else pytest.fail(f"{a.sharding} != {s}"),
                 got, pl.params)
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, got),
                 jax.tree.map(np.asarray, saved["params"]))
    assert any(not s.is_fully_replicated for s in jax.tree.leaves(pl.params))
