"""Locate the op where the BF16 rollout engine (prefill + one-token decode steps over a KV cache)
and the trainer's full-sequence forward round apart.

``scripts/with_venv.sh python experiments/locate_rollout_mismatch.py --config=configs/small.py
[--prompts=2] [--group=1] [--seed=0] [--sample] [--in_loop] [--time]
[--config.model.n_layers=2] [--json=OUT.json]``

``--prompts=16 --group=8 --sample`` is diagnose's BF16 row without a checkpoint (same params,
prompts and key: its gap reproduces experiments/results/diagnose_small_cpu.json's bit for bit).
``--in_loop`` runs the tapped decode steps in a fori_loop inside one jit, as the engine's
while_loop (the per-step jits can differ from the engine: see the report of this script's
session); ``TRACE_JAX_YNN=0`` in the environment compiles the model jits without XLA:CPU's
YNNPACK fusions (``trace_jax.numerics``); ``--time`` times rollout, trainer forward and forward + backward.

Random-init parameters (no checkpoint). Steps:

1. a greedy BF16 rollout with the engine itself (``rollout.generate``), and the trainer's
   log-probs for it (``diagnose.trainer_pass``): the gap ``diagnose`` reports;
2. the same two computations again, rebuilt op by op from the library's own functions
   (``attention.rms_norm``/``rope``, ``ops.softmax_pv``, ``moe.route``/``_local_slots``,
   ``ops.grouped_matmul``, ...) with a *tap* on every intermediate: a decode path (prefill of the
   prompt into an empty cache, then one jit call per generated token, teacher-forced with the
   rollout's tokens) and a trainer path (one forward over the whole trajectory), each compiled
   with ``numerics.COMPILER_OPTIONS`` as the library's jits are. Their log-probs are checked bit
   for bit against step 1's (so the taps describe the real programs' values);
3. for every (layer, op) in forward order, the fraction of elements that differ bitwise between
   the two paths at prompt positions (prefill) and response positions (decode steps), and the
   largest difference. The first op that differs anywhere has bit-identical inputs (every op's
   inputs are taps earlier in that order, at all positions), so it is where they round apart.

Only the BF16 numerics (the question is the BF16 engine's drift); no mesh, CPU or GPU.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from trace_jax import numerics as nx
from trace_jax import attention as A  # noqa: E402
from trace_jax import diagnose as DG  # noqa: E402
from trace_jax import experiment as X  # noqa: E402
from trace_jax import model as M  # noqa: E402
from trace_jax import moe  # noqa: E402
from trace_jax import ops  # noqa: E402
from trace_jax import rollout as R  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a get_config() file.")
_PROMPTS = flags.DEFINE_integer("prompts", 2, "Distinct eval prompts.")
_GROUP = flags.DEFINE_integer("group", 1, "Rows per prompt (the decode batch is prompts x group).")
_SEED = flags.DEFINE_integer("seed", 0, "Parameter init seed.")
_JSON = flags.DEFINE_string("json", None, "Also write the results as JSON to this path.")
_SAMPLE = flags.DEFINE_bool("sample", False, "Sample at the config's temperature (as diagnose "
                             "does) instead of greedy decoding.")
_TIME = flags.DEFINE_bool("time", False, "Also time (second calls) the rollout, the trainer's "
                          "forward and a forward + backward of the summed log-probs.")
_IN_LOOP = flags.DEFINE_bool("in_loop", False, "Run the tapped decode steps in a fori_loop inside "
                             "one jit with the prefill (as the engine does), not one jit per step.")
_SHOW = flags.DEFINE_integer("show", 0, "Print every op of the first N layers (0: only ops that "
                             "differ, plus the first layer).")


TAP_ORDER: list[str] = []  # tap names in forward (trace) order (jit outputs come back sorted)


class Taps:
    """Named intermediates collected while a function is traced (returned as jit outputs)."""

    def __init__(self):
        self.d = {}
        self.layer = None

    def __call__(self, name, value):
        key = name if self.layer is None else f"L{self.layer}/{name}"
        self.d[key] = value
        if key not in TAP_ORDER:
            TAP_ORDER.append(key)
        return value


# --------------------------------------------------------------------------------------------
# The model's forward, with taps (BF16 numerics: every site passes its tensor through unchanged,
# so SiteIO is left out). Mirrors model.forward / attention.attention_block / moe.moe_block.


def _causal_attention(q, k, v, p_precision, tap):
    """attention.causal_attention with taps; scores/probs in [B, T, K, G, S]."""
    B, T, H, D = q.shape
    K = k.shape[2]
    hi = jax.lax.Precision.HIGHEST
    qg = q.reshape(B, T, K, H // K, D).astype(jnp.float32)
    s = jnp.einsum("btkgd,bskd->bkgts", qg, k.astype(jnp.float32), precision=hi)
    s = s * (1.0 / jnp.sqrt(jnp.float32(D)))
    tap("scores", jnp.moveaxis(s, 3, 1))
    mask = jnp.tril(jnp.ones((T, T), bool))[None, None, None]
    s = jnp.where(mask, s, -jnp.inf)
    if p_precision == "f32":
        tap("probs", jnp.moveaxis(jax.nn.softmax(s, axis=-1), 3, 1))
    o = ops.softmax_pv(s, v.astype(jnp.float32), "bkgts,bskd->bkgtd", p_precision)
    tap("pv_f32", jnp.moveaxis(o, 3, 1))
    return jnp.moveaxis(o, 3, 1).reshape(B, T, H, D).astype(q.dtype)


def _decode_attention(q_BxHxD, k_cache, v_cache, lengths_B, p_precision, tap):
    """ops.decode_attention_reference (bf16 caches) with taps, in the trainer's layout."""
    k, v = k_cache.astype(jnp.float32), v_cache.astype(jnp.float32)
    B, H, D = q_BxHxD.shape
    K, S = k.shape[1], k.shape[2]
    scale = 1.0 / jnp.sqrt(jnp.float32(D))
    hi = jax.lax.Precision.HIGHEST
    qg = q_BxHxD.reshape(B, K, H // K, D).astype(jnp.float32)
    s = jnp.einsum("bkgd,bksd->bkgs", qg, k, precision=hi) * scale
    tap("scores", s[:, None])
    valid = jnp.arange(S)[None, :] < lengths_B[:, None]
    s = jnp.where(valid[:, None, None, :], s, -jnp.inf)
    v = jnp.where(valid[:, None, :, None], v, 0.0)
    if p_precision == "f32":
        tap("probs", jax.nn.softmax(s, axis=-1)[:, None])
    o = ops.softmax_pv(s, v, "bkgs,bksd->bkgd", p_precision)
    tap("pv_f32", o[:, None])
    return o.reshape(B, H, D).astype(q_BxHxD.dtype)


def _attention_block(p, x, positions, cfg, p_precision, cache, tap):
    B, T, _ = x.shape
    H, K, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    dt = x.dtype
    q = tap("q_proj", x @ p["wq"].astype(dt)).reshape(B, T, H, D)
    k = tap("k_proj", x @ p["wk"].astype(dt)).reshape(B, T, K, D)
    v = tap("v_proj", x @ p["wv"].astype(dt)).reshape(B, T, K, D)
    qn = tap("q_norm", A.rms_norm(q, p["q_norm"], cfg.norm_eps))
    kn = tap("k_norm", A.rms_norm(k, p["k_norm"], cfg.norm_eps))
    q = tap("q_rope", A.rope(qn, positions, cfg.rope_theta))
    k = tap("k_rope", A.rope(kn, positions, cfg.rope_theta))
    kv = jnp.stack([k, v], axis=2)  # (what SiteIO.activation passes through in bf16)
    k, v = kv[:, :, 0], kv[:, :, 1]
    new_cache = None
    if cache is not None:
        start = positions[:, 0]
        new_cache = {"k": A.write_cache(cache["k"], k, start),
                     "v": A.write_cache(cache["v"], v, start)}
    if cache is not None and T == 1:
        o = _decode_attention(q[:, 0], new_cache["k"], new_cache["v"], start + 1, p_precision,
                              tap)[:, None]
    else:
        o = _causal_attention(q, k, v, p_precision, tap)
    o = tap("attn_o", o.reshape(B, T, H * D).astype(dt))
    out = tap("attn_out", o @ p["wo"].astype(dt))
    return out, new_cache


def _moe_block(p, x_BxTxM, cfg, tap):
    B, T, Mdim = x_BxTxM.shape
    N, k, E = B * T, cfg.top_k, cfg.n_experts
    dt = x_BxTxM.dtype
    x = x_BxTxM.reshape(N, Mdim)
    experts, weights, probs, logits, own = moe.route(x, p["router"], k, cfg.norm_topk_prob, None)
    tap("router_logits", logits.reshape(B, T, E))
    tap("router_probs", probs.reshape(B, T, E))
    tap("experts", experts.reshape(B, T, k))
    tap("combine_w", weights.reshape(B, T, k))
    # moe._gate_up_local (ops.grouped_swiglu's two grouped_matmul calls) with taps
    local, order, inverse, sizes = moe._local_slots(experts, 0, E)
    xs = moe._dispatch_rows(x, order, inverse)
    g = ops.grouped_matmul(xs, p["w_gate"], sizes)
    u = ops.grouped_matmul(xs, p["w_up"], sizes)
    back = lambda a: moe._permute_rows(a, inverse, order).reshape(B, T, k, -1)  # noqa: E731
    tap("expert_gate", back(g))
    tap("expert_up", back(u))
    hs = (jax.nn.silu(g.astype(jnp.float32)) * u.astype(jnp.float32)).astype(dt)
    h = moe._permute_rows(hs, inverse, order)
    h = jnp.where(local[:, None], h, 0).reshape(N, k, -1)
    tap("expert_hidden", h.reshape(B, T, k, -1))
    d = moe._down_local(h, experts, p["w_down"], 0)
    tap("expert_down", d.reshape(B, T, k, -1))
    y = jnp.sum(d.astype(jnp.float32) * weights[:, :, None], axis=1)
    tap("moe_y_f32", y.reshape(B, T, Mdim))
    return tap("moe_out", y.astype(dt).reshape(B, T, Mdim))


def forward_tapped(params, tokens, positions, cache, *, cfg, p_precision):
    """model.forward for BF16 numerics (unrolled layers) returning (logits, taps, new cache)."""
    tap = Taps()
    dt = jnp.dtype(cfg.dtype)
    B, T = tokens.shape
    if positions is None:  # (as model.forward)
        positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32)[None], (B, T))
    x = tap("embed", params["embed"][tokens].astype(dt))
    new_cache = []
    for layer in range(cfg.n_layers):
        tap.layer = layer
        p = M.layer_params(params, layer)
        h = tap("attn_norm", A.rms_norm(x, p["attn_norm"], cfg.norm_eps))
        a, c = _attention_block(p["attn"], h, positions, cfg, p_precision,
                                None if cache is None else cache[layer], tap)
        x = tap("x_mid", x + a)
        h = tap("mlp_norm", A.rms_norm(x, p["mlp_norm"], cfg.norm_eps))
        m = _moe_block(p["moe"], h, cfg, tap)
        x = tap("x_out", x + m)
        new_cache.append(c)
    tap.layer = None
    x = tap("final_norm", A.rms_norm(x, params["final_norm"], cfg.norm_eps))
    head = params["embed"].T if cfg.tie_embeddings else params["lm_head"]
    logits = tap("logits", M.lm_logits(x, head.astype(dt)))
    return logits, tap.d, (None if cache is None else tuple(new_cache))


