"""The MoE policy: incremental decode, causality, the numerics switch, routing replay, STE, configs."""

import dataclasses
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests._jaxpr import eqns as walk_eqns
from tests._params import init_params, pack_params
from trace_jax import attention
from trace_jax import model as M
from trace_jax import numerics as nx
from trace_jax import ops
from trace_jax import params as P
from trace_jax import quant as Q

CFG = M.ModelConfig(vocab_size=48, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32,
                    n_experts=8, top_k=2, d_expert=32, d_shared=32, max_seq_len=32,
                    rope_theta=10_000.0)
CFG32 = dataclasses.replace(CFG, dtype="float32")


@pytest.fixture(scope="module")
def params():
    return init_params(CFG, jax.random.key(0))


@pytest.fixture(scope="module")
def tokens():
    return jax.random.randint(jax.random.key(1), (3, 12), 0, CFG.vocab_size)


# the forward, jitted once for the module: a call with the same config, numerics, capture flags
# and shapes reuses its program (hints and forced routing are arguments, not constants)
_forward = jax.jit(M.forward, static_argnames=("cfg", "numerics", "capture_hints", "capture_codes"))


def run(params, tokens, cfg, num, **kw):
    return _forward(params, tokens, cfg=cfg, numerics=num, **kw)


def incremental(params, tokens, cfg, num, prefill=5, slots=16):
    B, T = tokens.shape
    cache = attention.init_cache(cfg, num, B, slots)
    step = jax.jit(lambda p, t, pos, c: M.forward(p, t, cfg=cfg, numerics=num, cache=c,
                                                  positions_BxT=pos), donate_argnums=3)
    pos = jnp.broadcast_to(jnp.arange(prefill)[None], (B, prefill))
    logits, _, cache = step(params, tokens[:, :prefill], pos, cache)
    outs = [logits]
    for t in range(prefill, T):
        lg, _, cache = step(params, tokens[:, t:t + 1], jnp.full((B, 1), t), cache)
        outs.append(lg)
    return jnp.concatenate(outs, axis=1)


@pytest.mark.parametrize("mode,fmt", [("bf16", "nvfp4"), ("fp4_rollout", "nvfp4"),
                                      ("fp4_rollout", "mxfp4")])
def test_prefill_then_decode_reproduces_full_forward(params, tokens, mode, fmt):
    num = nx.make_numerics(mode, CFG.n_layers, fmt=fmt)
    p = pack_params(params, num, jnp.float32)
    full, _, _ = run(p, tokens, CFG32, num)
    inc = incremental(p, tokens, CFG32, num)
    scale = float(jnp.abs(full).max())
    # float32 activations: the two paths differ only in summation order (and, for FP4, in the
    # rare code an ulp-level difference flips); bf16 would hide errors behind its own rounding.
    np.testing.assert_allclose(np.asarray(inc), np.asarray(full), atol=2e-3 * scale)
    if mode == "bf16":
        np.testing.assert_allclose(np.asarray(inc), np.asarray(full), atol=1e-5 * scale)


def test_mgpu_cache_layout_holds_the_same_cache_and_logits(params, tokens, monkeypatch):
    """``attention.FP4_CACHE_LAYOUT = "mgpu"`` (one MgpuKV per layer, slots rounded up to 64):
    prefill + decode write the same NVFP4 rows as the default layout (the caches converted to
    natural are equal, bit for bit) and give the same logits (on the CPU both attend through
    ``ops.decode_attention_reference``); MXFP4, a head_dim that is not a multiple of 64 and
    unknown layouts are refused by name."""
    from pallas_kernels import kv_layout as KL
    from pallas_kernels import mgpu_kv_layout as MK

    cfg = dataclasses.replace(CFG32, head_dim=64, n_layers=1)  # the layout's head_dim multiple
    num = nx.make_numerics("fp4_rollout", cfg.n_layers)
    p = pack_params(init_params(cfg, jax.random.key(3)), num, jnp.float32)
    B, T = tokens.shape
    step = jax.jit(lambda p, t, pos, c: M.forward(p, t, cfg=cfg, numerics=num, cache=c,
                                                  positions_BxT=pos))

    def final_cache(layout):
        monkeypatch.setattr(attention, "FP4_CACHE_LAYOUT", layout)
        # 64 slots in both (an "mgpu" cache rounds 16 up to 64: attention over 16 masked
        # slots would sum in another order, an ulp apart, and flip later layers' codes)
        cache = attention.init_cache(cfg, num, B, 64 if layout == "kv_words" else 16)
        logits, _, cache = step(p, tokens[:, :5], jnp.broadcast_to(jnp.arange(5), (B, 5)), cache)
        for t in range(5, 7):  # two decode steps: one compile, a row appended after a row
            lg, _, cache = step(p, tokens[:, t:t + 1], jnp.full((B, 1), t), cache)
            logits = jnp.concatenate([logits, lg], axis=1)
        return logits, cache

    a_logits, a_cache = final_cache("kv_words")
    b_logits, b_cache = final_cache("mgpu")
    assert b_cache[0]["kv"].shape == (B, CFG.n_kv_heads, 64, 64)
    for a, b in zip(a_cache, b_cache):
        k, v = MK.from_mgpu_kv(b["kv"])
        for want, got in ((a["k"], k), (a["v"], v)):
            want = KL.to_natural(want)
            for f in ("codes", "scales", "global_scale"):
                np.testing.assert_array_equal(
                    np.asarray(getattr(got, f)[:, :, :7]).view(np.uint8),
                    np.asarray(getattr(want, f)[:, :, :7]).view(np.uint8), err_msg=f)
    np.testing.assert_array_equal(np.asarray(b_logits), np.asarray(a_logits))
    with pytest.raises(ValueError, match="'mgpu' KV cache layout holds NVFP4"):
        attention.init_cache(cfg, nx.make_numerics("fp4_rollout", cfg.n_layers, fmt="mxfp4"),
                             B, 16)
    with pytest.raises(ValueError, match="needs head_dim % 64 == 0, got 32"):
        attention.init_cache(CFG, num, B, 16)
    monkeypatch.setattr(attention, "FP4_CACHE_LAYOUT", "mgpu_typo")
    with pytest.raises(ValueError, match="FP4_CACHE_LAYOUT 'mgpu_typo'"):
        attention.init_cache(CFG, num, B, 16)


