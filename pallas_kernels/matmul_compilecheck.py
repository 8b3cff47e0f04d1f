"""Compile the FP4 matmul kernels for sm_90 on a CPU-only machine (no GPU needed).

  FP4_FORCE_COMPILE=1 python -m pallas_kernels.matmul_compilecheck [OUTDIR]

Lowers each kernel variant with ``lowering_platforms=("cuda",)`` (an H200 is faked for Pallas'
GPU-info query), captures the Triton IR Pallas emits and compiles it with the installed pip
Triton (3.6) to PTX and cubin. On the GPU host Pallas compiles the same IR with XLA's bundled
Triton, whose layout / vectorisation choices can differ (session 12: the paired-unit loop's
weight copies were 128-bit here and 32-bit on the H200, NOTES_matmul.md); the SASS the GPU ran
is on Nsight Compute's source page (``ncu_source_profile`` in ``experiments/gpu_prelude.sh``). Prints per variant: mma/wgmma instructions, shared
memory, local-memory spills, and writes the .ttgir/.ptx under OUTDIR for reading.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from collections import Counter

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax._src.pallas.triton import gpu_info as gpu_info_lib  # noqa: E402
from jax._src.pallas.triton import lowering as tlow  # noqa: E402
from jax._src.pallas.triton import pallas_call_registration as reg  # noqa: E402

CAPTURED: list = []


def _patch():
    """Lower for a GPU on this CPU machine: the kernels skip interpret mode (FP4_FORCE_COMPILE)
    and Pallas' GPU-info query answers for an H200."""
    os.environ.setdefault("FP4_FORCE_COMPILE", "1")
    h200 = gpu_info_lib.get_gpu_info_from_version(gpu_info_lib.GpuVersion.H200)
    reg.gpu_info_lib = type("G", (), {"get_gpu_info": staticmethod(lambda: h200)})
    orig = tlow.lower_jaxpr_to_triton_module

    def capture(*a, **k):
        res = orig(*a, **k)
        CAPTURED.append(res.module.operation.get_asm(enable_debug_info=False))
        return res

    reg.lowering.lower_jaxpr_to_triton_module = capture


def lower(fn, *args):
    CAPTURED.clear()
    jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",))
    return list(CAPTURED)


INT_OPS = ("IMAD", "LOP3", "PRMT", "IADD3", "SHF", "LEA", "SEL", "VIADD", "ISETP", "IABS",
           "SGXT", "BFE", "BFI")


def cli_configs(argv, defaults: dict, outdir: str) -> tuple[str, dict]:
    """``[OUTDIR] [NAME=CONFIG ...]`` of the compile checks -> (OUTDIR, {NAME: config dict});
    CONFIG is a Python dict literal, the ``defaults`` when none is given. Creates OUTDIR."""
    if len(argv) > 1 and "=" not in argv[1]:
        outdir = argv[1]
    os.makedirs(outdir, exist_ok=True)
    given = [a for a in argv[1:] if "=" in a]
    configs = ({a.split("=", 1)[0]: eval(a.split("=", 1)[1]) for a in given}  # noqa: S307
               if given else dict(defaults))
    return outdir, configs


def compile_cli(argv, defaults: dict, outdir: str, compile_one, header: str, row) -> int:
    """The compile checks' ``main``: compile each config (``compile_one(name, cfg, outdir)`` ->
    stats), print ``header`` then ``row(name, stats)`` per config or its failure; 1 if any
    failed."""
    outdir, configs = cli_configs(argv, defaults, outdir)
    _patch()
    ok = True
    print(header)
    for name, cfg in configs.items():
        try:
            print(row(name, compile_one(name, cfg, outdir)), flush=True)
        except Exception as e:  # noqa: BLE001
            ok = False
            print(f"FAIL {name}: {type(e).__name__}: {str(e)[:1000]}", flush=True)
    return 0 if ok else 1


def cuobjdump() -> str:
    """The cuobjdump bundled with the installed Triton."""
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                        "cuobjdump")


