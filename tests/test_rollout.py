"""The rollout engine: determinism, greedy == argmax of the full forward, recorded log-probs and
hints match the trainer's recomputation, routing replay, EOS/padding, errors."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trace_jax import metrics as MT
from trace_jax import model as M
from trace_jax import numerics as nx
from trace_jax import rollout as R

from tests._params import init_params

CFG = M.ModelConfig(vocab_size=32, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32,
                    n_experts=8, top_k=2, d_expert=32, max_seq_len=32, rope_theta=10_000.0,
                    dtype="float32")
S = R.SamplingConfig(max_new_tokens=8, eos_id=-1, pad_id=0)  # no EOS unless a test sets one
PROMPTS = jnp.asarray([[1, 5, 6, 7, 8, 9], [1, 4, 0, 0, 0, 0], [1, 9, 9, 3, 0, 0]], jnp.int32)
LENS = jnp.asarray([6, 2, 4], jnp.int32)


@pytest.fixture(scope="module")
def params():
    return init_params(CFG, jax.random.key(0))


@pytest.fixture(scope="module")
def fp4():
    return nx.make_numerics("fp4_rollout", CFG.n_layers, hint_layers="last_half")


# the trainer's forward, compiled once per (config, numerics): op-by-op it took ~28 s per call
forward = jax.jit(M.forward, static_argnames=("cfg", "numerics", "capture_hints", "capture_codes"))


def gen(params, numerics, key=0, sampling=S, **kw):
    return R.generate(R.sync_weights(params, numerics, dtype=CFG.dtype), PROMPTS, LENS, jax.random.key(key),
                      cfg=CFG, numerics=numerics, sampling=sampling, **kw)


def test_same_seed_same_rollout_and_different_seed_differs(params, fp4):
    a, b, c = gen(params, fp4, 1), gen(params, fp4, 1), gen(params, fp4, 2)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert not np.array_equal(np.asarray(a.tokens), np.asarray(c.tokens))
    # prompts are kept, padded past their length, and responses start at prompt_lens
    np.testing.assert_array_equal(np.asarray(a.tokens[1, :2]), [1, 4])
    assert np.all(np.asarray(a.response_lens) == S.max_new_tokens)


def test_attention_p_is_part_of_the_rollout_numerics(params, fp4):
    """``Numerics.attention_p`` reaches the decode steps' attention: "bf16" (P rounded before
    P.V) gives other log-probs than "f32", and the f32 numerics afterwards reproduce the first
    rollout exactly (the compiled rollout is keyed on the numerics, so nothing leaks between
    the two); an unknown precision is refused where the numerics are made."""
    out = {}
    for p in ("f32", "bf16", "f32"):
        out.setdefault(p, []).append(np.asarray(gen(params, fp4.with_attention_p(p), 1).logprobs))
    np.testing.assert_array_equal(out["f32"][0], out["f32"][1])
    assert not np.array_equal(out["f32"][0], out["bf16"][0])
    with pytest.raises(ValueError, match="rollout.attention_p_precision='f16'"):
        fp4.with_attention_p("f16", "rollout.attention_p_precision")
    with pytest.raises(ValueError, match="Numerics.attention_p='f16'"):
        dataclasses.replace(fp4, attention_p="f16")


def test_greedy_equals_argmax_of_full_forward(params):
    bf = nx.make_numerics("bf16", CFG.n_layers)
    ro = gen(params, bf, sampling=dataclasses.replace(S, temperature=0.0), capture_hints=False)
    logits, _, _ = forward(params, ro.tokens, cfg=CFG, numerics=bf)
    pred = np.asarray(jnp.argmax(logits, -1))
    toks, mask = np.asarray(ro.tokens), np.asarray(ro.response_mask)
    b, t = np.nonzero(mask)
    np.testing.assert_array_equal(toks[b, t], pred[b, t - 1])
    # top_k=1 and a tiny top_p are greedy too
    for s in (dataclasses.replace(S, top_k=1), dataclasses.replace(S, top_p=1e-6)):
        ro2 = gen(params, bf, key=7, sampling=s, capture_hints=False)
        np.testing.assert_array_equal(np.asarray(ro2.tokens), toks)


@pytest.mark.parametrize("mode", ["bf16", "fp4_rollout"])
def test_recorded_logprobs_match_trainer_recompute(params, mode):
    num = nx.make_numerics(mode, CFG.n_layers, hint_layers="all")
    rec = num.recording_all_codes() if mode != "bf16" else num
    ro = gen(params, rec)
    train = num.with_mode("fp4_qat" if mode != "bf16" else "bf16")
    g = ro.guidance
    logits, aux, _ = forward(params, ro.tokens, cfg=CFG, numerics=train,
                             hints=train.trainer_hints(g.hints) if mode != "bf16" else None,
                             hint_experts_LxBxTxK=g.experts if mode != "bf16" else None,
                             hint_valid_BxT=g.recorded if mode != "bf16" else None)
    lp = R.token_logprobs(logits, ro.tokens)
    m = np.asarray(ro.response_mask)
    # f32 model, the trainer replaying the rollout's numerics (codes, routing): the two differ
    # by f32 summation order only, 2.4e-7 at |log p| ~ 3.5 at every XLA optimization level.
    # (atol=2e-3 passed a rollout whose attention rounds P to bf16 while the trainer keeps it
    # f32: 1.7e-4 to 2.3e-4 off, the very rollout-trainer mismatch these log-probs measure.)
    np.testing.assert_allclose(np.asarray(lp)[m], np.asarray(ro.logprobs)[m], atol=1e-5)
    # at temperature 1 without truncation the sampler's log-prob is the same number
    np.testing.assert_allclose(np.asarray(ro.sampler_logprobs)[m], np.asarray(ro.logprobs)[m],
                               atol=1e-5)


def test_hint_guided_trainer_reproduces_rollout_codes_better_than_rtn(params):
    """bf16 activations, hints in the last half of the layers, one rollout. drift = 0: the
    rollout's decode and the trainer's full-sequence forward compute the same codes even
    without hints (since session 31 both attend over the exact FP4 K/V; before, the trainer's
    bf16 K/V flipped codes). drift > 0 perturbs the weights as a stale or differently built
    trainer would: then only the hints keep the hinted codes."""
    cfg = dataclasses.replace(CFG, dtype="bfloat16")
    fp4 = nx.make_numerics("fp4_rollout", CFG.n_layers, hint_layers="last_half")
    rec = fp4.recording_all_codes()
    ro = R.generate(R.sync_weights(params, rec), PROMPTS, LENS, jax.random.key(3), cfg=cfg,
                    numerics=rec, sampling=S)
    g = ro.guidance
    qat = fp4.with_mode("fp4_qat")
    drifted = jax.jit(lambda p, drift: jax.tree.map(  # one program for every leaf and drift
        lambda a: a * (1 + drift * jax.random.normal(jax.random.key(9), a.shape)), p))

    def codes(w, g, tokens, hints):  # jitted: one compile instead of op-by-op dispatch
        num = qat if hints else dataclasses.replace(qat, hinted=frozenset())
        _, aux, _ = forward(w, tokens, cfg=cfg, numerics=num,
                            hints=qat.trainer_hints(g.hints) if hints else None,
                            forced_experts_LxBxTxK=g.experts, hint_experts_LxBxTxK=g.experts,
                            hint_valid_BxT=g.recorded if hints else None, capture_codes=True)
        return MT.code_metrics(aux.codes, g.hints, g.recorded, qat.hinted)

    codes = jax.jit(codes, static_argnums=3)
    for drift in (0.0, 2e-3):  # (the same two programs for both)
        w = drifted(params, drift)
        guided, rtn = codes(w, g, ro.tokens, True), codes(w, g, ro.tokens, False)
        gh, rh = float(guided["code_agreement_hinted"]), float(rtn["code_agreement_hinted"])
        assert gh >= (0.999 if drift == 0 else 0.99), (drift, gh)
        assert gh > rh if drift else gh >= rh, (drift, gh, rh)
        # unhinted sites are left to round-to-nearest in both passes
        assert float(guided["code_agreement_unhinted"]) == pytest.approx(
            float(rtn["code_agreement_unhinted"]), abs=0.01), drift


def test_rollout_records_the_experts_its_routers_chose(params, fp4):
    """The experts the rollout records for routing replay are its routers' choice: a
    full-sequence forward with the rollout's numerics chooses the same at every position of
    every trajectory (prompt and response). (That forcing them makes a trainer compute with them
    is test_model.test_forced_routing_is_replayed.)"""
    ro = gen(params, fp4)
    exact = nx.model_jit(M.forward, static_argnames=("cfg", "numerics"))  # as the rollout's
    rp = R.sync_weights(params, fp4, dtype=CFG.dtype)
    _, aux, _ = exact(rp, ro.tokens, cfg=CFG, numerics=fp4)
    t = np.arange(ro.tokens.shape[1])[None]
    valid = t < np.asarray(ro.prompt_lens + ro.response_lens)[:, None]  # [B, T]
    got, want = np.asarray(aux.experts), np.asarray(ro.guidance.experts)
    assert valid.sum() > valid.shape[0] * 2
    np.testing.assert_array_equal(got[:, valid], want[:, valid])
    assert ro.guidance.experts.dtype == jnp.uint8


@pytest.mark.parametrize("fmt,kind", [("nvfp4", "mantissa"), ("mxfp4", "mantissa"),
                                      ("nvfp4", "exact")])
def test_hint_bytes_per_token_match_formula(params, fmt, kind):
    num = nx.make_numerics("fp4_rollout", CFG.n_layers, fmt=fmt, hint_kind=kind)
    ro = jax.eval_shape(lambda p: gen(p, num), params)  # (hint sizes are shapes: not run)
    # by hand: last half = layer 1; nvfp4: D/8 + D/16 + 4 per row
    D, F, k, K, Dh = CFG.d_model, CFG.d_expert, CFG.top_k, CFG.n_kv_heads, CFG.head_dim
    B = 16 if fmt == "nvfp4" else 32
    g = 4 if fmt == "nvfp4" else 0
    per = (lambda n: n / 8) if kind == "mantissa" else (lambda n: n / 2)
    want = (per(D) + D / B + g) + k * (per(F) + F / B + g) + 2 * K * (per(Dh) + Dh / B + g)
    assert R.hint_bytes_per_token(ro.guidance.hints) == pytest.approx(want)
    assert R.expected_hint_bytes_per_token(CFG, num) == pytest.approx(want)


def test_eos_stops_a_sequence_and_pads_after_it(params, fp4):
    greedy = dataclasses.replace(S, temperature=0.0)
    free = np.asarray(gen(params, fp4, sampling=greedy).tokens)
    lens = np.asarray(LENS)
    eos = int(free[0, lens[0]])  # declare row 0's first greedy token to be EOS
    ro = gen(params, fp4, sampling=dataclasses.replace(greedy, eos_id=eos))
    toks = np.asarray(ro.tokens)
    for b, L in enumerate(lens):
        resp = list(free[b, L:L + S.max_new_tokens])
        n = resp.index(eos) + 1 if eos in resp else S.max_new_tokens
        assert int(ro.response_lens[b]) == n and bool(ro.finished[b]) == (eos in resp)
        np.testing.assert_array_equal(toks[b, L:L + n], free[b, L:L + n])
        assert np.all(toks[b, L + n:] == S.pad_id)
    assert int(ro.response_lens[0]) == 1
    assert np.all(np.asarray(ro.logprobs)[~np.asarray(ro.response_mask)] == 0)


def test_fingerprint_detects_shifted_or_foreign_batches(params, fp4):
    ro = gen(params, fp4)
    fp = np.asarray(ro.guidance.fingerprint)
    np.testing.assert_array_equal(np.asarray(R.fingerprint(ro.tokens)), fp)
    assert not np.array_equal(np.asarray(R.fingerprint(jnp.roll(ro.tokens, 1, axis=0))), fp)
    assert not np.array_equal(np.asarray(R.fingerprint(jnp.roll(ro.tokens, 1, axis=1))), fp)


def test_bad_requests_raise(params, fp4):
    rp = R.sync_weights(params, fp4, dtype=CFG.dtype)
    with pytest.raises(ValueError, match="exceeds model.max_seq_len"):
        R.generate(rp, PROMPTS, LENS, jax.random.key(0), cfg=CFG, numerics=fp4,
                   sampling=dataclasses.replace(S, max_new_tokens=40))
    with pytest.raises(ValueError, match="prompt_lens"):
        R.generate(rp, PROMPTS, jnp.asarray([7, 1, 1]), jax.random.key(0), cfg=CFG, numerics=fp4,
                   sampling=S)
    from trace_jax import sharding as SH
    mesh = SH.make_mesh(dict(axes=("data", "fsdp", "expert", "tensor"), shape=(4, 1, 1, 1)),
                        devices=jax.devices()[:4])
    with pytest.raises(ValueError, match="batch of 3 trajectories is not divisible by the 4"):
        R.generate(rp, PROMPTS, LENS, jax.random.key(0), cfg=CFG, numerics=fp4, sampling=S,
                   mesh=mesh)
    with pytest.raises(ValueError, match="top_p"):
        R.SamplingConfig(max_new_tokens=4, top_p=0.0)
    for t in (float("nan"), float("inf"), -1.0):  # (NaN passed `t < 0`: pad tokens came out)
        with pytest.raises(ValueError, match="temperature must be a finite number >= 0"):
            R.SamplingConfig(max_new_tokens=4, temperature=t)
    with pytest.raises(ValueError, match="temperature=1e-40 is below float32's normal range"):
        R.SamplingConfig(max_new_tokens=4, temperature=1e-40)
    with pytest.raises(ValueError, match="prompt_lens must be integers, got dtype float32"):
        R.generate(rp, PROMPTS, LENS.astype(jnp.float32) + 0.9, jax.random.key(0), cfg=CFG,
                   numerics=fp4, sampling=S)  # (a cast would cut a prompt token)
    V = CFG.vocab_size  # ids past the vocabulary: the embedding would clamp them silently
    with pytest.raises(ValueError, match=f"top_k={V + 1} is larger than the model's vocabulary"):
        R.generate(rp, PROMPTS, LENS, jax.random.key(0), cfg=CFG, numerics=fp4,
                   sampling=dataclasses.replace(S, top_k=V + 1))
    with pytest.raises(ValueError, match=f"eos_id={V} outside the model's vocabulary"):
        R.generate(rp, PROMPTS, LENS, jax.random.key(0), cfg=CFG, numerics=fp4,
                   sampling=dataclasses.replace(S, eos_id=V))
    with pytest.raises(ValueError, match=f"prompt token ids 0..{V} outside"):
        R.generate(rp, PROMPTS.at[0, 1].set(V), LENS, jax.random.key(0), cfg=CFG, numerics=fp4,
                   sampling=S)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_one_token_prompts_record_every_generated_tokens_hints(params, fmt):
    """A prompt width of 1 (generation from BOS alone): the hint buffers still grow to the
    trajectory length and hold each generated token's hint, the same bits and scales a
    full-sequence forward with the rollout's numerics captures (the prefill's [B, 1] hints once
    looked like a constant and were never written)."""
    num = nx.make_numerics("fp4_rollout", CFG.n_layers, fmt=fmt, hint_layers="last_half")
    rp = R.sync_weights(params, num, dtype=CFG.dtype)
    prompts, lens = jnp.asarray([[1], [1]], jnp.int32), jnp.asarray([1, 1], jnp.int32)
    ro = R.generate(rp, prompts, lens, jax.random.key(5), cfg=CFG, numerics=num, sampling=S)
    T = 1 + S.max_new_tokens
    exact = nx.model_jit(M.forward, static_argnames=("cfg", "numerics", "capture_hints"))
    _, aux, _ = exact(rp, ro.tokens, cfg=CFG, numerics=num, capture_hints=True)
    rec = np.asarray(ro.guidance.recorded)
    assert rec.all() and ro.guidance.hints
    for name, h in ro.guidance.hints.items():
        assert h.bits.shape[:2] == (2, T), name
        np.testing.assert_array_equal(np.asarray(h.bits), np.asarray(aux.hints[name].bits))
        np.testing.assert_array_equal(np.asarray(h.scales).view(np.uint8),
                                      np.asarray(aux.hints[name].scales).view(np.uint8))


def test_trainer_refuses_missing_hints(params):
    """A hinted trainer given hints for only some of its hinted sites (or a rollout that recorded
    fewer sites than it hints) stops with an error naming them, instead of rounding the rest to
    nearest (plain QAT) without a word. hints=None still means RTN everywhere."""
    train = nx.make_numerics("fp4_qat", CFG.n_layers, hint_layers="all")
    hinted = sorted(train.hinted)
    tokens = PROMPTS
    with pytest.raises(ValueError, match=r"no hint given for 1 of the numerics' hinted sites"):
        M.forward(params, tokens, cfg=CFG, numerics=train,
                  hints={n: None for n in hinted[1:]})  # (checked before any value is read)
    with pytest.raises(ValueError, match=f"no hint given for {len(hinted)} of"):
        M.forward(params, tokens, cfg=CFG, numerics=train, hints={})
    with pytest.raises(ValueError, match="recorded no hints at 1 of the trainer's hinted sites"):
        train.trainer_hints({n: None for n in hinted[:-1]})
    logits, _, _ = M.forward(params, tokens, cfg=CFG, numerics=train, hints=None)
    assert logits.shape[:2] == tokens.shape


def test_sampler_truncation_and_tiny_temperature():
    """The sampler against plain numpy: top-k and top-p keep the tokens they should (others never
    drawn); a tiny temperature picks the argmax with a finite sampler log-prob (dividing the
    unshifted logits overflowed them to inf: NaN log-probs and a random token)."""
    logits = jnp.asarray([[0.0, 1.0, 2.0, 3.0, 1.5]] * 256, jnp.float32)
    keys = jax.random.split(jax.random.key(0), 4)
    tok, lp, slp = R.sample(logits * 1e3, keys[0], dataclasses.replace(S, temperature=1e-36))
    assert set(np.asarray(tok).tolist()) == {3} and np.all(np.asarray(slp) == 0)
    np.testing.assert_allclose(lp, 0.0, atol=1e-6)
    tok, _, slp = R.sample(logits, keys[1], dataclasses.replace(S, top_k=2))
    assert set(np.asarray(tok).tolist()) == {2, 3}
    np.testing.assert_allclose(np.exp(slp[np.asarray(tok) == 3]), 1 / (1 + np.exp(-1.0)), rtol=1e-5)
    p = np.exp([0.0, 1.0, 2.0, 3.0, 1.5]) / np.exp([0.0, 1.0, 2.0, 3.0, 1.5]).sum()
    # top_p = p[3] + p[2] - eps: the two largest reach it, the third is not needed
    tok, _, _ = R.sample(logits, keys[2], dataclasses.replace(S, top_p=float(p[3] + p[2]) - 1e-3))
    assert set(np.asarray(tok).tolist()) == {2, 3}