def test_fp4_cache_is_packed_and_smaller():
    num = nx.make_numerics("fp4_rollout", CFG.n_layers)
    c4 = attention.init_cache(CFG, num, 2, 64)
    c16 = attention.init_cache(CFG32, nx.make_numerics("bf16", CFG.n_layers), 2, 64)
    assert isinstance(c4[0]["k"], Q.QTensor) and c4[0]["k"].codes.shape == (2, 2, 64, 16)
    nb = lambda c: sum(a.nbytes for a in jax.tree.leaves(c))  # noqa: E731
    elems = 2 * 2 * CFG.n_kv_heads * 64 * CFG.head_dim * CFG.n_layers  # k+v, B=2, 64 slots
    # 4-bit codes + one E4M3 byte per 16 + one f32 global scale per row (head_dim elements)
    assert nb(c4) == elems * (0.5 + 1 / 16 + 4 / CFG.head_dim)
    assert nb(c16) == elems * 4  # this test's cache follows CFG.dtype (float32)


# FP4 rollout numerics with hints at every layer: the rollout forward of the two tests below
ROLL_ALL = nx.make_numerics("fp4_rollout", CFG.n_layers, hint_layers="all")


def test_causal(params, tokens):
    # the FP4 rollout forward (capturing hints and codes) of the next test: one program for both
    p = pack_params(params, ROLL_ALL)
    kw = dict(capture_hints=True, capture_codes=True)
    a, _, _ = run(p, tokens, CFG, ROLL_ALL, **kw)
    b, _, _ = run(p, tokens.at[:, 8:].set((tokens[:, 8:] + 1) % CFG.vocab_size), CFG, ROLL_ALL,
                  **kw)
    np.testing.assert_array_equal(np.asarray(a[:, :8]), np.asarray(b[:, :8]))
    assert not np.allclose(np.asarray(a[:, 8:]), np.asarray(b[:, 8:]))


def test_rollout_and_qat_agree_and_hinted_codes_match_exactly(params, tokens):
    roll = ROLL_ALL
    qat = roll.with_mode("fp4_qat")
    # rollout at a different batch size than the trainer: bf16 noise differs, codes may flip
    r_logits, r_aux, _ = run(pack_params(params, roll), tokens, CFG, roll,
                             capture_hints=True, capture_codes=True)
    noisy = jax.jit(lambda p: jax.tree.map(  # emulate trainer-side drift (one program)
        lambda a: (a * (1 + 3e-3 * jax.random.normal(jax.random.key(5), a.shape))).astype(a.dtype),
        p))(params)
    t_rtn, a_rtn, _ = run(params, tokens, CFG, qat, capture_codes=True,
                          forced_experts_LxBxTxK=r_aux.experts)
    t_tr, a_tr, _ = run(params, tokens, CFG, qat, capture_codes=True, hints=r_aux.hints,
                        forced_experts_LxBxTxK=r_aux.experts, hint_experts_LxBxTxK=r_aux.experts)
    # same weights, same inputs: QAT reproduces rollout numerics ... On the CPU the two
    # forwards run the same arithmetic (exact code * block scale products, the global scale on
    # the f32 accumulator, the hinted codes): the logits are bit-identical at every XLA
    # optimization level. (atol=0.05 here, ~10% of these logits' largest, passed a trainer
    # that rounds code * scale * global scale to bf16, session 32's bug: 1.5e-3 off, every code
    # still pinned by the hints; and one that skips the activation fake-quant: 0.04 off.)
    if jax.default_backend() == "cpu":
        np.testing.assert_array_equal(np.asarray(t_tr), np.asarray(r_logits))
    else:  # GPU kernels sum in their own order
        np.testing.assert_allclose(np.asarray(t_tr), np.asarray(r_logits),
                                   atol=1e-2 * float(np.abs(np.asarray(r_logits)).max()))
    for name, h in r_aux.codes.items():
        agree = float(Q.code_agreement(a_tr.codes[name], h))
        assert agree == 1.0, (name, agree)
    # ... and with drifted weights, hints still pin the hinted codes where RTN does not
    _, a_n_rtn, _ = run(noisy, tokens, CFG, qat, capture_codes=True,
                        forced_experts_LxBxTxK=r_aux.experts)
    _, a_n_tr, _ = run(noisy, tokens, CFG, qat, capture_codes=True, hints=r_aux.hints,
                       forced_experts_LxBxTxK=r_aux.experts, hint_experts_LxBxTxK=r_aux.experts)
    for name in r_aux.hints:
        g = float(Q.code_agreement(a_n_tr.codes[name], r_aux.codes[name]))
        r = float(Q.code_agreement(a_n_rtn.codes[name], r_aux.codes[name]))
        assert g >= r and g > 0.97, (name, g, r)
    assert sum(float(Q.code_agreement(a_n_rtn.codes[n], r_aux.codes[n])) < 1 for n in r_aux.hints)