@nx.model_jit(static_argnames=("cfg", "p_precision"))
def trainer_tapped(params, tokens, *, cfg, p_precision):
    logits, taps, _ = forward_tapped(params, tokens, None, None, cfg=cfg, p_precision=p_precision)
    return logits, taps


@nx.model_jit(static_argnames=("cfg", "p_precision"))
def step_tapped(params, tokens, positions, cache, *, cfg, p_precision):
    return forward_tapped(params, tokens, positions, cache, cfg=cfg, p_precision=p_precision)


_token_logprobs = nx.model_jit(R.token_logprobs)  # (compiled as trainer_pass compiles it)


@nx.model_jit
def _sampler_logprob(logits_BxV, tok_B):
    return jnp.take_along_axis(jax.nn.log_softmax(logits_BxV, axis=-1), tok_B[:, None], -1)[:, 0]


def decode_path(rp, tokens, prompt_lens, P, n_new, *, cfg, numerics):
    """The engine's schedule (rollout._generate): prefill of the padded prompts into an empty
    cache of T slots, then one decode step per generated token (teacher-forced with the rollout's
    tokens, at slot prompt_len + i). Taps and logits gathered into [B, T, ...] by position."""
    B, T = tokens.shape
    pp = numerics.attention_p
    tok_np = np.asarray(tokens)
    lens = np.asarray(prompt_lens)
    prompts = np.where(np.arange(P)[None] < lens[:, None], tok_np[:, :P], 0)  # (pad_id 0)
    cache = A.init_cache(cfg, numerics, B, T)
    pos0 = jnp.broadcast_to(jnp.arange(P, dtype=jnp.int32)[None], (B, P))
    logits, taps, cache = step_tapped(rp, jnp.asarray(prompts, jnp.int32), pos0, cache, cfg=cfg,
                                      p_precision=pp)
    # (scores / probs end in a slot axis: P slots in the prefill, T in the decode steps)
    out = {k: np.zeros((B, T) + v.shape[2:-1] + ((T,) if k.endswith(SLOT_TAPS) else v.shape[-1:]),
                       v.dtype) for k, v in taps.items()}
    out_logits = np.zeros((B, T, logits.shape[-1]), np.float32)
    src = np.zeros((B, T), np.int8)  # 1 prefill, 2 decode
    for k, v in taps.items():
        out[k][:, :P, ..., :v.shape[-1]] = np.asarray(v)
    out_logits[:, :P] = np.asarray(logits)
    src[:, :P] = np.arange(P)[None] < lens[:, None]
    b = np.arange(B)
    for i in range(n_new):
        pos = np.minimum(lens + i, T - 1)
        tok = tok_np[b, pos]
        logits, taps, cache = step_tapped(rp, jnp.asarray(tok[:, None], jnp.int32),
                                          jnp.asarray(pos[:, None], jnp.int32), cache, cfg=cfg,
                                          p_precision=pp)
        ok = lens + i < T
        for k, v in taps.items():
            out[k][b[ok], pos[ok]] = np.asarray(v)[ok, 0]
        out_logits[b[ok], pos[ok]] = np.asarray(logits)[ok, 0]
        src[b[ok], pos[ok]] = 2
    return out_logits, out, src


