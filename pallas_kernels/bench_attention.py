"""Issue 7's benchmark: decode attention over BF16 / NVFP4 / MXFP4 KV caches, KV append and the
fused quantize-with-hint kernel, each as the model runs it (one H200).

    PYTHONUNBUFFERED=1 python -m pallas_kernels.bench_attention [--out DIR] [--device-time]
        [--skip attention,long,qh,append] [--max-seconds S] [--tiny]

Protocol (../shared/docs/PERFORMANCE.md): random data, correctness against the pure-JAX reference
in the same run (relative error; NaN fails), warm-up, block_until_ready, median of >= 20 timed
calls, copy bandwidth measured in the same run (and, with ``--device-time``, each call's device
time from a profile against a copy measured the same way). Attention rows: GQA 32q/4kv,
head_dim 128, every sequence at the full context; KV bytes = the K and V bytes of the valid rows
(:func:`attention_triton.kv_bytes`). The kernels are the model's: FP4 caches in the ``kv_words``
layout that ``trace_jax.attention.init_cache`` makes, read by the default kernel version, tiling,
split rule and split combine. Baselines: the shipped
``jax.experimental.pallas.ops.gpu.decode_attention.gqa`` (bf16, its [B, S, H, D] layout) and our
bf16-cache kernel. Earlier kernel versions (v2..v5) are compared in ``bench_attention_v5`` and
``NOTES_attention.md``. Writes kernels_attention.{json,md} to --out; prints the markdown last.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import statistics
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels.attention_triton import decode_attention_triton, default_version, kv_bytes
from pallas_kernels.decode_attention import decode_attention_reference
from pallas_kernels.kv_append import append_kv
from pallas_kernels.kv_layout import to_kv_words, to_natural
from pallas_kernels.quantize_hint import quantize_with_hint_reference, quantize_with_hint_triton
from trace_jax import ops
from trace_jax.quant import dequantize, quantize

warnings.filterwarnings("ignore")
HQ, H, D = 32, 4, 128  # the Qwen3-30B-A3B attention: 32 query heads over 4 KV heads, head_dim 128
FORMATS = ("bf16", "nvfp4", "mxfp4")
KV_BUDGET = 36e9  # bf16 KV bytes allowed per attention row (all three caches live at once)
ROLLOUT_SHAPES = ((111, 32768), (27, 131072))  # the 30B rollout's batches at a 130 GB budget


def timeit(f, *args, reps=20, warm=2):
    for _ in range(warm):
        jax.block_until_ready(f(*args))
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def copy_bandwidth(n_floats):
    """Read + write bytes per second of an elementwise pass over an f32 array (wall time)."""
    x = jax.random.normal(jax.random.PRNGKey(0), (n_floats,), jnp.float32)
    t = timeit(jax.jit(lambda a: a * 1.0001), x, reps=10)
    return 2 * x.nbytes / t


def rel(a, b):
    """Relative L2 error of a against b in float64; NaN when a holds a non-finite value."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if not np.all(np.isfinite(a)):
        return float("nan")
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def model_cache(x_BxHxSxD, fmt):
    """A cache as the model holds it: bf16, or an FP4 QTensor (per-row global scale, block scales
    along head_dim) with its codes in the ``kv_words`` layout."""
    if fmt == "bf16":
        return x_BxHxSxD.astype(jnp.bfloat16)
    return jax.jit(lambda a: to_kv_words(quantize(a, fmt, axis=-1, global_scope="row")))(
        x_BxHxSxD)


def _first(tree, n, b):
    """The first ``n`` sequences of a cache (a QTensor's per-tensor leaves stay whole)."""
    return jax.tree.map(lambda a: a[:n] if a.shape[0] == b else a, tree)