def test_pass_inputs_that_do_not_fit_are_refused_by_name(params, tokens):
    """A mask of another shape than the tokens (a [T, B] one reshapes without error), hints of
    another format or kind than the trainer's policy (an NVFP4 trainer quantized MXFP4-hinted
    sites on the MXFP4 grid; exact codes given to a 1-bit policy made a silent upper-bound
    ablation), and weights packed for other numerics are refused, naming the problem."""
    roll, B, T = ROLL_ALL, *tokens.shape
    qat = roll.with_mode("fp4_qat")
    mx = nx.make_numerics("fp4_rollout", CFG.n_layers, fmt="mxfp4", hint_layers="all")
    _, r_aux, _ = run(pack_params(params, roll), tokens, CFG, roll, capture_hints=True,
                      capture_codes=True)
    _, m_aux, _ = run(pack_params(params, mx), tokens, CFG, mx, capture_hints=True)
    kw = dict(cfg=CFG, numerics=qat, forced_experts_LxBxTxK=r_aux.experts,
              hint_experts_LxBxTxK=r_aux.experts)
    for name in ("valid_BxT", "hint_valid_BxT"):
        with pytest.raises(ValueError, match=rf"{name} shape \({T}, {B}\) != the tokens' "
                                             rf"\(B, T\) = \({B}, {T}\)"):
            M.forward(params, tokens, **kw, **{name: jnp.ones((T, B), bool)})
    with pytest.raises(ValueError, match=rf"forced_experts ids \[{CFG.n_experts}\] outside "
                                         rf"0..{CFG.n_experts - 1} \(the experts\)"):
        M.forward(params, tokens, **{**kw, "forced_experts_LxBxTxK":
                                     r_aux.experts.at[0, 0, 0, 0].set(CFG.n_experts)})
    exact = {k: r_aux.codes[k] for k in r_aux.hints}
    with pytest.raises(ValueError, match="a nvfp4 'exact' hint given to a nvfp4 policy with "
                                         "hint_kind='mantissa'"):
        M.forward(params, tokens, hints=exact, **kw)
    with pytest.raises(ValueError, match="a mxfp4 'mantissa' hint given to a nvfp4 policy"):
        M.forward(params, tokens, hints=m_aux.hints, **kw)
    with pytest.raises(ValueError, match="an exact-hint policy cannot be fed the rollout's "
                                         "'mantissa' hint"):
        dataclasses.replace(qat, hint_kind="exact").trainer_hints(r_aux.hints)
    assert set(dataclasses.replace(qat, hint_kind="exact").trainer_hints(exact)) == set(exact)
    with pytest.raises(ValueError, match="nvfp4 packed weights given to numerics that use mxfp4"):
        M.forward(pack_params(params, roll), tokens, cfg=CFG, numerics=mx)
    bf16_experts = nx.make_numerics("fp4_rollout", CFG.n_layers, sites=["attn/kv"],
                                    hint_sites=["attn/kv"])
    with pytest.raises(ValueError, match="packed weights given to numerics that keep this site "
                                         "in high precision"):
        M.forward(pack_params(params, roll), tokens, cfg=CFG, numerics=bf16_experts)


def test_expert_hidden_hints_follow_the_expert_not_the_slot(params, tokens):
    """Where the trainer routes a token to another expert set than the rollout did, each of its
    slots takes the rollout's ``expert_hidden`` hint row of the same expert (slots are sorted
    by expert id, so {a, b} and {b, c} put b in different slots): with exact hints the
    trainer's codes for b are the rollout's exactly, on drifted params where RTN's are not."""
    roll = ROLL_ALL
    qat = dataclasses.replace(roll.with_mode("fp4_qat"), hint_kind="exact")
    _, r_aux, _ = run(pack_params(params, roll), tokens, CFG, roll, capture_hints=True,
                      capture_codes=True)
    he = r_aux.experts.astype(jnp.int32)  # [L, B, T, 2], ascending
    a, b = he[..., 0], he[..., 1]
    c = (b + 1) % CFG.n_experts
    c = jnp.where(c == a, (b + 2) % CFG.n_experts, c)
    forced = jnp.sort(jnp.stack([b, c], -1), -1).astype(r_aux.experts.dtype)  # {b, c}
    moved = forced[..., 0] == b  # b in slot 0 for the trainer, slot 1 for the rollout
    assert bool(jnp.any(moved)) and bool(jnp.any(~moved))
    noisy = jax.tree.map(lambda x: (x * (1 + 3e-3 * jax.random.normal(
        jax.random.key(5), x.shape))).astype(x.dtype), params)
    exact = {n: r_aux.codes[n] for n in r_aux.hints}
    kw = dict(forced_experts_LxBxTxK=forced, hint_experts_LxBxTxK=r_aux.experts,
              capture_codes=True)
    _, t_aux, _ = run(noisy, tokens, CFG, qat, hints=exact, **kw)
    _, rtn_aux, _ = run(noisy, tokens, CFG, qat.with_mode("fp4_qat"), **kw)
    rtn_differs = False
    for l in range(CFG.n_layers):
        name = f"layers/{l}/moe/expert_hidden"
        slot = jnp.where(moved[l], 0, 1)[..., None, None]  # the trainer's slot of b
        got = jnp.take_along_axis(t_aux.codes[name].bits, slot, axis=2)[:, :, 0]
        want = np.asarray(r_aux.codes[name].bits[:, :, 1])  # the rollout's row of b
        np.testing.assert_array_equal(np.asarray(got), want)
        rtn = jnp.take_along_axis(rtn_aux.codes[name].bits, slot, axis=2)[:, :, 0]
        rtn_differs |= not np.array_equal(np.asarray(rtn), want)
    assert rtn_differs  # (the drift did move some codes: the hints, not luck, pinned them)


