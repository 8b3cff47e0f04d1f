#!/usr/bin/env python3
"""Rollout decode throughput: FP4 vs BF16 engines at the same HBM budget (issue 8).

What is timed: the rollout engine's decode step -- ``trace_jax.model.forward`` with ``cache=`` and
T = 1 (the body of ``rollout._generate``'s while loop minus the sampler and the record scatters),
``--loop`` steps (default 8) per jitted ``fori_loop`` call as the engine runs them (``--loop 1``:
one synced call per step, which adds the host's per-call dispatch to every step), KV cache donated, random weights built on the device in their target dtype
(bf16 arrays; FP4 experts as random packed codes / block scales / global scales, never an f32
30B tensor), and a random, valid, pre-filled cache (every slot < context holds random bf16 values
or random FP4 codes with finite scales). Every sequence sits at ``lengths = context``.

Engines (rows):
  bf16          bf16 weights, bf16 KV, Pallas decode attention (what ops.decode_attention picks on GPU)
  bf16_xla      the same forward with ops.decode_attention swapped for decode_attention_reference
                (plain XLA: what a JAX user has without the kernels); batch of the bf16 engine
  fp4           fp4_rollout numerics, the paper's site set (W4A4 routed experts + FP4 KV),
                hint capture on (what the TRACE rollout runs)
  fp4_nohints   the same, hint capture off (hint-capture overhead = fp4 vs fp4_nohints, same batch)
  fp4w_bf16kv   FP4 expert weights/activations, bf16 KV (sites without attn/kv), hints on

Batch: for each engine's (weight precision, KV precision) the largest B with
  weights + B * (context * KV bytes/token + per-sequence activations) + workspace <= --hbm_gb,
from shapes alone (``params.count`` and the cache layout), capped by --max_batch. With --layers
(a reduced-depth run) the batch is still sized for the config's full depth, so every layer holds
exactly the state it would in the full model; step times then cover --layers layers plus the
embedding / lm_head, which are not scaled.

Per step: bytes moved = dense weights (all of them) + routed-expert weights of the experts the
step actually touched (counted from the step's routing output; at B >= 64 this is ~100%, at the
small BF16 batches of long contexts it is not, and the table says the fraction) + the embedding
rows + KV read (B * context * KV bytes/token); achieved bandwidth vs a device copy bandwidth
(read + write of a --copy_gb f32 array, --copy_passes passes per jitted call as the steps run
--loop steps per call) measured in the same run; memory (bytes in use with the
engine's state resident, the compiled step's temp bytes, process peak so far).

If a target is missed the step is broken down on the same shapes and data: attention (all layers'
``ops.decode_attention`` calls), routed-expert matmuls (all layers' three ``ops.grouped_matmul``
calls + SwiGLU, with the step's routing) and the rest (step minus both). For FP4 the expert time
is also given with the Pallas ``fp4_grouped_matmul`` kernel in place of dequantize + ragged_dot.

Prefill: tokens/s of one ``--prefill_len`` prompt (batch 1) for bf16 and fp4 (hints on).

    python experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --contexts 8192,32768,131072
    python experiments/bench_rollout.py --config configs/qwen3_30b_a3b.py --layers 4   # reduced depth
    python experiments/bench_rollout.py --smoke      # CPU: 2 steps of every engine on a tiny shape
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gc
import importlib.util
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# JAX's allocator takes 75% of the GPU by default (~112 GB of an H200): too little for the
# 130 GB budget at full depth (session 8's 48-layer run ran out of memory). Before jax loads.
os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from trace_jax import attention, ops  # noqa: E402
from trace_jax import model as M  # noqa: E402
from trace_jax import numerics as nx  # noqa: E402
from trace_jax import quant as Q  # noqa: E402

GB = 1e9
EXPERT_LEAVES = ("w_gate", "w_up", "w_down")

ENGINES = {
    # name: (numerics mode, sites, hint sites, capture hints, attention backend)
    "bf16": ("bf16", nx.DEFAULT_SITES, nx.DEFAULT_HINT_SITES, False, "kernel"),
    "bf16_xla": ("bf16", nx.DEFAULT_SITES, nx.DEFAULT_HINT_SITES, False, "reference"),
    "fp4": ("fp4_rollout", nx.DEFAULT_SITES, nx.DEFAULT_HINT_SITES, True, "kernel"),
    "fp4_nohints": ("fp4_rollout", nx.DEFAULT_SITES, nx.DEFAULT_HINT_SITES, False, "kernel"),
    "fp4w_bf16kv": ("fp4_rollout", ("moe/expert_in", "moe/expert_hidden", "moe/expert_weights"),
                    ("moe/expert_in", "moe/expert_hidden"), True, "kernel"),
}
TARGETS = {"fp4_vs_bf16_128k": 5.4, "fp4_vs_bf16_32k": 3.5, "bf16_pct_copy": 70.0,
           "hint_overhead_pct": 5.0}
RATIO_TARGETS = {131072: TARGETS["fp4_vs_bf16_128k"], 32768: TARGETS["fp4_vs_bf16_32k"]}  # context -> x


# --------------------------------------------------------------------------------------------
# Config and sizing


def load_model_config(path: str, layers: int | None, max_len: int) -> tuple[M.ModelConfig, M.ModelConfig]:
    """(full-depth config, run config) from a get_config() file."""
    spec = importlib.util.spec_from_file_location("_bench_cfg", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    d = dict(mod.get_config().model)
    d.update(param_dtype="bfloat16", dtype="bfloat16", max_seq_len=max(int(d["max_seq_len"]), max_len))
    full = M.ModelConfig.from_config(d)
    run = dataclasses.replace(full, n_layers=layers) if layers else full
    return full, run


def param_count(cfg: M.ModelConfig, fmt: str) -> dict:
    """``trace_jax.params.count`` (needs no ml_collections)."""
    from trace_jax import params as P

    return P.count(cfg, fmt)


def kv_bytes_per_token(cfg: M.ModelConfig, fp4_kv: bool, fmt: str) -> float:
    """Cache bytes per token over all layers (K and V)."""
    per_row = cfg.head_dim * 2  # bf16
    if fp4_kv:
        f = Q.get_format(fmt)
        per_row = cfg.head_dim / 2 + cfg.head_dim / f.block_size + (4 if f.has_global_scale else 0)
    return cfg.n_layers * 2 * cfg.n_kv_heads * per_row


def engine_precisions(name: str) -> tuple[bool, bool]:
    """(fp4 weights, fp4 kv)."""
    mode, sites = ENGINES[name][0], ENGINES[name][1]
    fp4 = mode == "fp4_rollout"
    return fp4, fp4 and "attn/kv" in sites


def weight_bytes(cfg, fp4_w: bool, fmt: str) -> float:
    c = param_count(cfg, fmt)
    return float(c["fp4_bytes"] if fp4_w else c["bf16_bytes"])


def size_batch(cfg_full, fp4_w, fp4_kv, context, args) -> tuple[int, dict]:
    """Largest batch whose weights + KV + workspace fit ``--hbm_gb`` (full-depth shapes)."""
    W = weight_bytes(cfg_full, fp4_w, args.fmt)
    kv_tok = kv_bytes_per_token(cfg_full, fp4_kv, args.fmt)
    E, Md, F = cfg_full.n_experts, cfg_full.d_model, cfg_full.d_expert
    # transient: one layer's routed experts dequantized to bf16 (the FP4 path through ragged_dot)
    layer_tmp = 3 * E * Md * F * 2 if fp4_w else 0
    fixed = args.workspace_gb * GB + layer_tmp
    per_seq = context * kv_tok + cfg_full.vocab_size * 4 * 2 + 64 * Md * 4  # KV + f32 logits + acts
    b = int((args.hbm_gb * GB - W - fixed) // per_seq)
    b = max(0, min(b, args.max_batch))
    return b, {"weights_bytes": W, "kv_bytes_per_token": kv_tok, "workspace_bytes": fixed,
               "per_seq_bytes": per_seq}


# --------------------------------------------------------------------------------------------
# Random state on the device


_SCALE_BYTES = {  # random block-scale bytes: finite, moderate
    jnp.dtype(jnp.float8_e4m3fn): (0x28, 0x39),  # 0.25 .. 1.125
    jnp.dtype(jnp.float8_e8m0fnu): (120, 128),  # 2^-7 .. 2^0
}


def _gen_leaf(k, shape, dt, role):
    """Random contents for one leaf, generated in its target dtype (no f32 copy of a weight)."""
    if role == "ones":
        return jnp.ones(shape, dt)
    if role == "mgpu_scales":  # the "mgpu" cache layout's scale codes: 1 (uint8) or 4 per word
        from pallas_kernels.mgpu_layout import scale_codes

        lo, hi = _SCALE_BYTES[jnp.dtype(jnp.float8_e4m3fn)]
        n = 4 if dt == jnp.uint32 else 1
        c = scale_codes(jax.random.randint(k, shape + (n,), lo, hi, jnp.int32)).astype(dt)
        return functools.reduce(jnp.bitwise_or, [c[..., i] << (8 * i) for i in range(n)])
    if dt in (jnp.uint8, jnp.uint32):  # packed FP4 codes: any bits are valid codes
        return jax.random.bits(k, shape, dt)
    if dt in _SCALE_BYTES:
        lo, hi = _SCALE_BYTES[dt]
        return jax.lax.bitcast_convert_type(
            jax.random.randint(k, shape, lo, hi, jnp.int32).astype(jnp.uint8), dt)
    if dt == jnp.float32:  # global scales
        lo, hi = (0.002, 0.006) if role == "weight" else (0.05, 0.15)
        return jax.random.uniform(k, shape, jnp.float32, lo, hi)
    std = 0.02 if role == "weight" else 1.0
    return (jax.random.normal(k, shape, dt) * jnp.asarray(std, dt)).astype(dt)


@functools.lru_cache(maxsize=None)
def _leaf_generator(shape, dt, role):
    return jax.jit(lambda k: _gen_leaf(k, shape, dt, role))


@functools.lru_cache(maxsize=None)
def _tree_generator(specs):
    return jax.jit(lambda k: [_gen_leaf(jax.random.fold_in(k, i), *sp) for i, sp in enumerate(specs)])


def random_tree(structs, key, role_of):
    """A pytree of random device arrays shaped like ``structs`` (ShapeDtypeStruct leaves).

    Small trees are generated by one jitted call (few compiles: the CPU smoke run), large ones
    leaf by leaf (one generator per distinct shape, so no more than one leaf's transients live)."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(structs)
    specs = tuple((tuple(s.shape), jnp.dtype(s.dtype), role_of(jax.tree_util.keystr(p)))
                  for p, s in leaves)
    total = sum(math.prod(sp[0]) * sp[1].itemsize for sp in specs)
    if total < (1 << 30):
        arrs = _tree_generator(specs)(key)
    else:
        arrs = [_leaf_generator(*sp)(jax.random.fold_in(key, i)) for i, sp in enumerate(specs)]
    out = jax.tree_util.tree_unflatten(treedef, arrs)
    jax.block_until_ready(out)
    return out


def _global_role(fmt, role):
    return role if Q.get_format(fmt).has_global_scale else "ones"  # MXFP4: global scale is 1


def param_structs(cfg: M.ModelConfig, numerics: nx.Numerics) -> dict:
    """Rollout params as ``pack_params`` lays them out (bf16; FP4 QTensor routed experts)."""
    fp4_experts = numerics.mode == "fp4_rollout" and numerics.quantizes(
        nx.site_name(0, "moe/expert_weights"))

    def build(tree, path):
        res = {}
        for k, v in tree.items():
            if isinstance(v, dict):
                res[k] = build(v, path + (k,))
            elif fp4_experts and path[-1:] == ("moe",) and k in EXPERT_LEAVES:
                res[k] = jax.eval_shape(lambda s=v[0]: nx.quantize_weight(
                    jnp.zeros(s, jnp.float32), numerics.fmt))
            else:
                res[k] = jax.ShapeDtypeStruct(v[0], jnp.bfloat16)
        return res

    return build(M.param_shapes(cfg), ())


def random_params(cfg: M.ModelConfig, numerics: nx.Numerics, key) -> dict:
    def role(path):
        if "norm" in path:
            return "ones"
        if path.endswith("global_scale"):
            return _global_role(numerics.fmt, "weight")
        return "weight"

    return random_tree(param_structs(cfg, numerics), key, role)


def to_kernel_layout(params: dict, enabled: bool | str, per_layer: bool = True) -> dict:
    """What ``sync_weights(kernel_layout=enabled)`` produces: FP4 routed experts repacked for a
    Pallas grouped matmul (``enabled``: True / "auto", "triton" or "mosaic") and (``per_layer``)
    the layers as a per-layer tuple (``model.unstack_layers``: no per-step copy of a stacked
    weight's slice before a Pallas call). bf16 params only change layout. ``enabled=False``:
    unchanged."""
    kernel = M.expert_kernel(enabled)
    if kernel is None:
        return params
    moe_p = params["layers"]["moe"]
    if isinstance(moe_p["w_gate"], Q.QTensor):
        from pallas_kernels.fp4_matmul import prepare_expert_weights

        conv = jax.jit(jax.vmap(functools.partial(prepare_expert_weights, kernel=kernel)))
        moe_p = dict(moe_p, **{k: conv(moe_p[k]) for k in EXPERT_LEAVES})
        params = dict(params, layers=dict(params["layers"], moe=moe_p))
    if per_layer:
        params = unstack_freeing(params)
    return params


@functools.lru_cache(maxsize=None)
def _leaf_splitter(n_layers: int):
    return jax.jit(lambda a: tuple(a[l] for l in range(n_layers)))


def unstack_freeing(params: dict, host_above_bytes: int = 1 << 30) -> dict:
    """``model.unstack_layers(params)`` one stacked leaf at a time, each deleted once split, so
    the device holds at most one leaf twice (a jitted ``unstack_layers`` has every weight as
    both input and output: XLA warned of 122 GB for the 30B shape in bf16 on an 80 GB card). A
    single-device leaf above ``host_above_bytes`` (the bf16 experts: 19 GB each) goes through
    host memory, so it is never there twice; the rest are split on the device. Consumes
    ``params``: its stacked layer arrays are deleted."""
    layers = params["layers"]
    if isinstance(layers, (tuple, list)):
        return dict(params, layers=tuple(layers))
    leaves, treedef = jax.tree.flatten(layers)
    n = leaves[0].shape[0]
    per_leaf = []
    for i, a in enumerate(leaves):
        if a.nbytes > host_above_bytes and isinstance(a.sharding, jax.sharding.SingleDeviceSharding):
            host, device = np.asarray(a), a.sharding
            a.delete()
            per_leaf.append(tuple(jax.device_put(host[l], device) for l in range(n)))
            del host
        else:  # (a sharded leaf keeps its per-layer sharding this way)
            per_leaf.append(jax.block_until_ready(_leaf_splitter(n)(a)))
            a.delete()
        leaves[i] = None
    per_layer = tuple(jax.tree.unflatten(treedef, list(ls)) for ls in zip(*per_leaf))
    return dict(params, layers=per_layer)


def packed_expert_kernel(params: dict) -> str:
    """"mosaic" or "triton": the FP4 grouped kernel whose layout the packed experts are in."""
    w = M.layer_params(params, 0)["moe"]["w_gate"]
    from pallas_kernels.fp4_matmul_mgpu import MgpuWeights

    return "mosaic" if isinstance(w, MgpuWeights) else "triton"


def random_cache(cfg, numerics, batch, slots, key):
    """A full cache with random, valid contents (every slot written; block scales finite and
    moderate in every layout)."""
    structs = jax.eval_shape(lambda: attention.init_cache(cfg, numerics, batch, slots))

    def role(path):
        if path.endswith("global_scale"):
            return _global_role(numerics.fmt, "cache")
        return "mgpu_scales" if path.endswith(("k_scales", "v_scales")) else "cache"
    return random_tree(structs, key, role)


def tree_nbytes(tree) -> int:
    """Device bytes (FP4 codes are uint8 here, so nbytes is exact)."""
    return int(sum(a.nbytes for a in jax.tree.leaves(tree)))


# --------------------------------------------------------------------------------------------
# Timing


@contextlib.contextmanager
def attention_backend(kind: str):
    """Swap ops.decode_attention for the plain-XLA reference while tracing (``reference``)."""
    if kind != "reference":
        yield
        return
    orig = ops.decode_attention
    ops.decode_attention = ops.decode_attention_reference
    try:
        yield
    finally:
        ops.decode_attention = orig


@contextlib.contextmanager
def routed_grouped_matmul(route):
    """While tracing, ``ops.grouped_matmul(x, w, gs)`` calls ``route(x, w, gs)`` first; a None
    result falls back to the original."""
    orig = ops.grouped_matmul

    def gm(x, w, gs):
        out = route(x, w, gs)
        return orig(x, w, gs) if out is None else out

    ops.grouped_matmul = gm
    try:
        yield
    finally:
        ops.grouped_matmul = orig


def require_attention_kernels(attn: str) -> None:
    """On a GPU an engine whose attention is ``kernel`` must run the Pallas kernels:
    ``ops.decode_attention`` falls back to the XLA reference, silently, when the kernel's module
    does not import, and the row would time XLA attention under the kernel's name."""
    if attn != "kernel" or jax.default_backend() != "gpu":
        return
    need = [("decode_attention", "decode_attention")]
    if attention.FP4_CACHE_LAYOUT == "mgpu":
        need.append(("attention_mgpu", "decode_attention_mgpu"))
    missing = [f"pallas_kernels.{m}.{n}" for m, n in need if ops._kernel(m, n) is None]
    if missing:
        raise RuntimeError(f"attention kernel(s) {missing} do not import on this GPU: the "
                           "engine would time the XLA reference")


def bf16_kernel_matmul(enabled: bool):
    """Route bf16 expert weights through pallas_kernels.fp4_matmul.bf16_grouped_matmul (the
    Pallas grouped kernel; ``--kernel_layout``: the BF16 engine gets our fastest expert matmul
    too, so the FP4 ratio is not against a weak baseline), or, disabled, through plain
    ``jax.lax.ragged_dot`` (what the ``ragged_dot`` rows name; ops.grouped_matmul itself would
    pick the Pallas kernel on GPU)."""
    from pallas_kernels import fp4_matmul as FM

    def route(x, w, gs):
        if isinstance(w, jax.Array) and w.dtype == jnp.bfloat16:
            backend = "auto" if enabled else "reference"
            return FM.bf16_grouped_matmul(x, w, gs, backend=backend).astype(x.dtype)
        return None

    return routed_grouped_matmul(route)


def expert_backend(name: str, kernel_layout: bool) -> str:
    """How an engine's routed-expert matmuls run (a table column)."""
    fp4_w, _ = engine_precisions(name)
    if fp4_w:  # dequantized QTensor weights take ops.grouped_matmul's bf16 path
        gpu = jax.default_backend() == "gpu"
        return "pallas fp4" if kernel_layout else ("dequant+pallas bf16" if gpu else
                                                   "dequant+ragged_dot")
    return "pallas bf16" if kernel_layout and ENGINES[name][4] == "kernel" else "ragged_dot"


def sync(x):
    return jax.block_until_ready(x)


def time_calls(fn, n, warmup=2):
    for _ in range(warmup):
        sync(fn())
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        sync(fn())
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def copy_passes(passes: int):
    """A jitted ``passes`` elementwise passes ``a * 1.0001 + 1`` over an array, each its own
    kernel: without the optimization barrier between them XLA fuses them into one pass."""
    if passes < 1:
        raise ValueError(f"passes must be >= 1, got {passes}")

    @jax.jit
    def f(a):
        for _ in range(passes):
            a = jax.lax.optimization_barrier(a * 1.0001 + 1.0)
        return a

    return f


def copy_bandwidth(nbytes: int, reps: int, passes: int = 32) -> float:
    """Read+write bandwidth of an elementwise pass over an f32 array (bytes/s), timed as the
    decode steps are: ``passes`` passes per jitted call (an optimization barrier after each, so
    XLA cannot fuse them into one), time per pass = the median call's time / ``passes``. The
    steps' calls (``--loop`` steps, tens of ms and more) spread the per-call launch and sync
    cost over their steps; one synced call per pass (``passes=1``, what this measured before)
    charges all of it to a ~0.5 ms pass and read 2.2-3.3 TB/s on GPUs whose device-time copy is
    3.0-4.3 TB/s, so the steps' % copy came out at 100-123%."""
    n = nbytes // 4
    f = copy_passes(passes)
    x = jax.jit(lambda k: jax.random.uniform(k, (n,), jnp.float32))(jax.random.PRNGKey(1))
    t = time_calls(lambda: f(x), reps, warmup=3) / passes
    del x
    return 2 * n * 4 / t


def mem_stats() -> dict:
    try:
        s = jax.devices()[0].memory_stats() or {}
    except Exception:  # noqa: BLE001
        s = {}
    return {"bytes_in_use": s.get("bytes_in_use"), "peak_bytes_in_use": s.get("peak_bytes_in_use"),
            "bytes_limit": s.get("bytes_limit")}


def decode_step(cfg, numerics, capture):
    """One greedy decode step (params, cache, tok_B, pos_B) -> (next tok, experts, hints, cache)."""
    def step(params, cache, tok_B, pos_B):
        logits, aux, cache = M.forward(params, tok_B[:, None], cfg=cfg, numerics=numerics,
                                       cache=cache, positions_BxT=pos_B[:, None],
                                       capture_hints=capture)
        nxt = jnp.argmax(logits[:, 0], axis=-1).astype(jnp.int32)
        return nxt, aux.experts, aux.hints, cache

    return step


def make_step(cfg, numerics, capture):
    """``decode_step`` jitted as the engine's rollout is (``numerics.COMPILER_OPTIONS``), cache
    donated: one synced call per step (``--loop 1``)."""
    return jax.jit(decode_step(cfg, numerics, capture), donate_argnums=(1,),
                   compiler_options=nx.COMPILER_OPTIONS)


def make_loop(cfg, numerics, capture, n_steps):
    """``--loop``: ``n_steps`` decode steps in one jitted ``lax.fori_loop`` (as the engine runs
    them, inside ``rollout._generate``'s while loop): no per-step dispatch, fixed buffers. Every
    sequence stays at the same position (as in the per-call timing); each step's experts and
    hints are carried, so nothing of the step is dead code."""
    step = decode_step(cfg, numerics, capture)

    def run(params, cache, tok_B, pos_B):
        shapes = jax.eval_shape(step, params, cache, tok_B, pos_B)
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), (shapes[1], shapes[2]))

        def body(_, c):
            cache, tok, _, _ = c
            nxt, ex, hints, cache = step(params, cache, tok, pos_B)
            return cache, nxt, ex, hints

        cache, tok, ex, hints = jax.lax.fori_loop(0, n_steps, body, (cache, tok_B) + zeros)
        return tok, ex, hints, cache

    return jax.jit(run, donate_argnums=(1,), compiler_options=nx.COMPILER_OPTIONS)


