"""The rollout engine: jit-compiled prefill + decode loop that samples responses and records the
TRACE hints, the routing decisions and the behaviour log-probs the trainer needs.

Layout. Prompts are **right-padded** ``[B, P]`` with ``prompt_lens``; a trajectory is the
``[B, P + max_new_tokens]`` token array in which the response starts at ``prompt_lens[b]``. Every
per-token record (log-probs, hints, experts) is indexed by that same position ``t``: the hint at
``t`` is the FP4 rounding of the activations computed *from token t*, exactly what the trainer's
full-sequence forward recomputes at position ``t``. Positions past a trajectory's end are padding.

G samples per prompt: repeat the prompt rows (``repeat_prompts``); every row draws its own
samples from the shared key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from trace_jax import attention
from trace_jax import distributed as D
from trace_jax import model as M
from trace_jax import numerics as nx
from trace_jax import quant as Q


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    max_new_tokens: int
    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    eos_id: int = 2  # negative: no EOS (always generate max_new_tokens)
    pad_id: int = 0

    def __post_init__(self):
        if self.max_new_tokens <= 0:
            raise ValueError(f"sampling.max_new_tokens must be positive, got {self.max_new_tokens}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"sampling.temperature must be a finite number >= 0, got "
                             f"{self.temperature}")
        if 0 < self.temperature < np.finfo(np.float32).tiny:  # (flushed to 0 on device)
            raise ValueError(f"sampling.temperature={self.temperature} is below float32's "
                             f"normal range; use 0 for greedy decoding")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"sampling.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"sampling.top_k must be >= 0, got {self.top_k}")


class HintBatch(NamedTuple):
    """What travels from rollout to trainer besides the tokens."""

    hints: dict  # site name -> Hint with leading [B, T] (per-row scales) in site layout
    experts: jax.Array  # [L, B, T, k] routing decisions (uint8 for <= 256 experts)
    recorded: jax.Array  # [B, T] bool: positions whose hints/experts the rollout recorded
    fingerprint: jax.Array  # [B] int32 fingerprint of the tokens the hints belong to


class Rollout(NamedTuple):
    tokens: jax.Array  # [B, T] int32, prompt + response + padding
    prompt_lens: jax.Array  # [B] int32
    response_lens: jax.Array  # [B] int32 (including the EOS token when one was sampled)
    logprobs: jax.Array  # [B, T] f32: log pi_rollout(token t) at temperature 1, no truncation
    sampler_logprobs: jax.Array  # [B, T] f32: log-prob under the actual (tempered/truncated) sampler
    guidance: HintBatch
    finished: jax.Array  # [B] bool: ended with EOS

    @property
    def response_mask(self) -> jax.Array:
        """[B, T] bool: positions holding response tokens."""
        t = jnp.arange(self.tokens.shape[1])[None]
        start = self.prompt_lens[:, None]
        return (t >= start) & (t < start + self.response_lens[:, None])


def fingerprint(tokens_BxT: jax.Array) -> jax.Array:
    """A per-row int32 fingerprint of the tokens (position-weighted, so shifts and swaps show)."""
    t = jnp.arange(1, tokens_BxT.shape[1] + 1, dtype=jnp.uint32)[None]
    h = (tokens_BxT.astype(jnp.uint32) + 1) * (t * jnp.uint32(2654435761) + jnp.uint32(97))
    return jnp.sum(h, axis=1, dtype=jnp.uint32).astype(jnp.int32)


def repeat_prompts(prompts_BxP, prompt_lens_B, group_size: int):
    """G samples per prompt: each prompt row repeated G times (consecutively)."""
    return (jnp.repeat(prompts_BxP, group_size, axis=0),
            jnp.repeat(prompt_lens_B, group_size, axis=0))


def sync_weights(trainer_params, numerics: nx.Numerics, shardings=None, dtype=jnp.bfloat16,
                 kernel_layout: bool | str = False):
    """The one place where the trainer's BF16/FP32 masters become rollout weights: cast to
    ``dtype`` and, for FP4 rollout, routed-expert weights quantized and packed (``kernel_layout``:
    in a Pallas FP4 grouped-matmul layout, True / "auto", "triton" or "mosaic": see
    ``model.pack_params``). ``shardings`` (a pytree of NamedShardings matching the result)
    reshards onto the rollout mesh."""
    out = _pack(trainer_params, numerics, jnp.dtype(dtype), kernel_layout)
    if shardings is not None:
        out = jax.device_put(out, shardings)
    return out


@functools.partial(jax.jit, static_argnames=("numerics", "dtype", "kernel_layout"))
def _pack(params, numerics, dtype, kernel_layout):
    return M.pack_params(params, numerics, dtype, kernel_layout=kernel_layout)


# --------------------------------------------------------------------------------------------
# Sampling


def sample(logits_BxV, key, s: SamplingConfig):
    """Sampled tokens, their log-prob at temperature 1 without truncation, and under the sampler."""
    logp = jax.nn.log_softmax(logits_BxV, axis=-1)
    if s.temperature == 0:
        tok = jnp.argmax(logits_BxV, axis=-1)
        lp = jnp.take_along_axis(logp, tok[:, None], axis=-1)[:, 0]
        return tok.astype(jnp.int32), lp, jnp.zeros_like(lp)
    # (shifted by the max first: a tiny temperature must not overflow finite logits to inf)
    z = (logits_BxV - jnp.max(logits_BxV, axis=-1, keepdims=True)) / s.temperature
    if s.top_k:
        kth = jax.lax.top_k(z, s.top_k)[0][:, -1:]
        z = jnp.where(z < kth, -jnp.inf, z)
    if s.top_p < 1:
        sorted_z = jnp.sort(z, axis=-1)[:, ::-1]
        cum = jnp.cumsum(jax.nn.softmax(sorted_z, axis=-1), axis=-1)
        # keep the smallest prefix whose mass reaches top_p (always at least one token)
        n_keep = jnp.sum(cum - jax.nn.softmax(sorted_z, axis=-1) < s.top_p, axis=-1, keepdims=True)
        thresh = jnp.take_along_axis(sorted_z, n_keep - 1, axis=-1)
        z = jnp.where(z < thresh, -jnp.inf, z)
    tok = jax.random.categorical(key, z, axis=-1).astype(jnp.int32)
    lp = jnp.take_along_axis(logp, tok[:, None], axis=-1)[:, 0]
    slp = jnp.take_along_axis(jax.nn.log_softmax(z, axis=-1), tok[:, None], axis=-1)[:, 0]
    return tok, lp, slp


# --------------------------------------------------------------------------------------------
# Generation


def _alloc_like(a, B, P, T):
    """A [B, T, ...] buffer of zero bytes for a per-row prefill leaf [B, P, ...]; other leaves
    (a per-tensor global scale) are kept as they are."""
    if a.ndim >= 2 and a.shape[:2] == (B, P):
        zeros = jnp.zeros((B, T) + a.shape[2:], jnp.uint8 if a.dtype.itemsize == 1 else a.dtype)
        return jax.lax.bitcast_convert_type(zeros, a.dtype) if a.dtype.itemsize == 1 else zeros
    return a


def _alloc_hint(h: Q.Hint, B, P, T) -> Q.Hint:
    """Per-row [B, T, ...] buffers for a prefill hint's bits, scales and (formats with one)
    global scale; MXFP4's constant global scale stays as it is (also when B = P = 1, where its
    shape alone cannot tell)."""
    g = h.global_scale
    if Q.get_format(h.fmt).has_global_scale:
        g = _alloc_like(g, B, P, T)
    return dataclasses.replace(h, bits=_alloc_like(h.bits, B, P, T),
                               scales=_alloc_like(h.scales, B, P, T), global_scale=g)


def _put_rows(buf, new, pos_B, write_B):
    """buf[b, pos[b]] = new[b, 0] where write[b] (for [B, T, ...] buffers; others are constants)."""
    if buf.ndim < 2 or buf.shape[0] != pos_B.shape[0] or buf.shape[1] == 1:
        return buf
    b = jnp.arange(buf.shape[0])
    old = buf[b, pos_B]
    m = write_B.reshape((-1,) + (1,) * (old.ndim - 1))
    return buf.at[b, pos_B].set(jnp.where(m, new[:, 0], old))


def _put_hints(bufs, new, pos_B, write_B):
    return {k: jax.tree.map(lambda a, n: _put_rows(a, n, pos_B, write_B), bufs[k], new[k])
            for k in bufs}


def generate(params, prompts_BxP, prompt_lens_B, key, *, cfg: M.ModelConfig, numerics: nx.Numerics,
             sampling: SamplingConfig, capture_hints: bool = True, mesh=None,
             rules=None) -> Rollout:
    """Sample one response per prompt row. See the module docstring for the layout.

    With a ``mesh`` (and sampling ``rules``, default ``sharding.make_rules("sampling")``) the
    prompts are split by trajectory over the batch mesh axes; ``params`` should already carry
    the sampling shardings (``sync_weights(..., shardings=...)``)."""
    B, P = prompts_BxP.shape
    T = P + sampling.max_new_tokens
    if T > cfg.max_seq_len:
        raise ValueError(f"prompt width {P} + max_new_tokens {sampling.max_new_tokens} = {T} exceeds "
                         f"model.max_seq_len={cfg.max_seq_len}")
    V = cfg.vocab_size  # (inside the rollout's jit an id outside it would embed as NaN: refused
    # here, on the host, where the prompts of every process can be read)
    if not 0 <= sampling.pad_id < V or not sampling.eos_id < V:
        raise ValueError(f"sampling pad_id={sampling.pad_id} / eos_id={sampling.eos_id} outside "
                         f"the model's vocabulary [0, {V}) (a negative eos_id: no EOS)")
    if sampling.top_k > V:
        raise ValueError(f"sampling.top_k={sampling.top_k} is larger than the model's "
                         f"vocabulary of {V}")
    if not isinstance(prompts_BxP, jax.core.Tracer):
        ids = D.to_host(prompts_BxP)
        if ids.size and (ids.min() < 0 or ids.max() >= V):
            raise ValueError(f"prompt token ids {ids.min()}..{ids.max()} outside the model's "
                             f"vocabulary [0, {V})")
    if not isinstance(prompt_lens_B, jax.core.Tracer):
        lens = D.to_host(prompt_lens_B)
        if not np.issubdtype(lens.dtype, np.integer):  # (a cast would cut 5.9 to 5 tokens)
            raise ValueError(f"prompt_lens must be integers, got dtype {lens.dtype}")
        if lens.shape != (B,) or lens.min() < 1 or lens.max() > P:
            raise ValueError(f"prompt_lens must be [B]={B} values in 1..{P}, got shape {lens.shape}, "
                             f"range {lens.min()}..{lens.max()}")
    if mesh is not None:  # (after the checks: they read the host prompts, not a gather)
        from trace_jax import sharding as SH
        rules = rules or SH.make_rules("sampling")
        SH.check_batch_divisible(B, mesh, rules)
        prompts_BxP, prompt_lens_B = D.put_global(  # multi-host safe placement
            (prompts_BxP, prompt_lens_B),
            (SH.data_sharding(mesh, rules, 2), SH.data_sharding(mesh, rules, 1)))
    with contextlib.nullcontext() if mesh is None else jax.set_mesh(mesh):
        return _generate(params, prompts_BxP, prompt_lens_B.astype(jnp.int32), key, cfg=cfg,
                         numerics=numerics, sampling=sampling, capture_hints=capture_hints)


@nx.model_jit(static_argnames=("cfg", "numerics", "sampling", "capture_hints"))
def _generate(params, prompts, prompt_lens, key, *, cfg, numerics, sampling, capture_hints):
    B, P = prompts.shape
    T = P + sampling.max_new_tokens
    s = sampling
    b_idx = jnp.arange(B)
    # pad everything past the prompt so the trajectory never carries stale prompt padding
    prompts = jnp.where(jnp.arange(P)[None] < prompt_lens[:, None], prompts, s.pad_id)

    cache = attention.init_cache(cfg, numerics, B, T)
    pos0 = jnp.broadcast_to(jnp.arange(P, dtype=jnp.int32)[None], (B, P))
    logits, aux, cache = M.forward(params, prompts, cfg=cfg, numerics=numerics, cache=cache,
                                   positions_BxT=pos0, capture_hints=capture_hints)
    last = logits[b_idx, prompt_lens - 1]

    tokens = jnp.full((B, T), s.pad_id, jnp.int32).at[:, :P].set(prompts)
    hints = {k: _alloc_hint(h, B, P, T) for k, h in aux.hints.items()}
    hints = {k: jax.tree.map(
        lambda buf, a: buf.at[:, :P].set(a) if buf is not a else a, hints[k], aux.hints[k])
        for k in hints}
    recorded = jnp.zeros((B, T), bool).at[:, :P].set(jnp.arange(P)[None] < prompt_lens[:, None])
    experts = jnp.zeros((cfg.n_layers, B, T, cfg.top_k), aux.experts.dtype).at[:, :, :P].set(
        aux.experts)
    zeros = jnp.zeros((B, T), jnp.float32)

    state = dict(i=jnp.int32(0), cache=cache, last=last, pos=prompt_lens, done=jnp.zeros(B, bool),
                 finished=jnp.zeros(B, bool), key=key, tokens=tokens, logp=zeros, slogp=zeros,
                 hints=hints, experts=experts, recorded=recorded, resp=jnp.zeros(B, jnp.int32))

    def cond(st):
        return (st["i"] < s.max_new_tokens) & ~jnp.all(st["done"])

    def body(st):
        key, sub = jax.random.split(st["key"])
        tok, lp, slp = sample(st["last"], sub, s)
        live = ~st["done"]
        pos = st["pos"]
        tok = jnp.where(live, tok, s.pad_id)
        tokens = st["tokens"].at[b_idx, pos].set(jnp.where(live, tok, st["tokens"][b_idx, pos]))
        logp = st["logp"].at[b_idx, pos].set(jnp.where(live, lp, st["logp"][b_idx, pos]))
        slogp = st["slogp"].at[b_idx, pos].set(jnp.where(live, slp, st["slogp"][b_idx, pos]))
        hit_eos = live & (tok == s.eos_id)
        done = st["done"] | hit_eos | (pos + 1 >= T)

        logits, aux, cache = M.forward(params, tok[:, None], cfg=cfg, numerics=numerics,
                                       cache=st["cache"], positions_BxT=pos[:, None],
                                       capture_hints=capture_hints)
        hints = _put_hints(st["hints"], aux.hints, pos, live)
        experts = jax.vmap(lambda buf, new: _put_rows(buf, new, pos, live))(st["experts"], aux.experts)
        return dict(i=st["i"] + 1, cache=cache, last=logits[:, 0], pos=jnp.where(done, pos, pos + 1),
                    done=done, finished=st["finished"] | hit_eos, key=key, tokens=tokens,
                    logp=logp, slogp=slogp, hints=hints, experts=experts,
                    recorded=st["recorded"].at[b_idx, pos].set(st["recorded"][b_idx, pos] | live),
                    resp=st["resp"] + live.astype(jnp.int32))

    st = jax.lax.while_loop(cond, body, state)
    guidance = HintBatch(st["hints"], st["experts"], st["recorded"], fingerprint(st["tokens"]))
    return Rollout(st["tokens"], prompt_lens, st["resp"], st["logp"], st["slogp"], guidance,
                   st["finished"])


# --------------------------------------------------------------------------------------------
# Recomputation and accounting


def token_logprobs(logits_BxTxV, tokens_BxT):
    """log p(tokens[t] | tokens[<t]) at position t (0 at t = 0), from full-sequence logits."""
    logp = jax.nn.log_softmax(logits_BxTxV[:, :-1].astype(jnp.float32), axis=-1)
    lp = jnp.take_along_axis(logp, tokens_BxT[:, 1:, None], axis=-1)[..., 0]
    return jnp.pad(lp, ((0, 0), (1, 0)))


def hint_bytes_per_token(hints: dict, n_tokens_per_row: int | None = None) -> float:
    """Bytes of hints stored per token position (bits + block scales + per-row global scales)."""
    total, positions = 0, None
    for h in hints.values():
        B, T = h.bits.shape[:2]
        positions = B * T
        per_pos = (h.bits.size + h.scales.size) / positions
        g = h.global_scale
        per_pos += 4 * (g.size / positions if g.ndim >= 2 and g.shape[:2] == (B, T) else 0)
        total += per_pos
    return float(total) if positions else 0.0


def expected_hint_bytes_per_token(cfg: M.ModelConfig, numerics: nx.Numerics) -> float:
    """The formula: per hinted site, (elements/8 + elements/block + 4 * rows) bytes per token."""
    f = Q.get_format(numerics.fmt)
    gbytes = 4 if f.has_global_scale else 0
    per_kind = {
        "moe/expert_in": (cfg.d_model, 1),
        "moe/expert_hidden": (cfg.top_k * cfg.d_expert, cfg.top_k),
        "attn/kv": (2 * cfg.n_kv_heads * cfg.head_dim, 2 * cfg.n_kv_heads),
    }
    total = 0.0
    for name in numerics.hinted:
        elems, rows = per_kind[name.split("/", 2)[2]]
        bits = elems / 8 if numerics.hint_kind == "mantissa" else elems / 2
        total += bits + elems / f.block_size + gbytes * rows
    return total