def sass_of(cubin: bytes, outdir: str, name: str) -> tuple[str, int | None, int | None]:
    """(SASS text, registers, local-memory bytes) of a cubin; the SASS is also written out."""
    cub = os.path.join(outdir, f"{name}.cubin")
    with open(cub, "wb") as fh:
        fh.write(cubin)
    sass = subprocess.run([cuobjdump(), "-sass", cub], capture_output=True, text=True).stdout
    with open(os.path.join(outdir, f"{name}.sass"), "w") as fh:
        fh.write(sass)
    ru = subprocess.run([cuobjdump(), "-res-usage", cub], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+).*?LOCAL:(\d+)", ru, re.S)
    return sass, *((int(m.group(1)), int(m.group(2))) if m else (None, None))


def loop_stats(sass: str, units: int, warps: int) -> dict:
    """Instructions of the largest backward-branch loop (the kernel's main loop), per work unit
    of one iteration (a cache row, a weight element) summed over the warps."""
    lines = sass.splitlines()
    best = (0, 0, 0)
    for ln in lines:
        m = re.match(r"\s+/\*([0-9a-f]{4,5})\*/.*BRA\s+0x([0-9a-f]+)", ln)
        if m:
            a, t = int(m.group(1), 16), int(m.group(2), 16)
            if t < a and (a - t) // 16 + 1 > best[0]:
                best = ((a - t) // 16 + 1, t, a)
    _, lo, hi = best
    ops = Counter()
    for ln in lines:
        m = re.match(r"\s+/\*([0-9a-f]{4,5})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", ln)
        if m and lo <= int(m.group(1), 16) <= hi:
            ops[m.group(2)] += 1
    total = sum(ops.values())
    integer = sum(v for k, v in ops.items() if k.startswith(INT_OPS))
    per = warps / units
    return dict(loop=total, per_unit=total * per, int_per_unit=integer * per,
                mix={k: round(v * per, 2) for k, v in ops.most_common(12)})


def compile_ttir(ttir: str, num_warps: int, num_stages: int, outdir: str, name: str,
                 units: int | None = None):
    """Compile Pallas' Triton IR for sm_90; PTX/SASS counts. ``units``: work units per main-loop
    iteration (weight elements per K step) for the SASS loop's per-unit instruction count."""
    import triton
    from triton.backends.compiler import GPUTarget

    from triton._C.libtriton import ir, nvidia
    from triton.backends.nvidia.compiler import CUDABackend

    raw = os.path.join(outdir, f"{name}.raw.ttir")
    with open(raw, "w") as f:
        f.write(ttir)
    # XLA runs Triton's make_ttir passes (inliner, combine: add(dot(a,b,0),c) -> dot(a,b,c), ...)
    # before make_ttgir; a .ttir source skips them in triton.compile, so run them here.
    ctx = ir.context()
    ir.load_dialects(ctx)
    nvidia.load_dialects(ctx)
    mod = ir.parse_mlir_module(raw, ctx)
    mod.context = ctx
    opts = type("O", (), {"num_warps": num_warps, "num_stages": num_stages})
    mod = CUDABackend.make_ttir(mod, {}, opts, 90)
    path = os.path.join(outdir, f"{name}.ttir")
    with open(path, "w") as f:
        f.write(str(mod))
    k = triton.compile(path, target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=num_warps, num_stages=num_stages))
    for ext in ("ttgir", "ptx"):
        with open(os.path.join(outdir, f"{name}.{ext}"), "w") as f:
            f.write(k.asm[ext])
    ptx = k.asm["ptx"]
    stats = dict(
        wgmma=len(re.findall(r"wgmma\.mma_async", ptx)),
        mma=len(re.findall(r"\bmma\.sync", ptx)),
        ld_shared=len(re.findall(r"ld\.shared", ptx)),
        st_shared=len(re.findall(r"st\.shared", ptx)),
        ldmatrix=len(re.findall(r"ldmatrix", ptx)),
        cp_async=len(re.findall(r"cp\.async\.(?:ca|cg)", ptx)),
        local=len(re.findall(r"\.local", ptx)),
        shared_bytes=k.metadata.shared,
    )
    sass, stats["regs"], stats["local_bytes"] = sass_of(k.asm["cubin"], outdir, name)
    if units:
        ls = loop_stats(sass, units, num_warps)
        stats.update(sass_loop=ls["loop"], sass_per_unit=round(ls["per_unit"], 3),
                     int_per_unit=round(ls["int_per_unit"], 3), sass_mix=ls["mix"])
    return stats