SLOT_TAPS = ("/scores", "/probs")


@nx.model_jit(static_argnames=("cfg", "p_precision", "P", "n_new"))
def decode_in_loop(rp, tokens, prompt_lens, *, cfg, p_precision, P, n_new):
    """decode_path as one program, the decode steps a lax.fori_loop inside it (as the engine's
    while_loop is): taps written into [B, T, ...] buffers by position."""
    B, T = tokens.shape
    b = jnp.arange(B)
    prompts = jnp.where(jnp.arange(P)[None] < prompt_lens[:, None], tokens[:, :P], 0)
    cache = A.init_cache(cfg, nx.make_numerics("bf16", cfg.n_layers), B, T)
    pos0 = jnp.broadcast_to(jnp.arange(P, dtype=jnp.int32)[None], (B, P))
    logits, taps, cache = forward_tapped(rp, prompts, pos0, cache, cfg=cfg,
                                         p_precision=p_precision)

    def buf(k, v):
        tail = v.shape[2:-1] + ((T,) if k.endswith(SLOT_TAPS) else v.shape[-1:])
        z = jnp.zeros((B, T) + tail, v.dtype)
        pad = [(0, 0)] * (v.ndim - 1) + [(0, tail[-1] - v.shape[-1])]
        return z.at[:, :P].set(jnp.pad(v, pad))

    bufs = {k: buf(k, v) for k, v in taps.items()}
    lbuf = jnp.zeros((B, T, logits.shape[-1]), jnp.float32).at[:, :P].set(logits)

    def body(i, st):
        cache, bufs, lbuf = st
        pos = jnp.minimum(prompt_lens + i, T - 1)
        tok = tokens[b, pos]
        lg, tp, cache = forward_tapped(rp, tok[:, None], pos[:, None], cache, cfg=cfg,
                                       p_precision=p_precision)
        ok = (prompt_lens + i < T).reshape((B,))
        put = lambda buf, new: buf.at[b, pos].set(  # noqa: E731
            jnp.where(ok.reshape((B,) + (1,) * (new.ndim - 2)), new[:, 0], buf[b, pos]))
        return cache, {k: put(bufs[k], tp[k]) for k in bufs}, put(lbuf, lg)

    cache, bufs, lbuf = jax.lax.fori_loop(0, n_new, body, (cache, bufs, lbuf))
    return lbuf, bufs