def test_hinted_sites_follow_config(params, tokens):
    num = nx.make_numerics("fp4_rollout", CFG.n_layers, hint_layers="last_half",
                           hint_sites=["moe/expert_in"])
    _, aux, _ = run(pack_params(params, num), tokens, CFG, num, capture_hints=True)
    assert sorted(aux.hints) == ["layers/1/moe/expert_in"]
    h = aux.hints["layers/1/moe/expert_in"]
    assert h.bits.shape == (3, 12, CFG.d_model // 8)  # [B, T, packed bits]


def test_forced_routing_is_replayed(params, tokens):
    """Forced experts are what the layers compute with (replaying the free run's choice gives
    its logits bit for bit, other experts other logits); ``aux.experts`` stays the routers' own
    choice (layer 0's input does not depend on the forcing, so there it is the free run's)."""
    num = nx.make_numerics("bf16", CFG.n_layers)
    forced = jax.random.randint(jax.random.key(3), (CFG.n_layers, 3, 12, 1), 0, 4)
    forced = jnp.concatenate([forced, forced + 4], axis=-1).astype(jnp.uint8)  # distinct
    logits, aux, _ = run(params, tokens, CFG, num, forced_experts_LxBxTxK=forced)
    free_logits, free, _ = run(params, tokens, CFG, num)
    assert not np.array_equal(np.asarray(free.experts), np.asarray(forced))
    assert not np.allclose(np.asarray(logits), np.asarray(free_logits))
    np.testing.assert_array_equal(np.asarray(aux.experts[0]), np.asarray(free.experts[0]))
    assert not np.array_equal(np.asarray(aux.experts[0]), np.asarray(forced[0]))
    replayed, again, _ = run(params, tokens, CFG, num, forced_experts_LxBxTxK=free.experts)
    np.testing.assert_array_equal(np.asarray(replayed), np.asarray(free_logits))
    np.testing.assert_array_equal(np.asarray(again.experts), np.asarray(free.experts))


def test_gradients_flow_through_straight_through_estimator(params, tokens):
    num = nx.make_numerics("fp4_qat", CFG.n_layers)

    def loss(p):
        logits, aux, _ = M.forward(p, tokens, cfg=CFG, numerics=num)
        return jnp.mean(jax.nn.logsumexp(logits, -1)) + 0.01 * aux.lb_loss

    g = jax.jit(jax.grad(loss))(params)
    for path in (("layers", "moe", "w_gate"), ("layers", "moe", "w_down"), ("layers", "moe", "router"),
                 ("layers", "attn", "wk"), ("embed",)):
        leaf = g
        for k in path:
            leaf = leaf[k]
        assert np.all(np.isfinite(np.asarray(leaf))) and float(jnp.abs(leaf).max()) > 0, path


def test_per_layer_layout_gives_the_stacked_results(params, tokens):
    """unstack_layers (the rollout's kernel layout): the same logits, routing and cache as
    stacked params through the cache path, bit for bit; a training forward with scan_layers falls back to the loop;
    stack_layers inverts it; a layer count that does not match the config is refused."""
    num = nx.make_numerics("fp4_rollout", CFG.n_layers)
    p = pack_params(params, num, jnp.float32)
    pl = M.unstack_layers(p)
    assert isinstance(pl["layers"], tuple) and len(pl["layers"]) == CFG.n_layers
    assert pl["layers"][1]["attn"]["wq"].shape == p["layers"]["attn"]["wq"].shape[1:]
    def prefill(params):  # the cache path (the decode forward's per-layer loop), one compile
        cache = attention.init_cache(CFG32, num, tokens.shape[0], 16)
        return jax.jit(lambda p, t, c: M.forward(p, t, cfg=CFG32, numerics=num, cache=c))(
            params, tokens, cache)

    (a_lg, a_aux, a_cache), (b_lg, b_aux, b_cache) = prefill(pl), prefill(p)
    np.testing.assert_array_equal(np.asarray(a_lg), np.asarray(b_lg))
    np.testing.assert_array_equal(np.asarray(a_aux.experts), np.asarray(b_aux.experts))
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)),
                 a_cache, b_cache)
    scan_cfg = dataclasses.replace(CFG32, scan_layers=True)
    a, a_aux, _ = run(pl, tokens, scan_cfg, num)
    b, b_aux, _ = run(p, tokens, scan_cfg, num)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(a_aux.experts), np.asarray(b_aux.experts))
    back = M.stack_layers(pl)
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), back, p)
    short = dict(pl, layers=pl["layers"][:1])
    with pytest.raises(ValueError, match="1 layers .*n_layers=2"):
        run(short, tokens, CFG32, num)


def test_scanned_layers_equal_unrolled_layers():
    """scan_layers: the training forward as lax.scans over groups of identically-quantized layers
    gives the unrolled forward's logits, routing, hints, codes and gradients."""
    cfg = dataclasses.replace(CFG, n_layers=3, dtype="float32")
    p = init_params(cfg, jax.random.key(7))
    toks = jax.random.randint(jax.random.key(8), (2, 10), 0, cfg.vocab_size)
    roll = nx.make_numerics("fp4_rollout", 3, hint_layers=[2])  # groups [0, 2) (a scan), [2, 3)
    assert M._layer_groups(roll, {}, 3) == [(0, 2), (2, 3)]
    _, r_aux, _ = run(pack_params(p, roll), toks, cfg, roll, capture_hints=True)
    qat = roll.with_mode("fp4_qat")

    def value_and_grad(c):
        def loss(p):
            logits, aux, _ = M.forward(p, toks, cfg=c, numerics=qat, hints=r_aux.hints,
                                       forced_experts_LxBxTxK=r_aux.experts,
                                       hint_experts_LxBxTxK=r_aux.experts,
                                       capture_hints=True, capture_codes=True)
            return jnp.mean(jax.nn.logsumexp(logits, -1)) + 0.01 * aux.lb_loss, (logits, aux)
        return jax.jit(jax.value_and_grad(loss, has_aux=True))(p)

    (_, (a_logits, a_aux)), a_grad = value_and_grad(cfg)
    (_, (b_logits, b_aux)), b_grad = value_and_grad(dataclasses.replace(cfg, scan_layers=True))
    np.testing.assert_allclose(np.asarray(b_logits), np.asarray(a_logits), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(b_aux.experts), np.asarray(a_aux.experts))
    assert sorted(b_aux.codes) == sorted(a_aux.codes) and sorted(b_aux.hints) == sorted(a_aux.hints)
    assert sorted(a_aux.hints) == sorted(r_aux.hints) and len(a_aux.codes) == 3 * 3
    for name in a_aux.codes:
        assert float(Q.code_agreement(b_aux.codes[name], a_aux.codes[name])) == 1.0, name
    np.testing.assert_allclose(float(b_aux.lb_loss), float(a_aux.lb_loss), rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4,
                                                         atol=1e-6), b_grad, a_grad)