class Bench:
    """One run's settings: interpret mode on CPU (``tiny``), device-time columns, the copy
    bandwidths (wall and device) the percentages are taken against."""

    def __init__(self, tiny: bool, device_time: bool):
        self.tiny, self.device_time = tiny, device_time
        self.attend = functools.partial(decode_attention_triton, interpret=tiny)
        self.quantize_hint = functools.partial(quantize_with_hint_triton, interpret=tiny)
        self.copy_Bps = copy_bandwidth(1 << (20 if tiny else 30))
        self.copy_device_Bps = None
        if device_time:
            from pallas_kernels.devtime import copy_bandwidth_device

            self.copy_device_Bps = copy_bandwidth_device(1 << (20 if tiny else 30))

    def timed(self, row, name, f, args, nbytes):
        """Wall time (and device time) of ``f(*args)`` into ``row[name + ...]``."""
        t = timeit(f, *args)
        row[f"{name}_us"] = t * 1e6
        row[f"{name}_pct_copy"] = 100 * nbytes / t / self.copy_Bps
        if self.device_time:
            from pallas_kernels.devtime import device_seconds

            td = device_seconds(f, *args)
            row[f"{name}_device_us"] = td * 1e6
            row[f"{name}_device_pct_copy"] = 100 * nbytes / td / self.copy_device_Bps
        return t

    def attention_row(self, b, s):
        """One (batch, context) row: the shipped bf16 kernel, then ours for each cache format."""
        from jax.experimental.pallas.ops.gpu import decode_attention as shipped

        kq, kk, kv = jax.random.split(jax.random.PRNGKey(s + b), 3)
        q = jax.random.normal(kq, (b, HQ, D), jnp.bfloat16)
        lengths = jnp.full((b,), s, jnp.int32)
        kx = jax.random.normal(kk, (b, H, s, D), jnp.bfloat16)
        vx = jax.random.normal(kv, (b, H, s, D), jnp.bfloat16)
        row = {"batch": b, "context": s}
        ks, vs = jnp.swapaxes(kx, 1, 2), jnp.swapaxes(vx, 1, 2)
        base = jax.jit(lambda q, k, v, L: shipped.gqa(q, k, v, kv_seq_len=L,
                                                      interpret=self.tiny))
        self.timed(row, "shipped_bf16", base, (q, ks, vs, lengths), kv_bytes(b, H, s, D, "bf16"))
        del ks, vs
        n = min(b, 2)  # the reference on the first 2 sequences (cheap at every shape)
        for fmt in FORMATS:
            kc, vc = model_cache(kx, fmt), model_cache(vx, fmt)
            f = jax.jit(lambda q, k, v, L: self.attend(q, k, v, L, sm_scale=D ** -0.5))
            out = f(q, kc, vc, lengths)
            ref = decode_attention_reference(q[:n], _first(kc, n, b), _first(vc, n, b),
                                             lengths[:n])
            row[f"{fmt}_relerr"] = rel(out[:n].astype(jnp.float32), ref.astype(jnp.float32))
            t = self.timed(row, fmt, f, (q, kc, vc, lengths), kv_bytes(b, H, s, D, fmt))
            row[f"{fmt}_vs_shipped"] = row["shipped_bf16_us"] / (t * 1e6)
            row[f"{fmt}_vs_our_bf16"] = row["bf16_us"] / (t * 1e6)
            if fmt != "bf16":
                row[f"{fmt}_decode"] = default_version(kc, vc)
            del kc, vc
        return row

    def long_context(self):
        """128K context (1K on --tiny), one full and one ragged sequence: the kernel against
        the f32 reference and against float64 numpy attention over the dequantized cache."""
        b, s = 2, (1024 if self.tiny else 131072)
        q = jax.random.normal(jax.random.PRNGKey(9), (b, HQ, D), jnp.bfloat16)
        lengths = jnp.asarray([s, s - 1001], jnp.int32)
        kx = jax.random.normal(jax.random.PRNGKey(10), (b, H, s, D), jnp.bfloat16)
        vx = jax.random.normal(jax.random.PRNGKey(11), (b, H, s, D), jnp.bfloat16)
        out = {}
        for fmt in FORMATS:
            kc, vc = model_cache(kx, fmt), model_cache(vx, fmt)
            got = self.attend(q, kc, vc, lengths, sm_scale=D ** -0.5, out_dtype=jnp.float32)
            ref = ops.decode_attention_reference(q.astype(jnp.float32), kc, vc, lengths)  # f32
            kf, vf = ((kx, vx) if fmt == "bf16" else  # the cache the kernel read, dequantized
                      (dequantize(to_natural(kc)), dequantize(to_natural(vc))))
            n = int(lengths[1])  # float64 on the host for sequence 1
            kf = np.asarray(kf[1, :, :n], np.float64)
            vf = np.asarray(vf[1, :, :n], np.float64)
            qf = np.asarray(q[1], np.float64).reshape(H, HQ // H, D)
            sc = np.einsum("hgd,hsd->hgs", qf, kf) / np.sqrt(D)
            p = np.exp(sc - sc.max(-1, keepdims=True))
            o64 = (np.einsum("hgs,hsd->hgd", p, vf) / p.sum(-1)[..., None]).reshape(HQ, D)
            out[fmt] = {"kernel_vs_ref": rel(got, ref), "kernel_vs_f64": rel(got[1], o64),
                        "ref_vs_f64": rel(ref[1], o64)}
            print("long", fmt, out[fmt], flush=True)
        return out

    def append_rows(self):
        """One new token per sequence written into a donated cache (the model's append)."""
        b, s = (2, 256) if self.tiny else (32, 32768)
        rows = []
        for fmt in FORMATS:
            cache = model_cache(jax.random.normal(jax.random.PRNGKey(4), (b, H, s, D)), fmt)
            new = jax.random.normal(jax.random.PRNGKey(5), (b, H, 1, D), jnp.bfloat16)
            pos = jnp.full((b,), s // 2, jnp.int32)
            step = jax.jit(append_kv, donate_argnums=0)
            for _ in range(3):
                cache = step(cache, new, pos)
            ts = []
            for _ in range(20):
                t = time.perf_counter()
                cache = jax.block_until_ready(step(cache, new, pos))
                ts.append(time.perf_counter() - t)
            rows.append({"fmt": fmt, "batch": b, "S": s, "append_us": statistics.median(ts) * 1e6,
                         "cache_MB": sum(x.nbytes for x in jax.tree.leaves(cache)) / 1e6})
            print("append", rows[-1], flush=True)
            del cache
        return rows

    def quantize_row(self, m, k, fmt, scope):
        """The fused quantize-with-hint kernel at its default knobs: time and bit identity of
        codes, block scales, global scales and hint bits against the XLA reference."""
        x = jax.random.normal(jax.random.PRNGKey(m + k), (m, k), jnp.float32)
        x = (x * jnp.exp(2 * jax.random.normal(jax.random.PRNGKey(1), (m, 1)))).astype(
            jnp.bfloat16)
        # edge rows: zeros, NaN, Inf, tiny values, the E2M1 ties and the saturation point
        x = x.at[0].set(0).at[1, 5].set(jnp.nan).at[2, 9].set(jnp.inf).at[3].set(1e-38)
        x = x.at[4, :8].set(jnp.asarray([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0],
                                        jnp.bfloat16))
        f = jax.jit(lambda x: self.quantize_hint(x, fmt, global_scope=scope))
        ref = jax.jit(lambda x: quantize_with_hint_reference(x, fmt, global_scope=scope))
        (qk, hk), (qr, hr) = f(x), ref(x)
        bits = lambda a: np.asarray(a).view(np.uint8 if a.dtype.itemsize == 1 else np.uint32)  # noqa: E731
        same = {"codes": np.array_equal(bits(qk.codes), bits(qr.codes)),
                "scales": np.array_equal(bits(qk.scales), bits(qr.scales)),
                "global": np.array_equal(bits(qk.global_scale), bits(qr.global_scale)),
                "hint_bits": np.array_equal(bits(hk.bits), bits(hr.bits))}
        block = 16 if fmt == "nvfp4" else 32
        # x read (twice for one global scale per tensor: its amax pass comes first), codes,
        # block scales, hint bits, global scales written
        reads = 2 if scope == "tensor" else 1
        nbytes = reads * m * k * 2 + m * k // 2 + m * k // block + m * k // 8 + 4 * m
        row = {"M": m, "K": k, "fmt": fmt, "scope": scope,
               "bit_identical": all(bool(v) for v in same.values()),
               "mismatch": [n for n, v in same.items() if not v]}
        self.timed(row, "kernel", f, (x,), nbytes)
        row["xla_ref_us"] = timeit(ref, x) * 1e6
        print("qh", json.dumps(row), flush=True)
        return row


def attention_shapes(tiny):
    """(batch, context) rows, most important first (a time limit keeps what ran): the rollout's
    shapes, then B 8 / 32 / 128 at 32K, 128K and 8K where the bf16 KV fits ``KV_BUDGET``."""
    if tiny:
        return [(2, 256)]
    grid = [(b, s) for s in (32768, 131072, 8192) for b in (8, 32, 128)]
    return [(b, s) for b, s in list(ROLLOUT_SHAPES) + grid if kv_bytes(b, H, s, D, "bf16") <= KV_BUDGET]


def out_of_memory(e: BaseException) -> bool:
    """Whether a JAX runtime error is the device running out of memory (XLA reports it as
    RESOURCE_EXHAUSTED, also inside an autotuning failure)."""
    return "RESOURCE_EXHAUSTED" in str(e) or "Out of memory" in str(e)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "experiments/results"))
    ap.add_argument("--tiny", action="store_true", help="CPU: tiny shapes, interpret mode")
    ap.add_argument("--skip", default="", help="comma list of: attention, long, qh, append")
    ap.add_argument("--max-seconds", type=float, default=1e9,
                    help="skip the remaining rows and sections once this much time has passed")
    ap.add_argument("--device-time", action="store_true",
                    help="also each call's device time (profile) vs a device-time copy")
    a = ap.parse_args(argv)
    skip = set(filter(None, a.skip.split(",")))
    if skip - {"attention", "long", "qh", "append"}:
        raise SystemExit(f"--skip: unknown sections {sorted(skip - {'attention', 'long', 'qh', 'append'})}")
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    bench = Bench(a.tiny, a.device_time)
    info = {"device": str(jax.devices()[0].device_kind), "jax": jax.__version__,
            "command": " ".join(["python -m pallas_kernels.bench_attention", *(argv or sys.argv[1:])]),
            "copy_TBps": bench.copy_Bps / 1e12,
            "copy_device_TBps": bench.copy_device_Bps and bench.copy_device_Bps / 1e12}
    print("copy bandwidth TB/s", info["copy_TBps"], "device time", info["copy_device_TBps"],
          flush=True)
    res = {"info": info, "skipped": []}

    def save():
        info["elapsed_s"] = time.time() - t0
        with open(os.path.join(a.out, "kernels_attention.json"), "w") as f:
            json.dump(res, f, indent=1)
        with open(os.path.join(a.out, "kernels_attention.md"), "w") as f:
            f.write(to_markdown(res))

    def in_time(what):
        if time.time() - t0 <= a.max_seconds:
            return True
        print("time budget spent: skipping", what, flush=True)
        res["skipped"].append(f"{what} (time budget)")
        return False

    def fits(what, run):
        """run(), or None where the device runs out of memory for it (a smaller card than the
        H200 the shapes were sized for): the row is skipped, named, and the rest still runs."""
        try:
            return run()
        except jax.errors.JaxRuntimeError as e:
            if not out_of_memory(e):
                raise
        print(f"out of device memory: skipping {what}", flush=True)
        res["skipped"].append(f"{what} (out of device memory)")
        gc.collect()
        return None

    if "attention" not in skip:
        res["attention"] = []
        for b, s in attention_shapes(a.tiny):
            if in_time(f"attention {b} x {s}") and (
                    row := fits(f"attention {b} x {s}", lambda: bench.attention_row(b, s))):
                res["attention"].append(row)
                print(json.dumps(row), flush=True)
                save()
    if "long" not in skip and in_time("long"):
        res["long_context"] = bench.long_context()
        save()
    if "qh" not in skip:
        res["quantize_hint"] = []
        shapes = ((64, 768), (16, 2048)) if a.tiny else ((8192, 2048), (32768, 2048), (65536, 4096))
        for m, k in shapes:
            for fmt, scope in (("nvfp4", "row"), ("mxfp4", "row"), ("nvfp4", "tensor")):
                if in_time(f"qh {m} x {k} {fmt}/{scope}"):
                    res["quantize_hint"].append(bench.quantize_row(m, k, fmt, scope))
                    save()
    if "append" not in skip and in_time("append"):
        res["append"] = bench.append_rows()
    save()
    print(to_markdown(res))
    return res