def compare(a, b, where):
    """(elements compared, fraction differing bitwise, max |a - b| over finite pairs)."""
    a, b = np.asarray(a)[where], np.asarray(b)[where]
    if a.size == 0:
        return 0, 0.0, 0.0
    a32, b32 = a.astype(np.float64), b.astype(np.float64)
    diff = ~((a32 == b32) | (np.isnan(a32) & np.isnan(b32)))
    fin = np.isfinite(a32) & np.isfinite(b32)
    mx = float(np.max(np.abs(a32 - b32)[fin])) if fin.any() else 0.0
    return int(a.size), float(diff.mean()), mx


# Each op's inputs (taps of the same layer unless prefixed "prev:"); "<=t:" inputs are read at
# every position up to t (the attention's keys and values), the others at t itself.
OP_INPUTS = {
    "attn_norm": ["prev:x"], "q_proj": ["attn_norm"], "k_proj": ["attn_norm"],
    "v_proj": ["attn_norm"], "q_norm": ["q_proj"], "k_norm": ["k_proj"], "q_rope": ["q_norm"],
    "k_rope": ["k_norm"], "scores": ["q_rope", "<=t:k_rope"], "probs": ["scores"],
    "pv_f32": ["probs", "<=t:v_proj"], "attn_o": ["pv_f32"],
    # the whole attention core at once, q/k/v -> bf16 output (the first four rows of it only
    # say something where the f32 internals above agree)
    "attn_core(q,k,v->attn_o)": ["q_rope", "<=t:k_rope", "<=t:v_proj"], "attn_out": ["attn_o"],
    "x_mid": ["prev:x", "attn_out"], "mlp_norm": ["x_mid"], "router_logits": ["mlp_norm"],
    "router_probs": ["router_logits"], "experts": ["router_probs"],
    "combine_w": ["router_probs"], "expert_gate": ["mlp_norm", "experts"],
    "expert_up": ["mlp_norm", "experts"], "expert_hidden": ["expert_gate", "expert_up"],
    "expert_down": ["expert_hidden", "experts"], "moe_y_f32": ["expert_down", "combine_w"],
    "moe_out": ["moe_y_f32"], "x_out": ["x_mid", "moe_out"],
}