def touched_fraction(experts_LxBx1xK, n_experts) -> float:
    e = np.asarray(experts_LxBx1xK).reshape(experts_LxBx1xK.shape[0], -1)
    return float(np.mean([len(np.unique(r)) / n_experts for r in e]))


def step_bytes(cfg, params, batch, context, touched, kv_tok, fp4_w) -> dict:
    """Bytes one decode step must move (run-depth shapes): every dense weight, the touched
    fraction of the routed experts, the batch's embedding rows -- or, with tied embeddings, the
    whole embedding, which the lm_head reads -- and the KV cache."""
    dense = expert = 0
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        names = [getattr(p, "key", getattr(p, "name", None)) for p in path]
        n = leaf.nbytes
        if "embed" in names:
            continue
        if "moe" in names and any(k in names for k in EXPERT_LEAVES) and "shared" not in names:
            expert += n
        else:
            dense += n
    if getattr(cfg, "tie_embeddings", False):  # the lm_head is the embedding: read whole
        embed_rows = int(params["embed"].nbytes)
    else:
        embed_rows = batch * cfg.d_model * 2
    w = dense + expert * touched + embed_rows
    kv = batch * context * kv_tok
    return {"dense_weight_bytes": dense, "expert_weight_bytes_all": expert,
            "weight_bytes_touched": w, "kv_read_bytes": kv, "total_bytes": w + kv}


