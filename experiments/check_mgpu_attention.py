"""The Mosaic GPU FP4-KV attention kernel (``pallas_kernels.attention_mgpu``) on one GPU: its
output against the pure-JAX reference and the Triton v6 kernel, then device time of both against
a copy measured the same way.

  python experiments/check_mgpu_attention.py [--out DIR] [--shapes 32:8192,...] [--no-time]
      [--variants "K=V,K=V;..."] [--triton-variants "K=V;..."] [--no-triton | --no-mosaic]
      [--fmt mxfp4]
  python experiments/check_mgpu_attention.py --summary DIR/kernels_attention_mgpu.json

Per shape (GQA 32 q / 4 kv heads, head_dim 128, NVFP4 (or --fmt) caches from random data; the
sequence lengths cover 1, a non-multiple of 64 and the full context): relative error (Frobenius,
f32) of each kernel against ``decode_attention_reference`` on the natural caches, the largest
difference between each Mosaic variant and the Triton kernel, and (unless ``--no-time``) device
time per call (all the
call's kernels, ``devtime``) with % of copy over the K and V bytes of the rows each sequence
attends to (``valid_kv_bytes``: the sum of the lengths, not batch x context). The failing shape
or variant prints its error and the table goes on.
Writes ``kernels_attention_mgpu.{md,json}``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import traceback

import jax
import jax.numpy as jnp

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)
from pallas_kernels import attention_mgpu as AM  # noqa: E402
from pallas_kernels import attention_triton as AT  # noqa: E402
from pallas_kernels import devtime  # noqa: E402
from pallas_kernels import kv_layout as KL  # noqa: E402
from pallas_kernels import mgpu_kv_layout as MK  # noqa: E402
from pallas_kernels.attention_triton import decode_attention_triton, kv_bytes  # noqa: E402
from pallas_kernels.decode_attention import decode_attention_reference  # noqa: E402
from trace_jax import quant as Q  # noqa: E402

HQ, H, D = 32, 4, 128
SHAPES = ((4, 1024), (32, 8192), (32, 32768), (111, 32768))


_SHORT = {"sub": "s", "lazy_sum": "L", "steps": "k", "p_terms": "t", "fast_full": "F",
          "approx": "A", "no_auto_barriers": "N", "num_splits": "p"}
# The Triton v6 kernel's knobs (keywords of attention_triton.decode_attention_triton)
# (bf16_p=1: precision="bf16", P rounded to bf16 in P.V instead of the f32 hi + lo split;
# bf16_partials=1: the split partials in bf16, partial_dtype)
# fp4_split_target=N: the split count the FP4 rule (attention_triton.FP4_SPLIT_TARGET, with its row
# bounds) gives at N programs, as num_splits; split_target=N instead replaces the rule by the old
# one)
_TRITON_SHORT = {"num_splits": "p", "split_target": "T", "block_k": "b", "num_warps": "w",
                 "num_stages": "n", "bf16_p": "P", "late_vt": "V", "bf16_partials": "B",
                 "fp4_split_target": "F"}


def parse_variants(spec: str, known: dict = _SHORT) -> list[dict]:
    """'sub=2,lazy_sum=1;fast_full=1' -> [{'sub': 2, 'lazy_sum': 1}, {'fast_full': 1}] (integer
    values; an empty spec is one variant with the defaults); keywords not in ``known`` (the
    Mosaic kernel's by default) are refused."""
    out = []
    for entry in spec.split(";") if spec else [""]:
        kw = {}
        for item in filter(None, entry.split(",")):
            k, _, v = item.partition("=")
            if k not in known:
                raise SystemExit(f"unknown variant keyword {k!r} (known: {', '.join(known)})")
            if not v.lstrip("-").isdigit():
                raise SystemExit(f"variant keyword {k!r} needs an integer value, got {item!r}")
            kw[k] = int(v)
        out.append(kw)
    return out


def variant_name(kw: dict, known: dict = _SHORT) -> str:
    """A short column name: sub=2,lazy_sum=1,fast_full=1 -> 's2L1F1'."""
    return "".join(f"{known[k]}{v}" for k, v in kw.items()) or "default"


def summary_lines(path: str) -> list[str]:
    """A written sweep, three lines per shape: device us, % of copy and relerr per column."""
    import json

    with open(path) as f:
        d = json.load(f)
    out = [f"copy TB/s {d['copy_tbs']:.3f}"]
    for r in d["rows"]:
        cols = lambda end, fmt: "  ".join(  # noqa: E731
            f"{k[:-len(end)]}={v:{fmt}}" for k, v in r.items() if k.endswith(end))
        out += [f"{r['batch']} {r['context']} {cols('_us', '.1f')}",
                f"   pct {cols('_pct_copy', '.1f')}", f"   relerr {cols('_relerr', '.2g')}"]
    return out


def valid_kv_bytes(lengths, fmt: str, h: int = H, d: int = D) -> int:
    """The K and V bytes a decode call must read: each sequence's ``lengths[b]`` valid rows
    (``attention_triton.kv_bytes`` per row), not ``batch x context`` -- the shapes here hold one
    sequence at length 1 and one 37 rows short, which the kernels do not read."""
    return kv_bytes(1, h, int(sum(int(n) for n in lengths)), d, fmt)


_SPLIT_KNOBS = ("num_splits", "split_target", "block_k")  # what fp4_split_target may not meet


def _split_clash(knobs: dict) -> str | None:
    """Why a Triton variant's keywords cannot run together (fp4_split_target with a knob it
    sets or assumes), or None."""
    clash = [k for k in _SPLIT_KNOBS if k in knobs] if knobs.get("fp4_split_target") else []
    return (f"fp4_split_target sets num_splits from the default block_k; drop "
            f"{', '.join(clash)}") if clash else None


def _triton(q, c, n, bf16_p=0, bf16_partials=0, fp4_split_target=0, **knobs):
    precision = "bf16" if bf16_p else "f32"
    if fp4_split_target:  # the FP4 rule's split count at that target, passed as num_splits:
        # decode_attention_triton is a jit whose cache does not see the module knob
        clash = _split_clash({**knobs, "fp4_split_target": fp4_split_target})
        if clash:
            raise SystemExit(clash)
        b, h, s = c[0].codes.shape[:3]
        bk = AT.tuned_knobs(c[0].fmt, "v6")[0]  # the v6 rule's rows a block
        if s % bk or AT.SPLIT_TARGET is not None:
            raise SystemExit(f"fp4_split_target needs a context that is a multiple of {bk} (the "
                             f"kernel would shrink its blocks; got {s}) and SPLIT_TARGET None")
        saved, AT.FP4_SPLIT_TARGET = AT.FP4_SPLIT_TARGET, fp4_split_target
        try:
            knobs["num_splits"] = AT.default_splits(b, h, s // bk, bk, "v6", 1)
        finally:
            AT.FP4_SPLIT_TARGET = saved
    return decode_attention_triton(q, c[0], c[1], n, sm_scale=D ** -0.5, precision=precision,
                                   partial_dtype=jnp.bfloat16 if bf16_partials else None,
                                   **knobs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(_REPO, "experiments", "results"))
    ap.add_argument("--shapes", default=None, help="comma-separated batch:context")
    ap.add_argument("--no-time", action="store_true", help="exactness only")
    ap.add_argument("--variants", default="",
                    help="';'-separated Mosaic kernel variants, each comma-separated keywords "
                         "of attention_mgpu.decode_attention_mgpu, e.g. "
                         "'sub=2,lazy_sum=1;sub=2,lazy_sum=1,fast_full=1' (each its own "
                         "columns; default: the defaults)")
    ap.add_argument("--triton-variants", default="",
                    help="';'-separated Triton v6 variants, keywords of "
                         "attention_triton.decode_attention_triton among "
                         f"{', '.join(_TRITON_SHORT)}, e.g. ';num_splits=64;split_target=4096' (the "
                         "leading empty entry: the defaults; the first Triton variant is what "
                         "the others' max-diff columns compare with)")
    ap.add_argument("--no-triton", action="store_true", help="the Mosaic kernel only")
    ap.add_argument("--no-mosaic", action="store_true", help="the Triton kernel only")
    ap.add_argument("--fmt", default="nvfp4", choices=["nvfp4", "mxfp4"],
                    help="the caches' format; mxfp4: the Triton kernel only (the Mosaic kernel "
                         "reads NVFP4)")
    ap.add_argument("--summary", metavar="JSON", default=None,
                    help="print a written kernels_attention_mgpu.json compactly and exit")
    a = ap.parse_args(argv)
    if a.summary:
        print("\n".join(summary_lines(a.summary)))
        return 0
    shapes = SHAPES if a.shapes is None else [
        tuple(int(v) for v in x.split(":")) for x in a.shapes.split(",")]
    bw = None if a.no_time else devtime.report_copy_bandwidth(1 << 30)
    quant = jax.jit(lambda x: Q.quantize(x, a.fmt, axis=-1, global_scope="row"))
    if a.fmt != "nvfp4" and a.variants:
        raise SystemExit("--variants are the Mosaic kernel's, which reads NVFP4 caches only")
    variants = parse_variants(a.variants) if a.fmt == "nvfp4" and not a.no_mosaic else []
    if not variants and a.no_triton:
        raise SystemExit("--no-triton with --no-mosaic or --fmt mxfp4 leaves nothing to run")
    triton_variants = parse_variants(a.triton_variants, _TRITON_SHORT)
    for kw in triton_variants:  # refused here, before any device time
        if _split_clash(kw):
            raise SystemExit(f"Triton variant {variant_name(kw, _TRITON_SHORT)}: "
                             f"{_split_clash(kw)}")
    rows = []
    for b, s in shapes:
        ks = jax.random.split(jax.random.PRNGKey(b * 7 + s), 3)
        k, v = (quant(jax.random.normal(kk, (b, H, s, D), jnp.float32)) for kk in ks[:2])
        q = jax.random.normal(ks[2], (b, HQ, D), jnp.bfloat16)
        lengths = jnp.full((b,), s, jnp.int32).at[0].set(1).at[-1].set(max(1, s - 37))
        ref = jax.jit(decode_attention_reference)(q, k, v, lengths).astype(jnp.float32)
        row = dict(batch=b, context=s)
        nbytes = valid_kv_bytes(jax.device_get(lengths), a.fmt)
        cache = jax.jit(MK.to_mgpu_kv)(k, v) if variants else None
        kw, vw = KL.to_kv_words(k), KL.to_kv_words(v)
        runs = {}
        for knobs in variants:
            name = "mgpu" if len(variants) == 1 else "mgpu_" + variant_name(knobs)
            runs[name] = (jax.jit(functools.partial(AM.decode_attention_mgpu, **knobs,
                                                    backend="mgpu")), cache)
        for knobs in [] if a.no_triton else triton_variants:
            name = "triton" if not knobs else "triton_" + variant_name(knobs, _TRITON_SHORT)
            runs[name] = (jax.jit(functools.partial(_triton, **knobs)), (kw, vw))
        outs = {}
        for name, (f, c) in runs.items():
            try:
                outs[name] = f(q, c, lengths).astype(jnp.float32)
                row[f"{name}_relerr"] = devtime.relerr(outs[name], ref)
                if bw:
                    prof = devtime.device_summary(f, q, c, lengths)
                    t = devtime.selected_seconds(prof)
                    row[f"{name}_us"] = 1e6 * t
                    row[f"{name}_pct_copy"] = 100 * nbytes / t / bw
                    comb = sum(r["ns_per_call"] for r in prof["rows"] if "combine" in r["kernel"])
                    if comb:  # the split combine's share (Triton's second kernel)
                        row[f"{name}_combine_us"] = 1e-3 * comb
            except Exception as e:  # noqa: BLE001  (report and go on)
                print(f"  {name} B={b} S={s}: {type(e).__name__}: {str(e)[:1500]}", flush=True)
                traceback.print_exc(limit=4)
        base = next((n for n in outs if n.startswith("triton")), None)  # the first Triton run
        for name, o in outs.items():  # each other variant against it
            if base and name != base:
                row[f"{name}_maxdiff"] = float(jnp.max(jnp.abs(o - outs[base])))
        rows.append(row)
        print(devtime.format_row(row), flush=True)
    lines = devtime.sweep_header(
        "FP4-KV decode attention (Mosaic GPU, Triton)", "python experiments/check_mgpu_attention.py",
        f"GQA {HQ} / {H} heads, head_dim {D}, {a.fmt.upper()}; relerr vs the pure-JAX reference; "
        "device time per call" + (f"; % copy = K and V bytes of the valid rows (the sum of the "
                                  f"lengths) / time against a device-time copy of "
                                  f"{bw / 1e12:.2f} TB/s"
                                  if bw else " not measured") + ".", argv) + devtime.table_lines(rows)
    devtime.write_sweep(a.out, "kernels_attention_mgpu", lines, rows, bw or 0.0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