def _pos_equal(a, b, causal_slots=False):
    """[B, T] bool: the tap is bit-identical at (b, t) (scores / probs: over slots s <= t)."""
    ne = a != b
    if causal_slots:
        T = a.shape[1]
        ne = ne & np.tril(np.ones((T, T), bool))[None, :, None, None, :]
    return ~ne.reshape(a.shape[0], a.shape[1], -1).any(-1)


def clean_input_table(t_taps, d_taps, valid, src, n_layers):
    """Per op kind, over layers: the (row, position) pairs where every input of the op is
    bit-identical in the two paths, and how many of those have a differing output (the op itself
    rounds differently there: the per-op mismatch rate, free of propagated differences)."""
    eq = {k: _pos_equal(t_taps[k], d_taps[k], k.endswith(SLOT_TAPS)) for k in t_taps}
    out = {}
    for layer in range(n_layers):
        prev_x = "embed" if layer == 0 else f"L{layer - 1}/x_out"
        for op, ins in OP_INPUTS.items():
            clean = valid.copy()
            for i in ins:
                if i == "prev:x":
                    e = eq[prev_x]
                elif i.startswith("<=t:"):
                    e = np.logical_and.accumulate(eq[f"L{layer}/{i[4:]}"] | ~valid, axis=1)
                else:
                    e = eq[f"L{layer}/{i}"]
                clean &= e
            target = "attn_o" if op.startswith("attn_core") else op
            bad = clean & ~eq[f"L{layer}/{target}"]
            o = out.setdefault(op, {"clean_prefill": 0, "bad_prefill": 0, "clean_decode": 0,
                                    "bad_decode": 0})
            for tag, code in (("prefill", 1), ("decode", 2)):
                o[f"clean_{tag}"] += int((clean & (src == code)).sum())
                o[f"bad_{tag}"] += int((bad & (src == code)).sum())
    return out


