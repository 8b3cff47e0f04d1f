"""The fused MoE gate / up / SwiGLU Mosaic GPU kernel (``fp4_matmul_mgpu.fp4_grouped_swiglu_mgpu``)
against the unfused stage (two grouped calls + XLA's SwiGLU) on one GPU, at the Qwen3-30B-A3B
expert shape (128 experts, top-8, d_model 2048, expert width 768).

  python experiments/check_mgpu_swiglu.py [--tokens 27,32,111,128,512] [--knobs "tk=128;steps=3"]

``--knobs`` also takes ``widths=0`` (the fused call with one chunk width, ``GROUPED_WIDTHS``
set to ()) to time the chunk widths against the default that has them.

Per row (device time, 5 profiled calls): the stage through ``fp4_matmul.fp4_grouped_swiglu``
(the model's entry point) unfused and fused, bf16 x and a W4A4 activation QTensor; the grouped
kernels alone; bytes = codes + scales of both weights of the experts with tokens, as % of a copy
measured the same way; relative error against the reference composition and the largest
difference between fused and unfused (bf16 values). Writes kernels_matmul_mgpu_swiglu.{md,json}.
GPU only.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)
from pallas_kernels import devtime  # noqa: E402
from pallas_kernels import fp4_matmul as fm  # noqa: E402
from pallas_kernels import fp4_matmul_mgpu as FM  # noqa: E402
from pallas_kernels.bench_matmul import route  # noqa: E402
from trace_jax.quant import quantize  # noqa: E402

E, TOPK, K, N = 128, 8, 2048, 768


def parse_knobs(spec: str) -> list[dict]:
    """"tk=128;steps=3,tk=128" -> [{}, {"tk": 128}, {"steps": 3, "tk": 128}] (the default
    first); a knob that is unknown, not an integer, an nt that does not tile N, or a widths
    other than 0 / 1 exits."""
    out = [{}]
    for part in filter(None, spec.split(";")):
        try:
            kv = {k: int(v) for k, v in (p.split("=") for p in part.split(","))}
        except ValueError:
            raise SystemExit(f"--knobs: {part!r} is not name=integer[,name=integer...]") from None
        bad = set(kv) - {"mp", "tk", "steps", "serial", "nt", "widths"}
        if bad:
            raise SystemExit(f"--knobs: unknown knob(s) {sorted(bad)} (use mp, tk, steps, "
                             f"serial, nt, widths)")
        if kv.get("widths", 1) not in (0, 1):
            raise SystemExit(f"--knobs: widths={kv['widths']} (0: one chunk width, 1: "
                             f"fp4_matmul_mgpu.GROUPED_WIDTHS)")
        if "nt" in kv and (kv["nt"] < 1 or N % (64 * kv["nt"])):
            raise SystemExit(f"--knobs: nt={kv['nt']} does not tile N={N} in 64-row tiles")
        out.append(kv)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(_REPO, "experiments", "results"))
    ap.add_argument("--tokens", default="27,32,111,128,512")
    ap.add_argument("--knobs", default="tk=128",
                    help="extra fused settings beside the defaults, ';'-separated: mp, tk, "
                         "steps, serial (0 / 1: fp4_matmul_mgpu.SERIAL_TILES), nt "
                         "(GROUPED_TILES), widths (0: one chunk width, 1: GROUPED_WIDTHS)")
    a = ap.parse_args(argv)
    variants = parse_knobs(a.knobs)
    serial0, nt0, widths0 = FM.SERIAL_TILES, FM.GROUPED_TILES, FM.GROUPED_WIDTHS  # defaults
    bw = devtime.report_copy_bandwidth(1 << 30)
    prep = jax.jit(lambda w: FM.prepare_mgpu(quantize(w, "nvfp4", axis=-2, global_scope="tensor")))
    wg, wu = (prep(jax.random.normal(jax.random.PRNGKey(i), (E, K, N), jnp.float32))
              for i in (1, 2))
    rows = []
    for t in (int(v) for v in a.tokens.split(",")):
        gs = route(t, E, TOPK, jax.random.PRNGKey(t))
        m = t * TOPK
        x = jax.random.normal(jax.random.PRNGKey(m), (m, K), jnp.float32)
        xb = x.astype(jnp.bfloat16)
        xq = quantize(x, "nvfp4", global_scope="row")
        touched = int(jnp.sum(gs > 0))
        nbytes = 2 * touched * K * N * 9 // 16
        row = dict(tokens=t, rows=m, experts_touched=touched, mp=FM.default_grouped_knobs(
            m, E, K, FM.GROUPED_X_LAYOUT == "aligned")[0])
        ref = jax.jit(FM.fp4_grouped_swiglu_mgpu_reference)(xb, wg, wu, gs)
        ref4 = jax.jit(lambda *z: fm.fp4_grouped_swiglu(*z, backend="reference"))(xq, wg, wu, gs)
        runs = [("unfused", xb, ref, dict(fused=False)), ("unfused_w4a4", xq, ref4,
                                                          dict(fused=False))]
        for v in variants:
            tag = "".join(f"_{k}{val}" for k, val in v.items())
            knobs = tuple(v.get(k) for k in ("mp", "tk", "steps"))
            runs.append(("fused" + tag, xb, ref, dict(fused=True, cfg=knobs if any(
                kk is not None for kk in knobs) else None, serial=bool(v.get("serial", serial0)),
                nt=v.get("nt", nt0), widths=widths0 if v.get("widths", 1) else ())))
        runs.append(("fused_w4a4", xq, ref4, dict(fused=True)))
        unfused = {}
        for name, xin, r, kw in runs:
            FM.SERIAL_TILES = kw.pop("serial", serial0)  # (read when f is traced: its first
            FM.GROUPED_TILES = kw.pop("nt", nt0)  # call below)
            FM.GROUPED_WIDTHS = kw.pop("widths", widths0)
            f = jax.jit(lambda xi, a_, b_, g_, kw=kw: fm.fp4_grouped_swiglu(xi, a_, b_, g_, **kw))
            try:
                out = f(xin, wg, wu, gs)
                row[f"{name}_relerr"] = devtime.relerr(out, r)
                key = "w4a4" if name.endswith("w4a4") else "bf16"
                if name.startswith("unfused"):
                    unfused[key] = out
                else:
                    row[f"{name}_maxdiff"] = float(jnp.max(jnp.abs(
                        out.astype(jnp.float32) - unfused[key].astype(jnp.float32))))
                prof = devtime.device_summary(f, xin, wg, wu, gs)
                tt = devtime.selected_seconds(prof)
                row[f"{name}_kernel_us"] = 1e6 * devtime.selected_seconds(prof, "body")
            except Exception as e:  # noqa: BLE001  (a setting that does not compile: go on)
                devtime.report_failure(f"{name} T={t}", e)
                continue
            devtime.record_time(row, name, tt, nbytes, bw)
        if "fused_us" in row and "unfused_us" in row:
            row["fused_speedup"] = row["unfused_us"] / row["fused_us"]
        rows.append(row)
        print(devtime.format_row(row), flush=True)
    lines = devtime.sweep_header(
        "Fused MoE gate / up / SwiGLU (Mosaic GPU FP4) vs two grouped calls",
        "python experiments/check_mgpu_swiglu.py",
        f"{E} experts, top-{TOPK} random routing, {K} x {N} per weight; device time per call "
        f"(all its kernels; *_kernel_us: the grouped kernels alone); % copy = codes + scales of "
        f"both weights of the experts with tokens / time against a device-time copy of "
        f"{bw / 1e12:.2f} TB/s; relerr vs the reference composition; maxdiff vs unfused.", argv
    ) + devtime.table_lines(rows)
    devtime.write_sweep(a.out, "kernels_matmul_mgpu_swiglu", lines, rows, bw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
