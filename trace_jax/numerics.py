"""The one numerics switch: what happens at every quantization site of the model.

A *site* is a stable name ``layers/{l}/{kind}`` for one tensor that FP4 rollout quantizes:

=====================  ==========================================================  =====================
kind                   tensor                                                      layout (hint index)
=====================  ==========================================================  =====================
moe/expert_in          the routed experts' gate/up input (one vector per token)    [B, T, D]
moe/expert_hidden      the down-projection input, one per (token, expert slot)     [B, T, k, F]
attn/kv                K and V as written to the cache                             [B, T, 2, Hkv, Dh]
moe/expert_weights     the routed experts' gate/up/down weights                    (weights; no hints)
=====================  ==========================================================  =====================

Activations are quantized along their last axis with per-row (per token) NVFP4 global scales, so
a token's codes do not depend on the rest of the batch. Expert weights are quantized along the
contraction axis with one global scale per expert.

:class:`Numerics` (a frozen dataclass, hashable, passed to jit as a static argument) picks one
``mode`` -- ``bf16``, ``fp4_rollout`` (packed FP4 weights, real activation and KV quantization: what
the rollout runs), ``fp4_qat`` (BF16 masters, straight-through fake-quant of weights, activations
and K/V, hint-guided where hints are given) or ``fp4_qat_w4a16`` (weights only) -- plus the
format, the set of quantized sites, the hinted sites and the precision of P in the attention
(``attention_p``: the one arithmetic choice outside the quantization sites).

Every jit that runs the model (the rollout's and the trainer's) compiles with
:data:`COMPILER_OPTIONS`: XLA rounds to bf16 wherever the code says so.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from typing import Literal

import jax
import jax.numpy as jnp

from trace_jax import ops
from trace_jax import quant as Q

MODES = ("bf16", "fp4_rollout", "fp4_qat", "fp4_qat_w4a16")

ACT_SITES = ("moe/expert_in", "moe/expert_hidden", "attn/kv")
WEIGHT_SITES = ("moe/expert_weights",)
SITE_KINDS = ACT_SITES + WEIGHT_SITES
# The paper's default: routed-expert GEMMs in W4A4 and the KV cache.
DEFAULT_SITES = SITE_KINDS
DEFAULT_HINT_SITES = ACT_SITES

# XLA options of every jit that runs the model (``rollout._generate``, the train steps,
# ``diagnose``'s trainer pass). By default XLA's fusions may skip a bf16 rounding between two
# f32 computations ("excess precision"), and whether one does depends on the shapes fused: the
# rollout's prefill ([B, P]) and the trainer's forward ([B, T]) then round the same activation
# differently (CPU, tiny checkpoint: 25% of layer 0's q after RMSNorm + RoPE differed, and 0.7%
# of its ``expert_in`` codes). With exact casts the CPU rollout and trainer agree bit for bit up
# to rare f32 summation-order differences in the attention (tiny checkpoint, 8 batches: kl_k3 0
# for the BF16 engine, RTN QAT and TRACE; session 32, experiments/results/p_precision_mismatch.md).
# ``TRACE_JAX_EXCESS_PRECISION=1`` restores XLA's default: to measure what exact casts cost, or
# as a stand-in for engine drift in CPU studies.
def _env_flag(name: str, default: str, meaning: str) -> bool:
    v = os.environ.get(name, default)
    if v not in ("0", "1"):
        raise ValueError(f"{name}={v!r}: use 0 or 1 ({meaning}; default {default})")
    return v == "1"


# On the CPU, XLA hands dots to the YNNPACK library by default, whose kernel (and so summation
# order) depends on the shapes: the trainer's [T, S] attention scores then sum head_dim in
# another order than the decode step's [1, S] ones, for most T (small.py, random init: every
# decode position's f32 scores, 1.7% of its bf16 attention outputs; session 37,
# experiments/locate_rollout_mismatch.py). ``TRACE_JAX_YNN=0`` compiles the model's jits without
# YNNPACK fusions: then, with RoPE's products rounded (``attention.rope``), small.py's CPU rollout
# and trainer are bit-identical for every diagnosis variant (BF16 engine gap 3.1e-4 -> 0), at
# ~1.3x the CPU time (YNNPACK's bf16 matmuls are ~1.6x faster). Not the default: XLA's own dots
# choose their order by shape too, and the shrunken tiny diagnosis on 8 fake CPU devices (one
# row per device) parted with it (BF16 gap 4.3e-4) where it is exact with YNNPACK. No effect on
# a GPU.
COMPILER_OPTIONS = {
    "xla_allow_excess_precision": _env_flag(
        "TRACE_JAX_EXCESS_PRECISION", "0", "1 = XLA's excess precision, 0 = exact bf16 casts"),
}
NO_YNN = {"xla_cpu_experimental_ynn_fusion_type": ""}  # no YNNPACK library fusions (CPU)
if not _env_flag("TRACE_JAX_YNN", "1", "1 = XLA:CPU's YNNPACK fusions in the model's jits "
                 "(XLA's default), 0 = without them"):
    COMPILER_OPTIONS.update(NO_YNN)


class _ModelJit:
    """``jax.jit(fn, **jit_kwargs)`` compiled with :data:`COMPILER_OPTIONS` when called at top
    level; called under another trace (a jit, ``eval_shape``), the plain jit, whose program the
    outer jit compiles with its own options (JAX accepts ``compiler_options`` on top-level
    jits only)."""

    def __init__(self, fn, **jit_kwargs):
        self.top = jax.jit(fn, compiler_options=COMPILER_OPTIONS, **jit_kwargs)
        self.nested = jax.jit(fn, **jit_kwargs)
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        if any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves((args, kwargs))):
            return self.nested(*args, **kwargs)
        try:
            return self.top(*args, **kwargs)
        except ValueError as e:  # under a trace with concrete arguments only (a closure)
            if "compiler_options" not in str(e):
                raise
            return self.nested(*args, **kwargs)

    def lower(self, *args, **kwargs):
        return self.top.lower(*args, **kwargs)

    def clear_cache(self):
        self.top.clear_cache()
        self.nested.clear_cache()

    def _cache_size(self) -> int:
        return self.top._cache_size() + self.nested._cache_size()


def model_jit(fn=None, **jit_kwargs):
    """Decorator: ``jax.jit`` for the functions that run the model (rollout, train steps), with
    exact bf16 casts (:data:`COMPILER_OPTIONS`). ``@model_jit`` or ``@model_jit(**jit_kwargs)``."""
    if fn is None:
        return functools.partial(model_jit, **jit_kwargs)
    return _ModelJit(fn, **jit_kwargs)


def site_name(layer: int, kind: str) -> str:
    return f"layers/{layer}/{kind}"


def all_site_names(n_layers: int) -> list[str]:
    return [site_name(l, k) for l in range(n_layers) for k in SITE_KINDS]


def _resolve(patterns, n_layers: int, what: str, allowed=SITE_KINDS) -> frozenset[str]:
    """Each pattern is a site kind (all layers) or a regex over full site names."""
    names = [site_name(l, k) for l in range(n_layers) for k in allowed]
    out = set()
    for p in patterns:
        if p in allowed:
            out.update(n for n in names if n.endswith("/" + p))
            continue
        try:
            rx = re.compile(p)
        except re.error as e:
            raise ValueError(f"{what}: {p!r} is neither a site kind {allowed} nor a regex ({e})")
        hit = [n for n in names if rx.fullmatch(n)]
        if not hit:
            raise ValueError(
                f"{what}: {p!r} matches no site; site kinds are {allowed}, full names look like "
                f"'layers/0/moe/expert_in' (layers 0..{n_layers - 1})"
            )
        out.update(hit)
    return frozenset(out)


def hint_layer_set(spec, n_layers: int) -> frozenset[int]:
    """``"last_half"`` (the paper's last 20 of 40), ``"all"``, ``"none"``, a fraction in (0, 1]
    of the last layers, or an explicit list of layer indices; the last two also as strings
    (``"0.25"``, ``"[2, 3]"``, ``"2,3"``: what a command-line override of the string field
    gives)."""
    if isinstance(spec, str):
        text = spec.strip()
        if re.fullmatch(r"\d*\.\d+|\d+\.\d*", text):
            return hint_layer_set(float(text), n_layers)
        if re.fullmatch(r"[\[(]?\s*\d+(\s*,\s*\d+)*\s*,?\s*[\])]?", text):
            return hint_layer_set([int(t) for t in re.findall(r"\d+", text)], n_layers)
        if spec == "last_half":
            return frozenset(range(n_layers // 2, n_layers))
        if spec == "all":
            return frozenset(range(n_layers))
        if spec == "none":
            return frozenset()
        raise ValueError(f"hint_layers: unknown spec {spec!r} (last_half, all, none, a fraction, a list)")
    if isinstance(spec, float):
        if not 0 < spec <= 1:
            raise ValueError(f"hint_layers fraction must be in (0, 1], got {spec}")
        n = max(1, round(spec * n_layers))
        return frozenset(range(n_layers - n, n_layers))
    layers = frozenset(int(l) for l in spec)
    bad = [l for l in layers if not 0 <= l < n_layers]
    if bad:
        raise ValueError(f"hint_layers: layers {sorted(bad)} outside 0..{n_layers - 1}")
    return layers


@dataclasses.dataclass(frozen=True)
class Numerics:
    """Resolved numerics policy. Build with :func:`make_numerics`."""

    mode: str = "bf16"
    fmt: str = "nvfp4"
    quantized: frozenset[str] = frozenset()  # full site names
    hinted: frozenset[str] = frozenset()  # full site names (activation sites only)
    hint_kind: Literal["mantissa", "exact"] = "mantissa"
    # P in the attention's P.V: "f32" or "bf16" (13-15% faster FP4-KV decode attention on the
    # H200, one bf16 rounding of P; NOTES_attention, sessions 29-30). The decode steps pass it to
    # ``ops.decode_attention``; the trainer's and the prefill's ``causal_attention`` round P the
    # same way, so the trainer replays the rollout's choice (``experiment.build`` gives both
    # numerics the value of ``rollout.attention_p_precision``).
    attention_p: Literal["f32", "bf16"] = "f32"

    def __post_init__(self):
        ops.check_p_precision(self.attention_p, "Numerics.attention_p")

    @property
    def is_fp4(self) -> bool:
        return self.mode != "bf16"

    def quantizes(self, name: str) -> bool:
        """Whether the site is quantized in this mode (W4A16 skips activations)."""
        if self.mode == "bf16" or name not in self.quantized:
            return False
        if self.mode == "fp4_qat_w4a16":
            return _kind(name) in WEIGHT_SITES
        return True

    def hints(self, name: str) -> bool:
        return name in self.hinted and self.quantizes(name)

    def recording_all_codes(self) -> "Numerics":
        """The same numerics, capturing exact codes at every quantized activation site (for
        diagnosis and code-agreement metrics; :func:`trainer_hints` derives the real hints)."""
        acts = frozenset(n for n in self.quantized if _kind(n) in ACT_SITES)
        return dataclasses.replace(self, hinted=acts, hint_kind="exact")

    def trainer_hints(self, recorded: dict) -> dict:
        """The hints this policy consumes, from hints recorded by :meth:`recording_all_codes`
        (or by this policy itself)."""
        missing = sorted(self.hinted - set(recorded))
        if missing:
            raise ValueError(
                f"the rollout recorded no hints at {len(missing)} of the trainer's hinted sites "
                f"({missing[:3]}...): the rollout's numerics.hint_layers / hint_sites must cover "
                f"the trainer's")
        out = {}
        for name in self.hinted:
            h = recorded[name]
            if self.hint_kind == "exact" and h.kind != "exact":
                raise ValueError(f"{name}: an exact-hint policy cannot be fed the rollout's "
                                 f"{h.kind!r} hint (record exact codes for it)")
            out[name] = h if self.hint_kind == "exact" else Q.mantissa_hint(h)
        return out

    def with_attention_p(self, p: str, name: str = "attention_p") -> "Numerics":
        """The same numerics with P at ``p`` in the attention, decode steps and the trainer's
        alike (a ValueError naming ``name`` -- e.g. the config field -- for anything but "f32" /
        "bf16")."""
        return dataclasses.replace(self, attention_p=ops.check_p_precision(p, name))

    def with_mode(self, mode: str) -> "Numerics":
        if mode not in MODES:
            raise ValueError(f"numerics mode must be one of {MODES}, got {mode!r}")
        return dataclasses.replace(self, mode=mode)


def _kind(name: str) -> str:
    return name.split("/", 2)[2]


def make_numerics(
    mode: str,
    n_layers: int,
    *,
    fmt: str = "nvfp4",
    sites=DEFAULT_SITES,
    hint_sites=DEFAULT_HINT_SITES,
    hint_layers="last_half",
    hint_kind: str = "mantissa",
) -> Numerics:
    if mode not in MODES:
        raise ValueError(f"numerics mode must be one of {MODES}, got {mode!r}")
    Q.get_format(fmt)
    if hint_kind not in ("mantissa", "exact"):
        raise ValueError(f"hint_kind must be 'mantissa' or 'exact', got {hint_kind!r}")
    quantized = _resolve(tuple(sites), n_layers, "quantized sites")
    hint_candidates = _resolve(tuple(hint_sites), n_layers, "hint sites", ACT_SITES)
    layers = hint_layer_set(hint_layers, n_layers)
    hinted = frozenset(n for n in hint_candidates if int(n.split("/")[1]) in layers)
    not_quantized = sorted(hinted - quantized)
    if not_quantized:
        raise ValueError(f"hint sites must be quantized sites; not quantized: {not_quantized[:4]}")
    return Numerics(mode, fmt, quantized, hinted, hint_kind)


def numerics_from_config(cfg, mode: str, n_layers: int) -> Numerics:
    """From a ``config.numerics`` ConfigDict (fields: fmt, sites, hint_sites, hint_layers, hint_kind)."""
    hl = cfg.hint_layers
    if not isinstance(hl, (str, float)):
        hl = tuple(hl)
    return make_numerics(
        mode, n_layers, fmt=cfg.fmt, sites=tuple(cfg.sites), hint_sites=tuple(cfg.hint_sites),
        hint_layers=hl, hint_kind=cfg.hint_kind,
    )


# --------------------------------------------------------------------------------------------
# Applying the policy at a site

# How fp4_rollout quantizes its activation sites: "auto" = the fused Pallas kernel
# (pallas_kernels.quantize_hint: codes, scales and the mantissa hint in one pass, bit-identical to
# quant.quantize + extract_hint) on a GPU without a multi-device mesh, XLA's ops otherwise (a
# pallas_call left to GSPMD would run replicated); "kernel" = the kernel wherever it runs (Pallas
# interpret mode on the CPU: tests); "xla". Session 15's profile of the 30B decode step put XLA's
# quantization of the three sites at ~26 us per layer in ~25 small fusions. Read at trace time.
ACTIVATION_QUANTIZER = "auto"
ACTIVATION_QUANTIZERS = ("auto", "kernel", "xla")


def quantize_kernel_active() -> bool:
    """Whether :func:`rollout_quantize` takes the fused kernel here (the switch resolved for this
    backend and the enclosing mesh, at trace time)."""
    if ACTIVATION_QUANTIZER not in ACTIVATION_QUANTIZERS:
        raise ValueError(f"numerics.ACTIVATION_QUANTIZER must be one of {ACTIVATION_QUANTIZERS}, "
                         f"got {ACTIVATION_QUANTIZER!r}")
    if ACTIVATION_QUANTIZER != "auto":
        return ACTIVATION_QUANTIZER == "kernel"
    from trace_jax.sharding import context_mesh

    mesh = context_mesh()
    return jax.default_backend() == "gpu" and (mesh is None or mesh.size == 1)


def rollout_quantize(x, fmt: str, scope: str, with_hint: bool, values_dtype=None):
    """``(q, hint, y)`` for ``x`` quantized along its last axis: ``q = quant.quantize(x, fmt,
    axis=-1, global_scope=scope)``, its mantissa hint (``extract_hint(q)``; None unless
    ``with_hint``) and ``y = quant.dequantize(q, values_dtype or x.dtype)``, through the fused
    kernel where :data:`ACTIVATION_QUANTIZER` picks it (same bits either way; the kernel writes
    ``y`` from the codes it holds, so no XLA pass unpacks them again)."""
    vd = x.dtype if values_dtype is None else jnp.dtype(values_dtype)
    if not quantize_kernel_active():
        q = Q.quantize(x, fmt, axis=-1, global_scope=scope)
        return q, (Q.extract_hint(q) if with_hint else None), Q.dequantize(q, vd)
    from pallas_kernels.quantize_hint import quantize_with_hint

    lead, k = x.shape[:-1], x.shape[-1]
    q2, h2, y2 = quantize_with_hint(x.reshape(-1, k), fmt, global_scope=scope,
                                    with_hint=with_hint, values=vd, backend="triton")
    rows = lambda a: a.reshape(lead + a.shape[-1:])  # noqa: E731
    per_row = Q.get_format(fmt).has_global_scale and scope == "row"
    g_shape = lead + (1,) if per_row else (1,) * x.ndim
    q = dataclasses.replace(q2, codes=rows(q2.codes), scales=rows(q2.scales),
                            global_scale=q2.global_scale.reshape(g_shape))
    h = None if h2 is None else dataclasses.replace(
        h2, bits=rows(h2.bits), scales=q.scales, global_scale=q.global_scale)
    return q, h, rows(y2)


class SiteIO:
    """Trace-time bookkeeping for one forward pass: hints coming in (keyed by site name) and
    hints/codes going out. Lives only while a function is being traced; holds no state across
    calls."""

    def __init__(self, numerics: Numerics, hints_in=None, capture_hints=False, capture_codes=False,
                 hint_valid_BxT=None):
        self.numerics = numerics
        self.hints_in = dict(hints_in or {})
        self.hint_valid = hint_valid_BxT
        self.capture_hints = capture_hints
        self.capture_codes = capture_codes
        self.hints_out: dict[str, Q.Hint] = {}
        self.codes_out: dict[str, Q.Hint] = {}
        unknown = sorted(set(self.hints_in) - numerics.hinted)
        if unknown:
            raise ValueError(
                f"hints given for sites this numerics policy does not hint: {unknown[:4]}"
                f" (hinted: {sorted(numerics.hinted)[:4]}...)"
            )
        for name, h in self.hints_in.items():  # (another grid or hint kind: a silent ablation)
            if (h.fmt, h.kind) != (numerics.fmt, numerics.hint_kind):
                raise ValueError(f"{name}: a {h.fmt} {h.kind!r} hint given to a {numerics.fmt} "
                                 f"policy with hint_kind={numerics.hint_kind!r}")

    def gather_hint_rows(self, name: str, src: jax.Array) -> None:
        """Reorder the incoming hint of ``name`` along the axis after its [B, T]: row j becomes
        row ``src[b, t, j]`` (int [B, T, n]); leaves without that axis are kept."""
        h = self.hints_in.get(name)
        if h is None:
            return

        def take(a):
            if a.ndim < 3 or a.shape[:3] != src.shape:
                return a
            idx = src.reshape(src.shape + (1,) * (a.ndim - 3))
            return jnp.take_along_axis(a, idx, axis=2)

        self.hints_in[name] = jax.tree.map(take, h)

    def activation(self, name: str, x: jax.Array, hint_rows: jax.Array | None = None,
                   layout=None, values_dtype=None) -> tuple[jax.Array, Q.QTensor | None]:
        """Apply the site's numerics to activation ``x`` (quantized along its last axis).

        Returns the value the model continues with (``x`` itself, the dequantized FP4 values, or
        the straight-through fake-quant) and the QTensor in site layout (None if not quantized).

        ``layout`` optionally maps ``x`` to and from the site's hint layout (leading [B, T]):
        a pair of functions ``(to_site, from_site)``. ``hint_rows`` (bool, x's shape without the
        last axis, in site layout) says where an incoming hint applies, as does the pass-wide
        ``hint_valid_BxT`` (positions the rollout recorded); elsewhere RTN is used.
        ``values_dtype``: the dtype of the dequantized values returned at a quantized site
        (default ``x``'s; the gradient reaches ``x`` in ``x``'s dtype).
        """
        nm = self.numerics
        if not nm.quantizes(name):
            return x, None
        to_site, from_site = layout or (lambda a: a, lambda a: a)
        xs = to_site(x)
        scope = "row" if Q.get_format(nm.fmt).has_global_scale else "tensor"
        hint = self.hints_in.get(name)
        hint_out = None  # the mantissa hint, when the rollout's quantizer made it
        if nm.mode == "fp4_rollout":
            want = self.capture_hints and nm.hints(name) and nm.hint_kind == "mantissa"
            q, hint_out, y = rollout_quantize(jax.lax.stop_gradient(xs), nm.fmt, scope, want,
                                              values_dtype)
        elif hint is None:
            q = Q.quantize(jax.lax.stop_gradient(xs), nm.fmt, axis=-1, global_scope=scope)
        else:
            q = Q.guided_quantize(jax.lax.stop_gradient(xs), hint)
            if self.hint_valid is not None:
                rows = xs.shape[:-1]
                v = self.hint_valid.reshape(self.hint_valid.shape + (1,) * (len(rows) - 2))
                v = jnp.broadcast_to(v, rows)
                hint_rows = v if hint_rows is None else hint_rows & v
            if hint_rows is not None:
                rtn = Q.quantize(jax.lax.stop_gradient(xs), nm.fmt, axis=-1, global_scope=scope)
                m = hint_rows[..., None]
                q = jax.tree.map(lambda a, b: jnp.where(m, a, b), q, rtn)
        if self.capture_hints and nm.hints(name):
            self.hints_out[name] = (hint_out if hint_out is not None else
                                    Q.extract_hint(q, exact=nm.hint_kind == "exact"))
        if self.capture_codes:
            self.codes_out[name] = Q.extract_hint(q, exact=True)
        if nm.mode != "fp4_rollout":  # (the rollout's y came with q)
            y = Q.straight_through_dequant(
                xs if values_dtype is None else xs.astype(values_dtype), q)
        return from_site(y), q

    def weight(self, name: str, w):
        """Expert weights [E, K, N] (contraction axis -2): an array in; the array, packed FP4, or
        (QAT) :class:`ops.ScaledExperts` out. In fp4_rollout the weight is already packed (see
        ``model.pack_params``)."""
        nm = self.numerics
        if not isinstance(w, jax.Array):  # packed FP4: a QTensor or kernel-layout FP4Weights
            if nm.mode != "fp4_rollout":
                raise ValueError(f"{name}: packed FP4 weights given to numerics mode {nm.mode!r}")
            if not nm.quantizes(name) or w.fmt != nm.fmt:
                raise ValueError(f"{name}: {w.fmt} packed weights given to numerics that "
                                 + (f"use {nm.fmt}" if nm.quantizes(name) else
                                    "keep this site in high precision")
                                 + "; pack them with this numerics (sync_weights)")
            return w
        if not nm.quantizes(name):
            return w
        if nm.mode == "fp4_rollout":
            raise ValueError(f"{name}: fp4_rollout expects packed weights; run sync_weights first")
        q = quantize_weight(jax.lax.stop_gradient(w), nm.fmt)
        se = ops.ScaledExperts.from_qtensor(q, w.dtype)
        g = jax.lax.stop_gradient(q.global_scale)
        # values straight-through in w / g, so (x @ values) * g has the gradient of x @ w (in
        # w's dtype: bf16 masters stay bf16)
        return dataclasses.replace(se, values=Q.straight_through((w / g).astype(w.dtype),
                                                                 se.values))


def quantize_weight(w: jax.Array, fmt: str, scale_rule: str = "max") -> Q.QTensor:
    """Quantize expert weights [..., E, K, N] along K with one global scale per expert
    (``scale_rule="four_over_six"`` for the four-over-six PTQ baseline)."""
    fn = lambda a: Q.quantize(a, fmt, axis=-2, scale_rule=scale_rule)  # noqa: E731
    for _ in range(w.ndim - 2):
        fn = jax.vmap(fn)
    return fn(w)