@nx.model_jit(static_argnames=("cfg", "numerics"))
def _fwd_bwd(params, tokens, mask, *, cfg, numerics):
    def loss(p):
        logits, _, _ = M.forward(p, tokens, cfg=cfg, numerics=numerics)
        return jnp.sum(R.token_logprobs(logits, tokens) * mask)
    return jax.value_and_grad(loss)(params)


def time_paths(params, rp, prompts, lens, ro, exp, bf, sampling, seed, reps=3):
    """Best of ``reps`` timed calls (after a compiling call) of the rollout, the trainer's
    forward (diagnose.trainer_pass) and a forward + backward of the summed log-probs (a
    stand-in for the train step's model work)."""
    def best(fn):
        jax.block_until_ready(fn())
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            ts.append(time.perf_counter() - t0)
        return min(ts)

    key = jax.random.key(seed + 1)
    mask = ro.response_mask.astype(jnp.float32)
    return {
        "rollout": best(lambda: R.generate(rp, prompts, lens, key, cfg=exp.cfg, numerics=bf,
                                           sampling=sampling, capture_hints=False).logprobs),
        "trainer_forward": best(lambda: DG.trainer_pass(params, ro, exp, bf, hints=False,
                                                        replay=False)[0]),
        "forward_backward": best(lambda: _fwd_bwd(params, ro.tokens, mask, cfg=exp.cfg,
                                                  numerics=bf)),
    }