def variants():
    from pallas_kernels import fp4_matmul as fm
    from pallas_kernels import matmul_triton as mt
    from trace_jax import quant

    out = []
    for layout in ("kn", "nk"):
        for fmt in ("nvfp4",):
            q = quant.quantize(jnp.ones((8192, 1024)), fmt, axis=-2)
            w = fm.prepare_weights(q, layout)
            for m, cfg in [(8, mt.default_config(8, 8192, 1024, False, layout)),
                           (64, mt.default_config(64, 8192, 1024, False, layout))]:
                x = jnp.ones((m, 8192), jnp.bfloat16)
                out.append((f"dense_{layout}_{fmt}_m{m}", cfg,
                            lambda x, w, cfg=cfg: mt.dense(x, w, cfg), (x, w)))
            cfg = mt.Config(bm=16, bn=128, bk=256, programs=3 * 132)  # stream-K
            out.append((f"dense_streamk_{layout}_{fmt}_m1", cfg,
                        lambda x, w, cfg=cfg: mt.dense(x, w, cfg),
                        (jnp.ones((1, 8192), jnp.bfloat16), w)))
    wd = fm.prepare_weights(quant.quantize(jnp.ones((8192, 1024)), "nvfp4", axis=-2))
    out.append(("dequant_planes_nvfp4", mt.Config(num_warps=4, num_stages=2),
                lambda x, w: mt.dequantize_planes(w), (jnp.ones((1, 8192)), wd)))
    qe = quant.quantize(jnp.ones((4, 2048, 768)), "mxfp4", axis=-2)
    we = fm.prepare_weights(qe, "kn")
    gs = jnp.array([3, 0, 2, 3], jnp.int32)
    cfgp = mt.default_config(8, 2048, 768, True)  # persistent programs
    cfg = dataclasses.replace(cfgp, programs=0, bn=64, num_stages=3)  # one program per tile
    for name, c in (("grouped_persistent_kn_mxfp4", cfgp), ("grouped_kn_mxfp4", cfg)):
        out.append((name, c, lambda x, w, c=c: mt.grouped(x, w, gs, c),
                    (jnp.ones((8, 2048), jnp.bfloat16), we)))
    wb = jnp.ones((4, 2048, 768), jnp.bfloat16)
    cfgbp = mt.default_bf16_config(8, 768)
    cfgb = dataclasses.replace(cfgbp, programs=0, num_stages=4)
    for name, c in (("grouped_persistent_bf16", cfgbp), ("grouped_bf16", cfgb)):
        out.append((name, c, lambda x, w, c=c: mt.grouped_bf16(x, w, gs, c),
                    (jnp.ones((8, 2048), jnp.bfloat16), wb)))
    # the trainer's backward: dx through the transposed weight read in place, and dw
    cfgt = mt.default_bf16_config(4096, 2048, e=4)
    out.append(("grouped_bf16_nk", cfgt,
                lambda x, w, c=cfgt: mt.grouped_bf16(x, w, gs, c, w_layout="nk"),
                (jnp.ones((4096, 768), jnp.bfloat16), wb)))
    cfgw = mt.default_wgrad_config(2048, 768)
    out.append(("grouped_bf16_wgrad", cfgw,
                lambda x, dy, c=cfgw: mt.grouped_bf16_wgrad(x, dy, gs, c),
                (jnp.ones((4096, 2048), jnp.bfloat16), jnp.ones((4096, 768), jnp.bfloat16))))
    return out


def main(argv):
    outdir = argv[1] if len(argv) > 1 else "/tmp/fp4_cc"
    os.makedirs(outdir, exist_ok=True)
    _patch()
    only = os.environ.get("FP4_CC_ONLY")
    ok = True
    for name, cfg, fn, args in variants():
        if only and only not in name:
            continue
        try:
            (ttir,) = lower(fn, *args)
            st = compile_ttir(ttir, cfg.num_warps, cfg.num_stages, outdir, name,
                              units=cfg.bk * cfg.bn)
            print(f"OK   {name} {cfg}: {st}", flush=True)
        except Exception as e:  # noqa: BLE001
            ok = False
            print(f"FAIL {name}: {type(e).__name__}: {str(e)[:2000]}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