def _cell(r, f, ratios=True, dev=False):
    key = f"{f}_device" if dev else f
    if f"{key}_us" not in r:
        return "-"
    c = f"{r[key + '_us']:.0f} ({r[key + '_pct_copy']:.0f}%"
    if ratios:
        c += f", {r[f + '_vs_shipped']:.2f}x, {r[f + '_vs_our_bf16']:.2f}x"
    return c + ")"


def to_markdown(res):
    i = res["info"]
    lines = [f"# Decode attention / KV append / quantize-with-hint on {i['device']} "
             f"(jax {i['jax']})", "", f"command: `{i['command']}`", "",
             f"copy bandwidth (read + write, same run): {i['copy_TBps']:.2f} TB/s wall"
             + (f", {i['copy_device_TBps']:.2f} TB/s in device time" if i["copy_device_TBps"]
                else "") + ". GQA 32q/4kv heads, head_dim 128, every sequence at the full "
             "context; % copy = K and V bytes read / time / copy bandwidth.", ""]
    rows = res.get("attention") or []
    if rows:
        decode = {r.get("nvfp4_decode") for r in rows} | {r.get("mxfp4_decode") for r in rows}
        lines += [f"Wall time per call (us, % of copy; FP4 and our bf16: x the shipped bf16 "
                  f"kernel, x our bf16 kernel). FP4 caches in the `kv_words` layout, kernel "
                  f"{sorted(d for d in decode if d)} with its default tiling, split rule and "
                  f"split combine (the model's path).", "",
                  "| B | ctx | shipped bf16 | our bf16 | nvfp4 | mxfp4 | relerr bf16 / nvfp4 / mxfp4 |",
                  "|---|---|---|---|---|---|---|"]
        for r in rows:
            err = " / ".join(f"{r[f + '_relerr']:.1e}" for f in FORMATS)
            lines.append(f"| {r['batch']} | {r['context']} | {_cell(r, 'shipped_bf16', False)} | "
                         f"{_cell(r, 'bf16', False)} | {_cell(r, 'nvfp4')} | {_cell(r, 'mxfp4')} | "
                         f"{err} |")
        if any("nvfp4_device_us" in r for r in rows):
            lines += ["", "Device time per call (us, % of the device-time copy; a profile of "
                      "5 calls: the kernels only, no launch or host time):", "",
                      "| B | ctx | shipped bf16 | our bf16 | nvfp4 | mxfp4 | nvfp4 x shipped / x our bf16 |",
                      "|---|---|---|---|---|---|---|"]
            for r in rows:
                cells = " | ".join(_cell(r, f, False, dev=True)
                                   for f in ("shipped_bf16", *FORMATS))
                x = ("-" if "nvfp4_device_us" not in r else
                     f"{r['shipped_bf16_device_us'] / r['nvfp4_device_us']:.2f}x / "
                     f"{r['bf16_device_us'] / r['nvfp4_device_us']:.2f}x")
                lines.append(f"| {r['batch']} | {r['context']} | {cells} | {x} |")
    if "long_context" in res:
        lines += ["", "Long context (one sequence at the full length, one 1001 rows shorter; "
                  "relative L2 error, f32 output):", ""]
        for f, v in res["long_context"].items():
            lines.append(f"- {f}: " + ", ".join(f"{k} {x:.2e}" for k, x in v.items()))
    if res.get("quantize_hint"):
        dev = any("kernel_device_us" in r for r in res["quantize_hint"])
        lines += ["", "| quantize_with_hint M x K | fmt / scope | us (% copy) | "
                  + ("device us (% copy) | " if dev else "") + "XLA reference us | bit-identical |",
                  "|---|---|---|" + ("---|" if dev else "") + "---|---|"]
        for r in res["quantize_hint"]:
            d = f"{_cell(r, 'kernel', False, dev=True)} | " if dev else ""
            ok = "yes" if r["bit_identical"] else f"NO: {', '.join(r['mismatch'])}"
            lines.append(f"| {r['M']} x {r['K']} | {r['fmt']} / {r['scope']} | "
                         f"{_cell(r, 'kernel', False)} | {d}{r['xla_ref_us']:.1f} | {ok} |")
    if "append" in res:
        lines += ["", "append_kv (jit, donated cache, 1 new token per sequence):", ""]
        lines += [f"- {r['fmt']} B={r['batch']} S={r['S']} cache {r['cache_MB']:.0f} MB: "
                  f"{r['append_us']:.1f} us" for r in res["append"]]
    if res.get("skipped"):
        lines += ["", f"skipped: {res['skipped']}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