def test_qwen3_30b_counts_without_allocating():
    from configs import qwen3_30b_a3b
    cfg = M.ModelConfig.from_config(qwen3_30b_a3b.get_config().model)
    c = P.count(cfg)
    assert abs(c["total_params"] / 30.5e9 - 1) < 0.01
    assert abs(c["active_params_per_token"] / 3.3e9 - 1) < 0.03
    shapes = jax.eval_shape(lambda k: M.init_params(cfg, k), jax.random.key(0))
    n = sum(np.prod(s.shape) for s in jax.tree.leaves(shapes))
    assert n == c["total_params"]


@pytest.mark.parametrize("change,msg", [
    (dict(n_heads=6, n_kv_heads=4), "not divisible by model.n_kv_heads"),
    (dict(top_k=9), "top_k=9 exceeds"),
    (dict(d_model=0), "d_model must be positive"),
])
def test_bad_model_configs(change, msg):
    with pytest.raises(ValueError, match=msg):
        dataclasses.replace(CFG, **change)


def test_bad_numerics_and_config_fields():
    with pytest.raises(ValueError, match="matches no site"):
        nx.make_numerics("fp4_qat", 2, sites=["moe/expert_inn"])
    with pytest.raises(ValueError, match="matches no site"):
        nx.make_numerics("fp4_qat", 2, sites=["layers/7/moe/expert_in"])
    with pytest.raises(ValueError, match="mode"):
        nx.make_numerics("fp8", 2)
    with pytest.raises(ValueError, match="hint sites must be quantized"):
        nx.make_numerics("fp4_qat", 2, sites=["attn/kv"], hint_sites=["moe/expert_in"])
    with pytest.raises(ValueError, match=r"unknown model config fields \['n_layer'\]"):
        M.ModelConfig.from_config(dict(dataclasses.asdict(CFG), n_layer=3))
    with pytest.raises(ValueError, match="block size"):
        M.forward(M.init_params(dataclasses.replace(CFG, d_expert=24), jax.random.key(0)),
                  jnp.zeros((1, 4), jnp.int32), cfg=dataclasses.replace(CFG, d_expert=24),
                  numerics=nx.make_numerics("fp4_qat", 2))


def test_regex_sites_and_w4a16():
    num = nx.make_numerics("fp4_qat_w4a16", 4, sites=[r"layers/[23]/moe/.*"], hint_sites=[],
                           hint_layers="none")
    assert num.quantizes("layers/2/moe/expert_weights")
    assert not num.quantizes("layers/2/moe/expert_in")  # W4A16: activations stay bf16
    assert not num.quantizes("layers/0/moe/expert_weights")


def test_lm_logits_backward_runs_in_the_activation_dtype():
    """The head's custom VJP: bf16 cotangent GEMMs (f32 accumulation) that match XLA's f32
    gradient to bf16 precision, grads in the inputs' dtypes; with f32 inputs it is XLA's."""
    k0, k1, k2 = jax.random.split(jax.random.key(3), 3)
    x = jax.random.normal(k0, (2, 5, 32), jnp.float32)
    head = jax.random.normal(k1, (32, 48), jnp.float32) / 6
    g = jax.random.normal(k2, (2, 5, 48), jnp.float32)
    loss = lambda f, x, h: jnp.sum(f(x, h) * g)  # noqa: E731
    xla = lambda x, h: jnp.dot(x, h, preferred_element_type=jnp.float32)  # noqa: E731
    rx, rh = jax.grad(lambda x, h: loss(xla, x, h), argnums=(0, 1))(x, head)
    bx, bh = x.astype(jnp.bfloat16), head.astype(jnp.bfloat16)
    np.testing.assert_array_equal(M.lm_logits(bx, bh), xla(bx, bh))
    dx, dh = jax.grad(lambda x, h: loss(M.lm_logits, x, h), argnums=(0, 1))(bx, bh)
    assert dx.dtype == jnp.bfloat16 and dh.dtype == jnp.bfloat16
    def rel(a, b):
        return float(jnp.linalg.norm(a.astype(jnp.float32) - b) / jnp.linalg.norm(b))
    assert rel(dx, rx) < 2e-2 and rel(dh, rh) < 2e-2
    jp = jax.make_jaxpr(jax.grad(lambda x, h: loss(M.lm_logits, x, h), argnums=(0, 1)))(bx, bh)
    dots = _dot_operand_dtypes(jp.jaxpr)
    assert len(dots) == 3 and all(d == ("bfloat16", "bfloat16") for d in dots), dots
    fx, fh = jax.grad(lambda x, h: loss(M.lm_logits, x, h), argnums=(0, 1))(x, head)
    np.testing.assert_allclose(fx, rx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fh, rh, rtol=1e-5, atol=1e-5)


def _dot_operand_dtypes(jaxpr) -> list[tuple[str, ...]]:
    """Operand dtypes of every dot_general in a jaxpr and its sub-jaxprs."""
    return [tuple(str(v.aval.dtype) for v in e.invars) for e in walk_eqns(jaxpr)
            if e.primitive.name == "dot_general"]