def run_engine(name, cfg_run, cfg_full, context, batch, args, key, copy_bw, want_breakdown):
    mode, sites, hsites, capture, attn = ENGINES[name]
    require_attention_kernels(attn)
    numerics = nx.make_numerics(mode, cfg_run.n_layers, fmt=args.fmt, sites=sites,
                                hint_sites=hsites).with_attention_p(args.attn_p_precision)
    fp4_w, fp4_kv = engine_precisions(name)
    experts_via = expert_backend(name, args.kernel_layout)
    row = {"engine": name, "context": context, "batch": batch, "capture_hints": capture,
           "attention": attn, "experts_via": experts_via,
           "layers_layout": "stacked" if args.stacked or not args.kernel_layout else "per-layer", "fp4_weights": fp4_w, "fp4_kv": fp4_kv}
    params = to_kernel_layout(random_params(cfg_run, numerics, jax.random.fold_in(key, 1)),
                              args.kernel_layout and args.expert_kernel, not args.stacked)
    if experts_via == "pallas fp4":  # which grouped kernel the packed layout selects
        row["experts_via"] = experts_via = f"pallas fp4 {packed_expert_kernel(params)}"
    cache = random_cache(cfg_run, numerics, batch, context, jax.random.fold_in(key, 2))
    row["params_bytes_run"] = tree_nbytes(params)
    row["cache_bytes_run"] = tree_nbytes(cache)
    tok = jax.random.randint(jax.random.fold_in(key, 3), (batch,), 0, cfg_run.vocab_size, jnp.int32)
    pos = jnp.full((batch,), context - 1, jnp.int32)  # lengths after the write = context
    loop = max(1, args.loop)
    step = make_loop(cfg_run, numerics, capture, loop) if loop > 1 else make_step(
        cfg_run, numerics, capture)
    row["steps_per_call"] = loop
    t0 = time.perf_counter()
    with attention_backend(attn), bf16_kernel_matmul(experts_via == "pallas bf16"):
        compiled = step.lower(params, cache, tok, pos).compile()
    row["compile_s"] = time.perf_counter() - t0
    try:
        ma = compiled.memory_analysis()
        row["step_temp_bytes"] = int(ma.temp_size_in_bytes)
    except Exception:  # noqa: BLE001
        row["step_temp_bytes"] = None

    state = {"cache": cache, "tok": tok}
    experts = None

    def one():
        nonlocal experts
        nxt, ex, hints, c = compiled(params, state["cache"], state["tok"], pos)
        state["cache"], state["tok"] = c, nxt
        experts = ex
        return nxt, c, hints

    for _ in range(max(1, args.warmup // loop)):
        sync(one())
    ts = []
    for _ in range(max(2, -(-args.steps // loop))):
        t1 = time.perf_counter()
        sync(one())
        ts.append((time.perf_counter() - t1) / loop)
    t = statistics.median(ts)
    touched = touched_fraction(experts, cfg_run.n_experts)
    kv_tok = kv_bytes_per_token(cfg_run, fp4_kv, args.fmt)
    by = step_bytes(cfg_run, params, batch, context, touched, kv_tok, fp4_w)
    row.update(step_s=t, step_s_min=min(ts), calls_timed=len(ts), steps_timed=len(ts) * loop,
               tokens_per_s=batch / t,
               experts_touched_frac=touched, **by,
               achieved_Bps=by["total_bytes"] / t, pct_copy=100 * by["total_bytes"] / t / copy_bw)
    ms = mem_stats()
    row["mem_bytes_in_use"] = ms["bytes_in_use"]
    row["mem_peak_process"] = ms["peak_bytes_in_use"]
    if ms["bytes_in_use"] is not None and row["step_temp_bytes"] is not None:
        row["mem_peak_est"] = ms["bytes_in_use"] + row["step_temp_bytes"]

    if args.profile_steps:
        row["profile"] = profile_step(one, name, context, args)
    if want_breakdown:
        with bf16_kernel_matmul(experts_via == "pallas bf16"):
            row["breakdown"] = breakdown(cfg_run, numerics, params, state["cache"], experts,
                                         batch, context, attn, args, t, key)
    del params, cache, state, compiled
    return row


def profile_step(one, name, context, args) -> dict:
    """``--profile_steps``: trace that many steps and write the per-kernel device time table to
    ``{--out}/profile/{engine}_{context}.md`` (and .json); return the summary's totals."""
    from experiments import profile_summary as PS

    d = Path(args.out) / "profile"
    loop = max(1, args.loop)
    s = PS.profile_calls(one, max(1, args.profile_steps // loop), str(d / f"trace_{name}_{context}"),
                         units_per_call=loop)
    md = PS.render_md(s, top=30, title=f"{name} @ {context}: ")
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}_{context}.md").write_text(md)
    (d / f"{name}_{context}.json").write_text(json.dumps(s, indent=1))
    print(md, flush=True)
    return {"busy_ms": s["busy_ns_per_call"] / 1e6, "wall_ms": s["wall_ns_per_call"] / 1e6,
            "launches": s["launches_per_call"], "top": s["rows"][:12]}


def breakdown(cfg, numerics, params, cache, experts, batch, context, attn, args, t_step, key):
    """Attention / routed-expert matmuls / rest of the step, on the step's shapes and data."""
    L, H, D, k, Md = cfg.n_layers, cfg.n_heads, cfg.head_dim, cfg.top_k, cfg.d_model
    q = jax.random.normal(jax.random.fold_in(key, 7), (L, batch, H, D), jnp.bfloat16)
    lengths = jnp.full((batch,), context, jnp.int32)

    def attn_all(q, cache, lengths):
        return jnp.stack([ops.decode_attention_mgpu(q[l], cache[l]["kv"], lengths)
                          if "kv" in cache[l] else
                          ops.decode_attention(q[l], cache[l]["k"], cache[l]["v"], lengths,
                                               p_precision=numerics.attention_p)
                          for l in range(L)])

    with attention_backend(attn):
        fa = jax.jit(attn_all).lower(q, cache, lengths).compile()
    t_attn = time_calls(lambda: fa(q, cache, lengths), args.steps)

    ex = jnp.asarray(experts).astype(jnp.int32).reshape(L, batch * k)
    gs = jax.vmap(lambda e: jnp.bincount(e, length=cfg.n_experts))(ex).astype(jnp.int32)
    xs = jax.random.normal(jax.random.fold_in(key, 8), (L, batch * k, Md), jnp.bfloat16)
    # per-layer weights as separate arrays (the step's per-layer layout; with --stacked these are
    # slices taken here, outside the timed call, so this times the matmuls without the copies)
    moe_w = tuple({w: M.layer_params(params, l)["moe"][w] for w in EXPERT_LEAVES} for l in range(L))

    def experts_all(xs, w, gs):
        outs = []
        for l in range(L):
            wl = w[l]
            g = ops.grouped_matmul(xs[l], wl["w_gate"], gs[l]).astype(jnp.float32)
            u = ops.grouped_matmul(xs[l], wl["w_up"], gs[l]).astype(jnp.float32)
            h = (jax.nn.silu(g) * u).astype(jnp.bfloat16)
            outs.append(ops.grouped_matmul(h, wl["w_down"], gs[l]))
        return jnp.stack(outs)

    fe = jax.jit(experts_all).lower(xs, moe_w, gs).compile()
    t_exp = time_calls(lambda: fe(xs, moe_w, gs), args.steps)
    out = {"attention_s": t_attn, "experts_s": t_exp, "rest_s": t_step - t_attn - t_exp,
           "step_s": t_step}
    if isinstance(moe_w[0]["w_gate"], Q.QTensor) and jax.default_backend() == "gpu":
        try:
            # the weights packed for the kernel once, outside the timed call (as sync_weights
            # does per weight sync); repacking every expert inside it would time the repack too
            from pallas_kernels.fp4_matmul import prepare_weights

            pack = jax.jit(prepare_weights)
            moe_k = tuple({w: pack(wl[w]) for w in EXPERT_LEAVES} for wl in moe_w)
            fk = jax.jit(experts_all).lower(xs, moe_k, gs).compile()
            out["experts_fp4_kernel_s"] = time_calls(lambda: fk(xs, moe_k, gs), args.steps)
        except Exception as e:  # noqa: BLE001
            out["experts_fp4_kernel_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return out


def prefill(cfg, name, length, args, key):
    mode, sites, hsites, capture, _ = ENGINES[name]
    numerics = nx.make_numerics(mode, cfg.n_layers, fmt=args.fmt, sites=sites, hint_sites=hsites)
    params = to_kernel_layout(random_params(cfg, numerics, jax.random.fold_in(key, 11)),
                              args.kernel_layout and args.expert_kernel, not args.stacked)
    toks = jax.random.randint(jax.random.fold_in(key, 12), (1, length), 0, cfg.vocab_size, jnp.int32)

    @jax.jit
    def f(params, toks):
        cache = attention.init_cache(cfg, numerics, 1, length)
        logits, aux, cache = M.forward(params, toks, cfg=cfg, numerics=numerics, cache=cache,
                                       capture_hints=capture)
        return logits[:, -1], aux.hints, cache

    via = expert_backend(name, args.kernel_layout)
    with bf16_kernel_matmul(via == "pallas bf16"):
        c = f.lower(params, toks).compile()
    t = time_calls(lambda: c(params, toks), max(3, args.steps // 5), warmup=1)
    return {"engine": name, "prompt_len": length, "batch": 1, "experts_via": via, "step_s": t,
            "tokens_per_s": length / t}


# --------------------------------------------------------------------------------------------
# Report


def fmt_bytes(b):
    return "-" if b is None else f"{b / GB:.2f}"


def table(rows, copy_bw):
    lines = ["| engine | experts via | context | batch | step ms | tokens/s | x bf16 | experts "
             "touched | GB/step (w + kv) | TB/s | % copy | mem in use GB | step temp GB | compile s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    base = {r["context"]: r for r in rows if r["engine"] == "bf16" and "step_s" in r}
    for r in rows:
        if "step_s" not in r:
            lines.append(f"| {r['engine']} | {r.get('experts_via', '-')} | {r['context']} | "
                         f"{r.get('batch', '-')} | {r.get('error', 'skipped')} |||||||||")
            continue
        b = base.get(r["context"])
        x = f"{r['tokens_per_s'] / b['tokens_per_s']:.2f}" if b else "-"
        lines.append(
            f"| {r['engine']} | {r.get('experts_via', '-')} | {r['context']} | {r['batch']} | "
            f"{1e3 * r['step_s']:.2f} | {r['tokens_per_s']:.1f} | {x} | {100 * r['experts_touched_frac']:.0f}% | "
            f"{r['weight_bytes_touched'] / GB:.2f} + {r['kv_read_bytes'] / GB:.2f} | "
            f"{r['achieved_Bps'] / 1e12:.2f} | {r['pct_copy']:.1f} | {fmt_bytes(r['mem_bytes_in_use'])} | "
            f"{fmt_bytes(r['step_temp_bytes'])} | {r['compile_s']:.1f} |")
    return "\n".join(lines)


def evaluate_targets(rows, contexts):
    by = {(r["engine"], r["context"]): r for r in rows if "step_s" in r}
    res = []

    def ratio(c):
        a, b = by.get(("fp4", c)), by.get(("bf16", c))
        return None if not (a and b) else a["tokens_per_s"] / b["tokens_per_s"]

    unfit = {r["context"] for r in rows if r["engine"] == "bf16" and r.get("batch") == 0}
    for c, want in RATIO_TARGETS.items():
        got = ratio(c) if c in contexts else None
        if got is None and c in unfit and ("fp4", c) in by:  # an 80 GB card at 128K
            res.append({"target": f"fp4 tokens/s >= {want}x bf16 at {c}", "value": None,
                        "met": True, "shortfall": "met at this budget: by the sizing bf16 "
                                                  "does not fit one sequence, fp4 runs "
                                                  f"{by['fp4', c]['batch']}"})
            continue
        res.append({"target": f"fp4 tokens/s >= {want}x bf16 at {c}", "value": got,
                    "met": None if got is None else got >= want,
                    "shortfall": None if got is None else f"{got / want:.2f} of target ({want - got:+.2f}x missing)"
                    if got < want else "met"})
    for c in contexts:
        b = by.get(("bf16", c))
        if b:
            v = b["pct_copy"]
            res.append({"target": f"bf16 engine >= 70% of copy bandwidth at {c}", "value": v,
                        "met": v >= TARGETS["bf16_pct_copy"],
                        "shortfall": "met" if v >= 70 else f"{70 - v:.1f} points below"})
        h, n = by.get(("fp4", c)), by.get(("fp4_nohints", c))
        if h and n:
            v = 100 * (h["step_s"] - n["step_s"]) / h["step_s"]
            res.append({"target": f"hint capture <= 5% of the fp4 step at {c}", "value": v,
                        "met": v <= TARGETS["hint_overhead_pct"],
                        "shortfall": "met" if v <= 5 else f"{v - 5:.1f} points over"})
    return res


def byte_ceiling(rows, targets=None, peak_Bps=None) -> list[dict]:
    """Per context with both a ``bf16`` and an ``fp4`` row: how far the FP4/BF16 tokens/s ratio
    can go on bytes alone. Each engine's step moves ``total_bytes`` for ``batch`` tokens, so at
    equal achieved bandwidth the ratio is the BF16 engine's bytes per token over the FP4 one's
    (``ceiling_x``; FP4's larger batch touches more experts, which this counts). Also: the FP4
    engine's TB/s that a ratio target needs, and the ratio if the FP4 step streamed at
    ``peak_Bps`` (the HBM peak: no kernel can beat it) while the BF16 step stays as measured."""
    targets = targets or {}
    by = {(r["engine"], r["context"]): r for r in rows if "step_s" in r}
    out = []
    for c in sorted({ctx for _, ctx in by}):
        f, b = by.get(("fp4", c)), by.get(("bf16", c))
        if not (f and b):
            continue
        f_tok, b_tok = f["total_bytes"] / f["batch"], b["total_bytes"] / b["batch"]
        row = {"context": c, "bf16_bytes_per_token": b_tok, "fp4_bytes_per_token": f_tok,
               "ratio_x": f["tokens_per_s"] / b["tokens_per_s"], "ceiling_x": b_tok / f_tok,
               "fp4_Bps": f["achieved_Bps"], "bf16_Bps": b["achieved_Bps"]}
        row["share_of_ceiling"] = row["ratio_x"] / row["ceiling_x"]
        if peak_Bps:
            row["ceiling_x_at_peak"] = peak_Bps / f_tok / b["tokens_per_s"]
        if c in targets:
            row["target_x"] = targets[c]
            row["fp4_Bps_for_target"] = targets[c] * b["tokens_per_s"] * f_tok
        out.append(row)
    return out


DATASHEET_HBM_TBS = {"NVIDIA H200": 4.8, "NVIDIA H100 80GB HBM3": 3.35}  # SXM parts


def hbm_peak_Bps(tbs: float | None, device: str) -> float | None:
    """``--hbm_peak_tbs`` in B/s: the value given (0: none), else the datasheet peak of the
    device named ("platform:device_kind", exactly an H200 / H100 SXM), else none."""
    if tbs is None:
        tbs = DATASHEET_HBM_TBS.get(device.split(":", 1)[-1])
    return tbs * 1e12 if tbs else None


def ceiling_table(ceil, peak_Bps=None) -> str:
    peak = f"{peak_Bps / 1e12:.1f}" if peak_Bps else "-"
    lines = ["| context | GB per token bf16 / fp4 | fp4 / bf16 | ceiling at equal TB/s | "
             "share of it | TB/s fp4 / bf16 | target | fp4 TB/s the target needs | "
             f"ceiling with fp4 at {peak} TB/s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in ceil:
        need = r.get("fp4_Bps_for_target")
        lines.append(
            f"| {r['context']} | {r['bf16_bytes_per_token'] / GB:.3f} / "
            f"{r['fp4_bytes_per_token'] / GB:.3f} | {r['ratio_x']:.2f}x | {r['ceiling_x']:.2f}x | "
            f"{100 * r['share_of_ceiling']:.0f}% | {r['fp4_Bps'] / 1e12:.2f} / "
            f"{r['bf16_Bps'] / 1e12:.2f} | "
            + (f"{r['target_x']}x | {need / 1e12:.2f} |" if need else "- | - |")
            + (f" {r['ceiling_x_at_peak']:.2f}x |" if "ceiling_x_at_peak" in r else " - |"))
    return "\n".join(lines)


def breakdown_table(rows):
    lines = ["| engine | context | batch | step ms | attention ms (%) | expert matmuls ms (%) | "
             "rest ms (%) | experts via Pallas fp4 kernel ms |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = r.get("breakdown")
        if not b:
            continue
        s = b["step_s"]
        pc = lambda v: f"{1e3 * v:.2f} ({100 * v / s:.0f}%)"  # noqa: E731
        k = b.get("experts_fp4_kernel_s")
        kk = f"{1e3 * k:.2f}" if k is not None else b.get("experts_fp4_kernel_error", "-")
        lines.append(f"| {r['engine']} | {r['context']} | {r['batch']} | {1e3 * s:.2f} | "
                     f"{pc(b['attention_s'])} | {pc(b['experts_s'])} | {pc(b['rest_s'])} | {kk} |")
    return "\n".join(lines)


def write_outputs(out_dir: Path, res: dict, md: str, plot: bool):
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "rollout_throughput.json").write_text(json.dumps(res, indent=1, default=str))
    (out_dir / "rollout_throughput.md").write_text(md)
    if not plot:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no PNG written")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for eng in ENGINES:
        pts = sorted((r["context"], r["tokens_per_s"]) for r in res["rows"]
                     if r["engine"] == eng and "tokens_per_s" in r)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=eng)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("decode tokens/s")
    ax.set_title(f"{res['device']}: {res['model']}, {res['hbm_gb']} GB budget", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "rollout_throughput.png", dpi=120)
    plt.close(fig)


def attention_kernel_version(p_precision: str = "f32") -> str:
    """Which decode-attention kernel the engines run (on the GPU ``ops.decode_attention`` calls
    ``decode_attention_triton`` with its defaults and ``precision=p_precision``)."""
    import inspect

    from pallas_kernels.attention_triton import decode_attention_triton

    sig = inspect.signature(decode_attention_triton).parameters
    default = sig["decode"].default
    if default is None:  # chosen from the K cache layout and head_dim
        default = ("v6 (KV caches in the kv_words layout)"
                   if attention.FP4_CACHE_LAYOUT == "kv_words"
                   else "v4 (natural KV caches, head_dim % 8 == 0) else v3")
    from pallas_kernels import attention_triton

    tiling = ("default tiling" if attention_triton.SPLIT_TARGET is None
              else f"default tiling, split target {attention_triton.SPLIT_TARGET}")
    tiling += ", split combine " + attention_triton.SPLIT_COMBINE + ", launch order (P, H, B)"
    partials = attention_triton.PARTIAL_DTYPE
    tiling += ", partials " + ("the output dtype" if partials is None else jnp.dtype(partials).name)
    tiling += f", P in P.V {p_precision}"
    quantizer = nx.ACTIVATION_QUANTIZER
    if quantizer == "auto":
        quantizer = "auto: " + ("kernel" if nx.quantize_kernel_active() else "xla")
    tiling += ", activation quantizer " + quantizer
    if attention.FP4_CACHE_LAYOUT == "mgpu":  # FP4 caches; a bf16 engine's go to Triton
        return ("FP4 caches: attention_mgpu.decode_attention_mgpu (the mgpu cache layout, its "
                f"default knobs and split rule); bf16 caches: decode_attention_triton ({tiling})")
    return f"decode_attention_triton(decode={default!r}, {tiling})"


def rerender(src: Path, out_dir: Path, peak_tbs: float | None) -> dict:
    """A saved result's tables again, from its rows: the targets and the byte ceiling as this
    code computes them, with ``peak_tbs`` (default: the device's datasheet peak). The md says
    it was re-rendered and from where."""
    res = json.loads(src.read_text())
    res["hbm_peak_Bps"] = hbm_peak_Bps(peak_tbs, res.get("device", ""))
    res["targets"] = evaluate_targets(res["rows"], sorted({r["context"] for r in res["rows"]}))
    res["ceiling"] = byte_ceiling(res["rows"], RATIO_TARGETS, res["hbm_peak_Bps"])
    peak = f"{res['hbm_peak_Bps'] / 1e12:.2f} TB/s" if res["hbm_peak_Bps"] else "none"
    res.setdefault("notes", []).append(f"re-rendered from {src} (HBM peak {peak})")
    head, rest = render_md(res, res["copy_bw_Bps"]).split("\n", 1)
    md = f"{head}\n\nNote: {res['notes'][-1]}.\n{rest}"
    write_outputs(out_dir, res, md, plot=True)
    print(md)
    return res


def render_md(res, copy_bw):
    md = [f"# Rollout decode throughput: {res['device']} (jax {res['jax_version']})", "",
          f"command: `{res['command']}`", "",
          f"model: {res['model']}; HBM budget {res['hbm_gb']} GB for every engine (weights + KV + "
          f"workspace {res['workspace_gb']} GB + per-sequence logits/activations); batch sized for "
          f"{res['size_layers']} layers, run with {res['run_layers']} layers "
          + ("(reduced depth: per-layer state as in the full model; embedding/lm_head not scaled)"
             if res["size_layers"] != res["run_layers"] else "(full depth)") + ".", "",
          f"copy bandwidth (read+write, same run, "
          + (f"{res['copy_passes']} passes per timed call" if res.get("copy_passes")
             else "one synced call per pass") + f"): {copy_bw / 1e12:.3f} TB/s at start"
          + (f", {res['copy_bw_end_Bps'] / 1e12:.3f} TB/s at end" if res.get("copy_bw_end_Bps") else ""),
          "", f"attention kernel: {res.get('attention_kernel', 'not recorded')}.", "",
          f"at least {res['steps']} timed steps after {res['warmup']} warm-up steps, "
          + (f"{res['loop']} steps per jitted fori_loop call (median of >= 2 calls' time / "
             f"{res['loop']})"
             if res.get("loop", 1) > 1 else "one synced call per step (median)") + "; "
          "bytes = dense weights + touched routed experts (measured from the step's routing) + "
          "KV read.", "", table(res["rows"], copy_bw), ""]
    if res.get("prefill"):
        md += ["Prefill (one prompt, batch 1, full forward into an empty cache):", "",
               "| engine | prompt | ms | tokens/s |", "|---|---|---|---|"]
        md += [f"| {p['engine']} | {p['prompt_len']} | {1e3 * p['step_s']:.1f} | {p['tokens_per_s']:.0f} |"
               if "step_s" in p else f"| {p['engine']} | {p['prompt_len']} | {p.get('error')} | |"
               for p in res["prefill"]]
        md.append("")
    md += ["## Targets", "", "| target | value | met | by how much |", "|---|---|---|---|"]
    for t in res["targets"]:
        v = "-" if t["value"] is None else f"{t['value']:.2f}"
        md.append(f"| {t['target']} | {v} | {t['met']} | {t['shortfall'] or 'not measured'} |")
    if res.get("ceiling"):
        md += ["", "## Byte ceiling of the ratio", "", ceiling_table(res["ceiling"], res.get("hbm_peak_Bps")),
               "", "ceiling at equal TB/s = BF16 bytes per token / FP4 bytes per token (each engine's "
               "measured step bytes over its batch): the FP4/BF16 ratio if both engines streamed at "
               "the same bandwidth. The last column lets the FP4 step stream at the HBM peak "
               "(`--hbm_peak_tbs`) with the BF16 step as measured: no kernel gets past it."]
    bt = breakdown_table(res["rows"])
    if bt.count("\n") > 1:
        md += ["", "## Per-kernel breakdown of the step (same shapes and data)", "", bt, "",
               "attention = all layers' ops.decode_attention; expert matmuls = all layers' three "
               "ops.grouped_matmul calls + SwiGLU with the step's routing (the engine's experts: "
               "the Pallas grouped kernels with --kernel_layout, else dequantize + ragged_dot); rest = step - both (projections, router, sort, "
               "activation quantization, hint capture, cache write, lm_head). Attention and "
               "expert times are synced calls of their own and include per-call launch and host "
               "time, so rest can come out negative; --profile_steps gives device times."]
    return "\n".join(md) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(REPO / "configs/qwen3_30b_a3b.py"))
    ap.add_argument("--layers", type=int, default=0, help="run depth (0 = the config's)")
    ap.add_argument("--contexts", default="8192,32768,131072")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--hbm_gb", type=float, default=130.0)
    ap.add_argument("--workspace_gb", type=float, default=3.0)
    ap.add_argument("--max_batch", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--fmt", default="nvfp4")
    ap.add_argument("--prefill_len", type=int, default=8192, help="0 = skip prefill")
    ap.add_argument("--copy_gb", type=float, default=2.0)
    ap.add_argument("--copy_passes", type=int, default=32,
                    help="copy passes per timed call (time per pass = call / passes), so the "
                         "per-call launch and sync cost is spread as over the --loop steps; 1 = "
                         "one synced call per pass (how the committed rollout_throughput*.json "
                         "% copy columns were measured)")
    ap.add_argument("--hbm_peak_tbs", type=float, default=None,
                    help="the device's HBM peak in TB/s for the byte-ceiling table (default: the "
                         "datasheet's for an H200 / H100 SXM, else none; 0 = leave it out)")
    ap.add_argument("--breakdown", default="auto", choices=["auto", "always", "never"])
    ap.add_argument("--time_budget_s", type=float, default=0, help="skip what is left after this")
    ap.add_argument("--out", default=None, help="default experiments/results (--rerender: "
                                                   "required, so no saved table is overwritten)")
    ap.add_argument("--smoke", action="store_true", help="CPU: tiny shapes, 2 steps per engine")
    ap.add_argument("--profile_steps", type=int, default=0,
                    help="trace this many steps per engine: per-kernel device time under --out/profile")
    ap.add_argument("--kernel_layout", action="store_true",
                    help="FP4 experts through the Pallas grouped matmul (sync_weights(kernel_layout))")
    ap.add_argument("--expert_kernel", default="auto", choices=["auto", "triton", "mosaic"],
                    help="with --kernel_layout: the FP4 grouped kernel (rollout.expert_kernel; "
                         "auto: Mosaic GPU for nvfp4 experts with K, N multiples of 64)")
    ap.add_argument("--loop", type=int, default=None,
                    help="time calls of this many decode steps in one jitted fori_loop (the "
                         "engine's shape: no per-step dispatch); step time = call time / loop; "
                         "default 8 (1 with --smoke); 1 = one synced call per step")
    ap.add_argument("--stacked", action="store_true",
                    help="with --kernel_layout: keep the layers stacked (before session 6: each "
                         "step copies every layer's expert weights out for the Pallas calls)")
    ap.add_argument("--attn_split_target", type=int, default=0,
                    help="the Pallas decode attention's split target (programs B*H*splits it "
                         "aims for, >= 2 blocks per split; 0 = the kernel's default: "
                         "attention_triton.default_splits)")
    ap.add_argument("--attn_combine", default=None, choices=["kernel", "xla"],
                    help="the FP4 decode attention's split combine: a second Pallas kernel or "
                         "XLA's reduction (default: attention_triton.SPLIT_COMBINE)")
    ap.add_argument("--attn_partial_dtype", default=None, choices=["f32", "bf16"],
                    help="the FP4 / bf16 attention's split partials (attention_triton."
                         "PARTIAL_DTYPE; default f32)")
    ap.add_argument("--activation_quantizer", default="auto",
                    choices=list(nx.ACTIVATION_QUANTIZERS),
                    help="the FP4 rollout's activation-site quantizer (numerics."
                         "ACTIVATION_QUANTIZER): auto = the fused Pallas kernel on one GPU, xla")
    ap.add_argument("--kv_cache_layout", default="kv_words",
                    choices=list(attention.CACHE_LAYOUTS),
                    help="the FP4 KV caches' code layout: kv_words (attention.init_cache's "
                         "default, read by decode v6), natural (decode v4) or mgpu (NVFP4: "
                         "the Mosaic GPU kernel attention_mgpu)")
    ap.add_argument("--grouped_x_pad", default=None, choices=["pad", "nopad"],
                    help="on the rows x layout (--grouped_x_layout rows), the grouped Mosaic "
                         "expert kernel's x copied with the read pad or passed as it is "
                         "(fp4_matmul_mgpu.GROUPED_X_PAD; default nopad)")
    from pallas_kernels import fp4_matmul_mgpu

    ap.add_argument("--grouped_x_layout", default=None, choices=list(fp4_matmul_mgpu.X_LAYOUTS),
                    help="the grouped Mosaic expert kernel's x: the sorted rows or each "
                         "expert's rows at an 8-aligned offset (fp4_matmul_mgpu."
                         "GROUPED_X_LAYOUT; default rows since session 45, aligned in sessions 20-44)")
    ap.add_argument("--grouped_swiglu", default=None,
                    choices=["fused", "fused_overlap", "unfused"],
                    help="the MoE gate / up projections with Mosaic GPU weights: one kernel with "
                         "the SwiGLU in its epilogue (fused: one decoded tile live, the default; "
                         "fused_overlap: the up tile decoded under the gate wgmma, and so is the "
                         "next tile of any multi-tile program, the down projection's included; "
                         "fp4_matmul_mgpu.FUSED_SWIGLU / SERIAL_TILES) or two grouped calls")
    ap.add_argument("--grouped_tiles", default=None,
                    help="64-row weight tiles per grouped Mosaic program: 'default' "
                         "(fp4_matmul_mgpu.default_tiles) or a count, e.g. 1 "
                         "(fp4_matmul_mgpu.GROUPED_TILES)")
    ap.add_argument("--grouped_plan", default=None, choices=["kernel", "xla"],
                    help="the aligned x layout's bookkeeping: one Pallas Triton launch (the "
                         "default) or XLA ops (fp4_matmul_mgpu.ALIGNED_ROWS_KERNEL)")
    ap.add_argument("--attn_p_precision", default="f32", choices=["f32", "bf16"],
                    help="P in the decode attention's P.V: split into two bf16 terms (f32, the "
                         "default) or rounded once (the engines' Numerics.attention_p)")
    ap.add_argument("--ceiling_from", default=None, metavar="JSON",
                    help="print the byte-ceiling table of a saved rollout_throughput.json and "
                         "exit (no device work)")
    ap.add_argument("--rerender", default=None, metavar="JSON",
                    help="write a saved rollout_throughput.{json,md,png} again under --out with "
                         "this code's targets and byte ceiling (e.g. another --hbm_peak_tbs) and "
                         "exit (no device work)")
    args = ap.parse_args(argv)
    if args.rerender:
        if args.out is None:
            raise SystemExit("--rerender needs --out DIR (the default, experiments/results, holds "
                             "the headline tables)")
        return rerender(Path(args.rerender), Path(args.out), args.hbm_peak_tbs)
    args.out = args.out or str(REPO / "experiments/results")
    if args.ceiling_from:
        saved = json.loads(Path(args.ceiling_from).read_text())
        peak = hbm_peak_Bps(args.hbm_peak_tbs, saved.get("device", ""))
        ceil = byte_ceiling(saved["rows"], RATIO_TARGETS, peak)
        if not ceil:
            raise SystemExit(f"{args.ceiling_from}: no context with both a bf16 and an fp4 row")
        print(f"{saved.get('device')}: {saved.get('command')}\n\n{ceiling_table(ceil, peak)}")
        return {"ceiling": ceil}
    attention.FP4_CACHE_LAYOUT = args.kv_cache_layout
    if args.grouped_plan:
        fp4_matmul_mgpu.ALIGNED_ROWS_KERNEL = args.grouped_plan == "kernel"
    if args.grouped_tiles not in (None, "default"):
        if not args.grouped_tiles.isdigit() or int(args.grouped_tiles) < 1:
            raise SystemExit(f"--grouped_tiles takes 'default' or a positive count, got "
                             f"{args.grouped_tiles!r}")
        fp4_matmul_mgpu.GROUPED_TILES = int(args.grouped_tiles)
    if args.grouped_swiglu:
        fp4_matmul_mgpu.FUSED_SWIGLU = args.grouped_swiglu != "unfused"
        fp4_matmul_mgpu.SERIAL_TILES = args.grouped_swiglu != "fused_overlap"
    if args.grouped_x_pad:
        if args.grouped_x_layout != "rows":
            raise SystemExit("--grouped_x_pad applies to the rows layout: add "
                             "--grouped_x_layout rows")
        fp4_matmul_mgpu.GROUPED_X_PAD = args.grouped_x_pad == "pad"
    if args.grouped_x_layout:
        fp4_matmul_mgpu.GROUPED_X_LAYOUT = args.grouped_x_layout
    if args.attn_split_target < 0:
        raise SystemExit(f"--attn_split_target must be >= 0, got {args.attn_split_target}")
    from pallas_kernels import attention_triton

    if args.attn_combine:
        attention_triton.SPLIT_COMBINE = args.attn_combine
    nx.ACTIVATION_QUANTIZER = args.activation_quantizer
    if args.attn_partial_dtype:
        attention_triton.PARTIAL_DTYPE = {"f32": jnp.float32, "bf16": jnp.bfloat16}[
            args.attn_partial_dtype]
    if args.attn_split_target:
        attention_triton.SPLIT_TARGET = args.attn_split_target
    if args.loop is None:
        args.loop = 1 if args.smoke else 8
    if args.loop < 1:
        raise SystemExit(f"--loop must be >= 1, got {args.loop}")
    if args.smoke:
        args.config = str(REPO / "configs/tiny.py")
        args.contexts, args.steps, args.warmup = "64", 2, 1
        args.layers = args.layers or 1
        args.max_batch, args.prefill_len, args.copy_gb = min(args.max_batch, 4), 32, 0.004
    t_start = time.perf_counter()
    contexts = [int(c) for c in args.contexts.split(",") if c]
    engines = [e for e in args.engines.split(",") if e]
    for e in engines:
        if e not in ENGINES:
            raise SystemExit(f"unknown engine {e!r}; known: {list(ENGINES)}")
    cfg_full, cfg_run = load_model_config(args.config, args.layers or None,
                                          max(contexts + [args.prefill_len]) + 1)
    dev = jax.devices()[0]
    device = f"{dev.platform}:{getattr(dev, 'device_kind', '?')}"
    key = jax.random.PRNGKey(0)
    print(f"device {device}, jax {jax.__version__}, model {Path(args.config).stem} "
          f"({cfg_full.n_layers} layers sized, {cfg_run.n_layers} run)", flush=True)

    copy_bw = copy_bandwidth(int(args.copy_gb * (1 << 30)), max(5, args.steps), args.copy_passes)
    print(f"copy bandwidth {copy_bw / 1e12:.3f} TB/s", flush=True)
    res = {"command": " ".join([Path(sys.argv[0]).name] + (argv if argv is not None else sys.argv[1:])),
           "jax_version": jax.__version__, "device": device, "platform": dev.platform,
           "model": Path(args.config).stem, "model_config": dataclasses.asdict(cfg_run),
           "size_layers": cfg_full.n_layers, "run_layers": cfg_run.n_layers,
           "hbm_gb": args.hbm_gb, "workspace_gb": args.workspace_gb, "fmt": args.fmt,
           "steps": args.steps, "warmup": args.warmup, "loop": args.loop, "copy_bw_Bps": copy_bw,
           "copy_passes": args.copy_passes,
           "param_count": param_count(cfg_full, args.fmt), "sizing": {}, "rows": [], "prefill": [],
           "targets": [], "notes": [],
           "attention_kernel": attention_kernel_version(args.attn_p_precision),
           "hbm_peak_Bps": hbm_peak_Bps(args.hbm_peak_tbs, device)}
    out_dir = Path(args.out)

    def flush():
        res["targets"] = evaluate_targets(res["rows"], contexts)
        res["ceiling"] = byte_ceiling(res["rows"], RATIO_TARGETS, res["hbm_peak_Bps"])
        md = render_md(res, copy_bw)
        write_outputs(out_dir, res, md, plot=True)
        return md

    def over_budget():
        return args.time_budget_s and time.perf_counter() - t_start > args.time_budget_s

    for ctx in contexts:
        for eng in engines:
            fp4_w, fp4_kv = engine_precisions(eng)
            src = "bf16" if eng == "bf16_xla" else eng
            b, sz = size_batch(cfg_full, *engine_precisions(src), ctx, args)
            res["sizing"][f"{eng}@{ctx}"] = dict(sz, batch=b)
            if b < 1 or over_budget():
                res["rows"].append({"engine": eng, "context": ctx, "batch": b,
                                    "error": "does not fit" if b < 1 else "skipped (time budget)"})
                continue
            bd = args.breakdown == "always" or (args.breakdown == "auto" and eng in ("bf16", "fp4"))
            t0 = time.perf_counter()
            try:
                row = run_engine(eng, cfg_run, cfg_full, ctx, b, args, jax.random.fold_in(key, ctx),
                                 copy_bw, bd)
            except Exception as e:  # noqa: BLE001 - an OOM or kernel failure is a result row
                row = {"engine": eng, "context": ctx, "batch": b,
                       "error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}
            # the failed engine's frames (its weights and cache) must not stay alive into the
            # next one: an 80 GB card's first OOM otherwise made every later engine OOM too
            gc.collect()
            row["wall_s"] = time.perf_counter() - t0
            res["rows"].append(row)
            msg = (f"{eng:12s} ctx {ctx:7d} B {b:5d}: " + (
                f"{1e3 * row['step_s']:.2f} ms/step, {row['tokens_per_s']:.1f} tok/s, "
                f"{row['pct_copy']:.1f}% copy bw, compile {row['compile_s']:.1f}s"
                if "step_s" in row else row["error"]))
            print(msg, flush=True)
        flush()
    if args.prefill_len:
        for eng in ("bf16", "fp4"):
            if over_budget():
                res["prefill"].append({"engine": eng, "prompt_len": args.prefill_len,
                                       "error": "skipped (time budget)"})
                continue
            try:
                p = prefill(cfg_run, eng, args.prefill_len, args, key)
            except Exception as e:  # noqa: BLE001
                p = {"engine": eng, "prompt_len": args.prefill_len,
                     "error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}
            res["prefill"].append(p)
            print(f"prefill {eng}: {p}", flush=True)
    if not over_budget():
        res["copy_bw_end_Bps"] = copy_bandwidth(int(args.copy_gb * (1 << 30)), max(5, args.steps),
                                                args.copy_passes)
    res["wall_s"] = time.perf_counter() - t_start
    md = flush()
    print(md)
    return res


if __name__ == "__main__":
    main()