def run(config, n_prompts, group, seed, show=0, sample=False, timing=False, in_loop=False):
    exp = X.build(config, "bf16")
    cfg = exp.cfg
    params = M.init_params(cfg, jax.random.key(seed))
    examples = exp.eval_data.batch(0)[:n_prompts]
    prompts, lens = X.encode_prompts(exp, examples)
    prompts, lens = R.repeat_prompts(prompts, lens, group)
    sampling = exp.sampling if sample else dataclasses.replace(exp.sampling, temperature=0.0)
    bf = exp.rollout_numerics.with_mode("bf16")
    rp = R.sync_weights(params, bf, dtype=cfg.dtype, kernel_layout=X.rollout_kernel_layout(config))
    ro = R.generate(rp, prompts, lens, jax.random.key(seed + 1), cfg=cfg, numerics=bf,
                    sampling=sampling, capture_hints=False)
    lp_train, _, ex_train = DG.trainer_pass(params, ro, exp, bf, hints=False, replay=False)
    mask = np.asarray(ro.response_mask)
    lp_ro = np.asarray(ro.logprobs)
    lp_train = np.asarray(lp_train)
    gap = np.abs(lp_ro - lp_train)[mask]
    res = {"config": {k: getattr(cfg, k) for k in ("d_model", "n_layers", "n_heads", "n_kv_heads",
                                                   "head_dim", "n_experts", "top_k", "d_expert")},
           "batch_rows": int(prompts.shape[0]), "prompt_width": int(prompts.shape[1]),
           "max_new_tokens": sampling.max_new_tokens, "attention_p": bf.attention_p,
           "compiler_options": dict(nx.COMPILER_OPTIONS),
           "engine": {"logprob_gap_mean": float(gap.mean()), "logprob_gap_max": float(gap.max()),
                      "tokens_differing_frac": float((gap > 0).mean()),
                      "n_response_tokens": int(mask.sum()),
                      "routing_agreement": float(np.mean(
                          np.asarray(ex_train) == np.asarray(ro.guidance.experts),
                          where=np.asarray(ro.guidance.recorded)[None, :, :, None]))}}
    print(f"model {res['config']}, {res['batch_rows']} rows, prompt width "
          f"{res['prompt_width']}, {sampling.max_new_tokens} new tokens at temperature "
          f"{sampling.temperature}, "
          f"attention_p={bf.attention_p}, model jits' compiler options {nx.COMPILER_OPTIONS}")
    print(f"engine vs trainer (rollout.generate vs diagnose.trainer_pass): log-prob gap mean "
          f"{gap.mean():.3g} max {gap.max():.3g}; {100 * (gap > 0).mean():.1f}% of "
          f"{mask.sum()} response tokens differ")

    if timing:
        res["timing_s"] = time_paths(params, rp, prompts, lens, ro, exp, bf, sampling, seed)
        print(f"timing (s, second call, {jax.devices()[0].device_kind}): {res['timing_s']}")

    # the tapped re-computations
    tokens = ro.tokens
    T = tokens.shape[1]
    P = prompts.shape[1]
    t_logits, t_taps = trainer_tapped(params, tokens, cfg=cfg, p_precision=bf.attention_p)
    t_taps = {k: np.asarray(v) for k, v in t_taps.items()}
    d_logits, d_taps, src = decode_path(rp, tokens, lens, P, sampling.max_new_tokens, cfg=cfg,
                                        numerics=bf)
    if in_loop:
        d_logits, d_taps = decode_in_loop(rp, tokens, lens, cfg=cfg, p_precision=bf.attention_p,
                                          P=P, n_new=sampling.max_new_tokens)
        d_logits = np.asarray(d_logits)
        d_taps = {k: np.asarray(v) for k, v in d_taps.items()}
    # the decode path's log-probs as the engine's sampler takes them: one [B, V] log_softmax per
    # step (rollout.sample), not token_logprobs' [B, T - 1, V] one
    lp_d_sampler = np.zeros_like(lp_ro)
    tok_np = np.asarray(tokens)
    for t in range(1, T):
        lp_d_sampler[:, t] = np.asarray(_sampler_logprob(jnp.asarray(d_logits[:, t - 1]),
                                                         jnp.asarray(tok_np[:, t])))
    lp_t = np.asarray(_token_logprobs(t_logits, tokens))
    lp_d = np.asarray(_token_logprobs(jnp.asarray(d_logits), tokens))
    checks = {
        "tapped_trainer_equals_trainer_pass": bool(np.array_equal(lp_t[mask], lp_train[mask])),
        "tapped_decode_equals_engine": bool(np.array_equal(lp_d[mask], lp_ro[mask])),
        "tapped_gap_mean": float(np.abs(lp_t - lp_d)[mask].mean()),
        "tapped_decode_sampler_logprobs_equal_engine": bool(np.array_equal(lp_d_sampler[mask],
                                                                            lp_ro[mask])),
        "logsoftmax_shape_effect_max": float(np.abs(lp_d_sampler - lp_d)[mask].max()),
        "tapped_decode_vs_engine_tokens_differing": int((lp_d != lp_ro)[mask].sum()),
        "tapped_decode_vs_engine_max": float(np.abs(lp_d - lp_ro)[mask].max()),
        "tapped_decode_vs_engine_where": [[int(b), int(t)] for b, t in
                                          np.argwhere((lp_d != lp_ro) & mask)[:20]],
        "response_lens": np.asarray(ro.response_lens).tolist(),
        "prompt_lens": np.asarray(lens).tolist(),
    }
    res["checks"] = checks
    print(f"checks: tapped trainer == trainer_pass bitwise: "
          f"{checks['tapped_trainer_equals_trainer_pass']}; tapped decode == engine bitwise: "
          f"{checks['tapped_decode_equals_engine']} (tokens differing "
          f"{checks['tapped_decode_vs_engine_tokens_differing']}, max "
          f"{checks['tapped_decode_vs_engine_max']:.3g}, at (row, position) "
          f"{checks['tapped_decode_vs_engine_where']}); with the sampler's [B, V] log_softmax: "
          f"{checks['tapped_decode_sampler_logprobs_equal_engine']} (the [B, V] vs [B, T-1, V] "
          f"log_softmax alone moves log-probs by up to {checks['logsoftmax_shape_effect_max']:.3g}); "
          f"tapped gap mean "
          f"{checks['tapped_gap_mean']:.3g}")

    # op-by-op comparison, forward order
    resp_lens = np.asarray(ro.response_lens)
    valid = np.arange(T)[None] < (np.asarray(lens) + resp_lens)[:, None]
    pre, dec = valid & (src == 1), valid & (src == 2)
    rows, first = [], None
    for name in TAP_ORDER:  # forward order
        w_pre, w_dec = pre, dec
        if name.endswith(SLOT_TAPS):  # [B, T, K, G, S]: the causal slots s <= t only
            causal = np.tril(np.ones((T, T), bool))[None, :, None, None, :]
            w_pre = pre[:, :, None, None, None] & causal
            w_dec = dec[:, :, None, None, None] & causal
            shp = t_taps[name].shape
            w_pre, w_dec = np.broadcast_to(w_pre, shp), np.broadcast_to(w_dec, shp)
        cp = compare(t_taps[name], d_taps[name], w_pre)
        cd = compare(t_taps[name], d_taps[name], w_dec)
        row = {"op": name, "n_prefill": cp[0], "frac_diff_prefill": cp[1], "maxabs_prefill": cp[2],
               "n_decode": cd[0], "frac_diff_decode": cd[1], "maxabs_decode": cd[2],
               "dtype": str(t_taps[name].dtype)}
        rows.append(row)
        if first is None and (cp[1] > 0 or cd[1] > 0):
            first = name
    res["ops"] = rows
    res["first_differing_op"] = first
    res["decode_in_loop"] = in_loop
    ct = clean_input_table(t_taps, d_taps, valid, src, cfg.n_layers)
    res["clean_input"] = ct
    print("\nper op, over all layers: (row, position) pairs whose inputs are bit-identical in both "
          "paths, and how many of them give a different output")
    print("| op | prefill: clean-input pairs | output differs | decode: clean-input pairs | "
          "output differs |")
    print("|---|---|---|---|---|")
    for op, o in ct.items():
        print(f"| {op} | {o['clean_prefill']} | {o['bad_prefill']} | {o['clean_decode']} | "
              f"{o['bad_decode']} |")
    # where (row, position) the first differing bf16 activation differs
    first_bf16 = next((r["op"] for r in rows if r["dtype"] == "bfloat16"
                       and (r["frac_diff_prefill"] or r["frac_diff_decode"])), None)
    res["first_differing_bf16_op"] = first_bf16
    if first_bf16 is not None:
        a, b = t_taps[first_bf16], d_taps[first_bf16]
        ne = (a != b).reshape(a.shape[0], a.shape[1], -1)
        where_bt = np.argwhere(ne.any(-1) & valid)
        res["first_bf16_positions"] = [
            {"row": int(r), "pos": int(t), "decode_step": int(t - np.asarray(lens)[r])
             if src[r, t] == 2 else None, "elements_differing": int(ne[r, t].sum())}
            for r, t in where_bt]
        print(f"first bf16 activation that differs: {first_bf16}, at (row, position, "
              f"decode step, elements): " + ", ".join(
                  f"({d['row']}, {d['pos']}, {d['decode_step']}, {d['elements_differing']})"
                  for d in res["first_bf16_positions"][:20]))
    print(f"\nfirst op that differs (inputs bit-identical): {first}\n")
    print("| op | dtype | prefill: frac differing | max abs | decode: frac differing | max abs |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        layer = int(r["op"][1:].split("/")[0]) if r["op"].startswith("L") else -1
        if r["frac_diff_prefill"] or r["frac_diff_decode"] or layer < show or r["op"] == first \
                or r["op"] == "logits":
            print(f"| {r['op']} | {r['dtype']} | {r['frac_diff_prefill']:.4g} | "
                  f"{r['maxabs_prefill']:.3g} | {r['frac_diff_decode']:.4g} | "
                  f"{r['maxabs_decode']:.3g} |")
    return res


def main(argv):
    del argv
    res = run(_CONFIG.value, _PROMPTS.value, _GROUP.value, _SEED.value, _SHOW.value, _SAMPLE.value,
              _TIME.value, _IN_LOOP.value)
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    from trace_jax.cli import parse_flags

    flags.mark_flags_as_required(["config"])
    app.run(main, flags_parser=parse_flags)