def test_model_gradient_through_the_pallas_grouped_path(monkeypatch):
    """What the trainer runs on the GPU: ops.grouped_matmul through the Pallas bf16 grouped
    kernel and its custom VJP (interpret mode here) gives the reference (ragged_dot) path's loss
    and gradients, expert weights included, to bf16 precision."""
    from pallas_kernels import fp4_matmul as FM
    from trace_jax import ops

    cfg = dataclasses.replace(CFG, d_expert=64, d_shared=0, n_layers=1)  # K, N multiples of 64
    p = init_params(cfg, jax.random.key(5))
    toks = jax.random.randint(jax.random.key(6), (2, 8), 0, cfg.vocab_size)
    g = jax.random.normal(jax.random.key(7), (2, 8, cfg.vocab_size))
    num = nx.make_numerics("bf16", cfg.n_layers)

    def loss_and_grad():
        def loss(p):
            logits, _, _ = M.forward(p, toks, cfg=cfg, numerics=num)
            return jnp.sum(logits * g)
        return jax.jit(jax.value_and_grad(loss))(p)

    ref_loss, ref_g = loss_and_grad()
    calls = []
    orig = FM.bf16_grouped_matmul
    monkeypatch.setattr(ops, "_on_gpu", lambda: True)
    monkeypatch.setattr(FM, "bf16_grouped_matmul",
                        lambda *a, **k: calls.append(1) or orig(*a, **{**k, "backend": "triton"}))
    k_loss, k_g = loss_and_grad()
    assert len(calls) == 3  # gate, up, down
    assert abs(float(k_loss - ref_loss)) <= 2e-2 * abs(float(ref_loss))
    for name in ("w_gate", "w_up", "w_down"):
        a, b = k_g["layers"]["moe"][name], ref_g["layers"]["moe"][name]
        rel = float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))
        assert float(jnp.linalg.norm(b)) > 0 and rel < 2e-2, (name, rel)


def test_stable_order_is_a_stable_argsort_and_its_inverse(monkeypatch):
    """moe.stable_order: the rank count (decode sizes) and the sort (above RANK_SORT_MAX) both
    give argsort(key, stable=True) and its inverse permutation, ties in index order."""
    from trace_jax import moe

    key = jnp.asarray(np.random.default_rng(3).integers(0, 9, 300), jnp.int32)  # many ties
    want = np.argsort(np.asarray(key), kind="stable")
    for limit in (4096, 0):
        monkeypatch.setattr(moe, "RANK_SORT_MAX", limit)
        order, inverse = jax.jit(moe.stable_order)(key)
        np.testing.assert_array_equal(np.asarray(order), want)
        np.testing.assert_array_equal(np.asarray(inverse)[want], np.arange(300))
        assert order.dtype == inverse.dtype == jnp.int32


def test_moe_stage_gradients_are_gathers_not_scatters():
    """The expert stages' row gathers have gather backwards (XLA's own gradient of ``x[idx]``
    is a scatter-add: GPU atomics, even for a permutation) and give autodiff's gradients."""
    from trace_jax import moe, ops

    rng = np.random.default_rng(0)
    N, k, E, Md, F = 24, 3, 6, 16, 8
    x = jnp.asarray(rng.standard_normal((N, Md)), jnp.float32)
    e = jnp.asarray(np.sort(np.stack([rng.choice(E, k, replace=False) for _ in range(N)]), -1),
                    jnp.int32)
    w = [jnp.asarray(0.3 * rng.standard_normal(s), jnp.float32)
         for s in ((E, Md, F), (E, Md, F), (E, F, Md))]

    def plain(x, wg, wu, wd):  # the same stages with XLA's gather gradients
        local, order, inverse, sizes = moe._local_slots(e, 0, E)
        xs = x[order // k]
        g = ops.grouped_matmul(xs, wg, sizes)
        h = (jax.nn.silu(g) * ops.grouped_matmul(xs, wu, sizes))[inverse]
        h = jnp.where(local[:, None], h, 0)
        d = ops.grouped_matmul(h[order], wd, sizes)[inverse]
        return jnp.sum(jnp.where(local[:, None], d, 0) ** 2)

    def stages(x, wg, wu, wd):
        h = moe._gate_up_local(x, e, wg, wu, 0)
        return jnp.sum(moe._down_local(h, e, wd, 0) ** 2)

    grad = jax.grad(stages, argnums=(0, 1, 2, 3))
    for a, b in zip(grad(x, *w), jax.grad(plain, argnums=(0, 1, 2, 3))(x, *w)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    def float_scatters(fn):  # (the group sizes' bincount is an int32 scatter-add: forward)
        return [q for q in walk_eqns(jax.make_jaxpr(fn)(x, *w).jaxpr)
                if "scatter" in q.primitive.name
                and jnp.issubdtype(q.outvars[0].aval.dtype, jnp.floating)]

    assert float_scatters(grad) == []
    assert float_scatters(jax.grad(plain, argnums=(0, 1, 2, 3)))  # what the custom VJPs replace


@pytest.mark.parametrize("p_precision", ["f32", "bf16"])
def test_trainer_attention_reads_the_decode_caches_values(params, p_precision):
    """The QAT trainer's causal attention and a decode step over the FP4 cache compute the same
    thing: the same K/V (exact f32 ``code * scale * row scale``, which bf16 cannot hold; rounding
    them to bf16 in the trainer, before session 31, moved most outputs by an ulp or more) and
    the same arithmetic for either P precision (an f32-P trainer against bf16-P decoding moves
    ~14% of the outputs), so the decoded position's bf16 outputs are bit-identical."""
    roll = nx.make_numerics("fp4_rollout", CFG.n_layers, fmt="nvfp4").with_attention_p(p_precision)
    qat = roll.with_mode("fp4_qat")
    p = jax.tree.map(lambda a: a[0], params["layers"]["attn"])  # layer 0
    B, T = 4, 9
    x = jax.random.normal(jax.random.key(3), (B, T, CFG.d_model), jnp.float32).astype(jnp.bfloat16)
    pos = jnp.broadcast_to(jnp.arange(T)[None], (B, T))

    def train(p, x):
        return attention.attention_block(p, x, pos, cfg=CFG, sio=nx.SiteIO(qat), layer=0)[0]

    def decode(p, x):
        cache = attention.init_cache(CFG, roll, B, 16)[0]
        blk = lambda xs, ps, c: attention.attention_block(  # noqa: E731
            p, xs, ps, cfg=CFG, sio=nx.SiteIO(roll), layer=0, cache=c)
        _, cache = blk(x[:, :-1], pos[:, :-1], cache)
        return blk(x[:, -1:], pos[:, -1:], cache)[0][:, 0]

    want = np.asarray(nx.model_jit(train)(p, x)[:, -1], np.float32)
    got = np.asarray(nx.model_jit(decode)(p, x), np.float32)
    assert isinstance(attention.init_cache(CFG, roll, 1, 1)[0]["k"], Q.QTensor)
    if jax.default_backend() == "cpu":  # the decode reference
        np.testing.assert_array_equal(got, want)
    else:  # the GPU kernel: its own summation order (and rounding of a bf16 P)
        np.testing.assert_allclose(got, want, atol=1e-2 * float(np.abs(want).max()))


def test_rms_norm_takes_its_scale_in_the_activation_dtype():
    """The trainer's f32 master scale and the rollout's synced bf16 copy give the same bf16
    norm (an f32 scale used as f32 moved 27% of these outputs by an ulp: session 31)."""
    x = jax.random.normal(jax.random.key(0), (4, 64), jnp.float32).astype(jnp.bfloat16)
    scale = 1 + 0.1 * jax.random.normal(jax.random.key(1), (64,), jnp.float32)
    assert not np.array_equal(np.asarray(scale), np.asarray(scale.astype(jnp.bfloat16), np.float32))
    master = attention.rms_norm(x, scale, 1e-6)
    synced = attention.rms_norm(x, scale.astype(jnp.bfloat16), 1e-6)
    np.testing.assert_array_equal(np.asarray(master, np.float32), np.asarray(synced, np.float32))
    f32 = attention.rms_norm(x.astype(jnp.float32), scale, 1e-6)  # f32 models keep f32 scales
    want = x.astype(jnp.float32) * jax.lax.rsqrt(
        jnp.mean(jnp.square(x.astype(jnp.float32)), -1, keepdims=True) + 1e-6) * scale[None]
    np.testing.assert_allclose(np.asarray(f32), np.asarray(want), rtol=1e-6)


def test_model_jit_rounds_to_bf16_whatever_the_shapes():
    """``nx.model_jit`` (exact bf16 casts) gives a token's RMSNorm + RoPE of its query the same
    bits in a [128, 5] prefill as in a [128, 17] trainer forward; plain ``jax.jit`` (XLA's
    excess precision) differs in 32% of them on this CPU (session 32). Called under another jit
    or ``eval_shape`` it falls back to a plain jit (JAX takes compiler options at top level
    only)."""
    B, M, H, D = 128, 64, 4, 32
    h = jax.random.normal(jax.random.key(0), (B, 17, M)).astype(jnp.bfloat16)
    wq = (0.2 * jax.random.normal(jax.random.key(1), (M, H * D))).astype(jnp.bfloat16)
    scale = 1 + 0.1 * jax.random.normal(jax.random.key(2), (D,))

    def q_rope(h):
        b, t, _ = h.shape
        q = (h @ wq).reshape(b, t, H, D)
        pos = jnp.broadcast_to(jnp.arange(t)[None], (b, t))
        return attention.rope(attention.rms_norm(q, scale, 1e-6), pos, 1e6)

    f = nx.model_jit(q_rope)
    full, prefill = f(h), f(h[:, :5])
    np.testing.assert_array_equal(np.asarray(full[:, :5], np.float32),
                                  np.asarray(prefill, np.float32))
    nested = jax.jit(lambda h: f(h))(h)
    assert nested.shape == full.shape and jax.eval_shape(f, h).shape == full.shape
    assert jax.eval_shape(lambda: f(h)).shape == full.shape  # traced, concrete arguments only
    assert f._cache_size() >= 2


def test_rope_in_a_decode_loop_equals_rope_over_the_sequence():
    """RoPE of one position per step in a ``fori_loop`` (the engine's decode) equals RoPE of the
    whole sequence (the trainer's forward) bit for bit. Without the rounding of both products
    before the add, XLA fused ``fma(x, cos, rot * sin)`` in one program and ``fma(rot, sin, x *
    cos)`` in the other, and 9.4e-6 of these elements differed on this CPU (session 37)."""
    B, T, H, D = 128, 13, 8, 64
    x = jax.random.normal(jax.random.key(0), (B, T, H, D)).astype(jnp.bfloat16)
    theta = 1e6

    def full(x):
        return attention.rope(x, jnp.broadcast_to(jnp.arange(T)[None], (B, T)), theta)

    def loop(x):
        def body(i, out):
            xi = jax.lax.dynamic_slice_in_dim(x, i, 1, axis=1)
            ri = attention.rope(xi, jnp.full((B, 1), i, jnp.int32), theta)
            return jax.lax.dynamic_update_slice_in_dim(out, ri, i, axis=1)

        return jax.lax.fori_loop(0, T, body, jnp.zeros_like(x))

    # as the model's jits compile outside the tests (the suite compiles at LLVM level 0, where
    # no FMA is contracted: conftest.py)
    opts = {**nx.COMPILER_OPTIONS, "xla_backend_optimization_level": 2}
    a, b = (jax.jit(f, compiler_options=opts)(x) for f in (full, loop))
    np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


def test_trainer_and_decode_attention_agree_without_ynnpack():
    """The trainer's causal attention and the decode step's (``ops.decode_attention_reference``,
    one query position over the cache) give the same bf16 outputs when the CPU jits compile
    without YNNPACK fusions (``TRACE_JAX_YNN=0``); with them (XLA's default) YNNPACK sums the
    trainer's [T, S] scores in another order than the decode's [1, S] for most T (at T = 13
    here 1 output in 26624 differed, session 37)."""
    B, T, K, G, D = 4, 13, 2, 4, 64
    ks = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(ks[0], (B, T, K * G, D)).astype(jnp.bfloat16)
    k, v = (jax.random.normal(kk, (B, T, K, D)).astype(jnp.bfloat16) for kk in ks[1:])

    def decode(q, k, v):
        kc, vc = jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2)
        return jnp.stack([ops.decode_attention_reference(
            q[:, t], kc, vc, jnp.full((B,), t + 1, jnp.int32)) for t in range(T)], 1)

    opts = {**nx.COMPILER_OPTIONS, **nx.NO_YNN, "xla_backend_optimization_level": 2}
    train = jax.jit(attention.causal_attention, compiler_options=opts)(q, k, v)
    np.testing.assert_array_equal(np.asarray(train, np.float32),
                                  np.asarray(jax.jit(decode, compiler_options=opts)(q, k, v),
                                             np.float32))
    code = "from trace_jax import numerics as nx; print(sorted(nx.COMPILER_OPTIONS))"
    if "TRACE_JAX_YNN" not in os.environ:  # the default: XLA's
        assert not nx.NO_YNN.items() <= nx.COMPILER_OPTIONS.items()
    env = {**os.environ, "TRACE_JAX_YNN": "0", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert "xla_cpu_experimental_ynn_fusion_type" in out
    env["TRACE_JAX_YNN"] = "no"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "TRACE_JAX_YNN='no'" in bad.stderr


@pytest.mark.parametrize("kernel_layout", [False, "triton", "mosaic"])
def test_qat_trainer_multiplies_fp4_experts_as_the_kernels_do(params, tokens, kernel_layout):
    """The FP4 rollout (packed QTensors, or the Triton / Mosaic FP4 grouped kernels' layouts,
    whose pure-JAX references run on the CPU) and the RTN QAT trainer give the same logits: both feed the
    products exact ``code * block scale`` values and put the expert's global scale on the f32
    accumulator (``ops.ScaledExperts``). Before session 32 the trainer rounded ``code * block
    scale * global scale`` to bf16: vanilla QAT's kl_k3 against the kernel layout was 2.0e-3 on
    the tiny checkpoint. The trainer's gradient reaches the master weights as through the
    identity (straight-through)."""
    roll = nx.make_numerics("fp4_rollout", CFG.n_layers, hint_layers="none")
    qat = roll.with_mode("fp4_qat")
    cfg, p = CFG, params
    if kernel_layout == "mosaic":  # (the Mosaic GPU layout wants K, N multiples of 64)
        cfg = dataclasses.replace(CFG, d_expert=64)
        p = init_params(cfg, jax.random.key(0))
    packed = pack_params(p, roll, kernel_layout=kernel_layout)
    fwd = nx.model_jit(M.forward, static_argnames=("cfg", "numerics"))  # as the engines compile
    r_logits, r_aux, _ = fwd(packed, tokens, cfg=cfg, numerics=roll)
    t_logits, _, _ = fwd(p, tokens, cfg=cfg, numerics=qat, forced_experts_LxBxTxK=r_aux.experts)
    np.testing.assert_array_equal(np.asarray(t_logits), np.asarray(r_logits))
    if kernel_layout:
        return  # (the gradient below does not depend on the rollout's layout)

    w = params["layers"]["moe"]["w_up"][0]
    x = jax.random.normal(jax.random.key(4), (6, w.shape[1])).astype(jnp.bfloat16)
    gs = jnp.array([2, 0, 3, 1] + [0] * (w.shape[0] - 4), jnp.int32)
    sio = nx.SiteIO(qat)

    def f(w):
        return jnp.sum(ops.grouped_matmul(x, sio.weight("layers/0/moe/expert_weights", w), gs)
                       .astype(jnp.float32))

    def identity(w):  # what straight-through promises: the gradient of x @ w
        return jnp.sum(jax.lax.ragged_dot(x.astype(jnp.float32), w, gs))

    np.testing.assert_allclose(np.asarray(jax.grad(f)(w)), np.asarray(jax.grad(identity)(w)),
                               rtol=2e-2, atol=1e-2)
    wb = w.astype(jnp.bfloat16)  # bf16 masters (the 30B config's param_dtype) stay bf16
    gb = jax.grad(f)(wb)
    assert gb.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(gb, np.float32), np.asarray(jax.grad(identity)(w)),
                               rtol=2e-2, atol=2e-2)
    # a per-tensor global scale (one for every expert) broadcasts
    q = Q.quantize(w, "nvfp4", axis=-2)
    np.testing.assert_allclose(
        np.asarray(ops.grouped_matmul(x, q, gs), np.float32),
        np.asarray(jax.lax.ragged_dot(x, Q.dequantize(q, jnp.bfloat16), gs,
                                      preferred_element_type=jnp.float32)),
        rtol=2e-2, atol=2e-2)


def test_hint_layer_specs_including_command_line_strings():
    """numerics.hint_layers is a string field, so a command-line fraction or list arrives as a
    string; both read as the typed forms do, and bad ones are refused by name."""
    h = nx.hint_layer_set
    assert h("last_half", 8) == frozenset(range(4, 8)) == h(0.5, 8) == h("0.5", 8)
    assert h("[2, 3]", 8) == h("2,3", 8) == h([2, 3], 8) == frozenset({2, 3})
    assert h(".25", 8) == frozenset({6, 7}) and h("all", 3) == frozenset({0, 1, 2})
    assert h("none", 3) == frozenset() and h("5", 8) == frozenset({5})
    for bad, msg in (("1.5", "fraction must be in"), ("[9]", "outside 0..7"),
                     ("lastt", "unknown spec 'lastt'")):
        with pytest.raises(ValueError, match=msg):
            h(bad, 8)


def test_token_ids_outside_the_vocabulary_are_refused_or_nan(params, tokens):
    """Concrete ids outside 0..V-1 raise; traced ones (inside a jit) embed as NaN, so their
    sequence's logits are NaN instead of a clamped or wrapped row's (the masked attention's
    zero weights times NaN reach its earlier positions too); other sequences stay finite."""
    num = nx.make_numerics("bf16", CFG.n_layers)
    for bad in (CFG.vocab_size, -1):
        t = np.asarray(tokens).copy()
        t[0, 3] = bad
        with pytest.raises(ValueError, match=rf"token ids \[{bad}\] outside 0..{CFG.vocab_size - 1}"):
            M.forward(params, jnp.asarray(t), cfg=CFG, numerics=num)
        lg, _, _ = run(params, jnp.asarray(t), CFG, num)
        lg = np.asarray(lg)
        assert np.isnan(lg[0, 3:]).all() and np.isfinite(lg[1:]).all()
