"""Compile the FP4 matmul kernels for sm_90 on a CPU-only machine (no GPU needed).

  FP4_FORCE_COMPILE=1 python -m pallas_kernels.matmul_compilecheck [OUTDIR]

Lowers each kernel variant with ``lowering_platforms=("cuda",)`` (an H200 is faked for Pallas'
GPU-info query), captures the Triton IR Pallas emits and compiles it with the installed Triton
(3.6, same as the GPU host) to PTX and cubin. Prints per variant: mma/wgmma instructions, shared
memory, local-memory spills, and writes the .ttgir/.ptx under OUTDIR for reading.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys

os.environ.setdefault("FP4_FORCE_COMPILE", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax._src.pallas.triton import gpu_info as gpu_info_lib  # noqa: E402
from jax._src.pallas.triton import lowering as tlow  # noqa: E402
from jax._src.pallas.triton import pallas_call_registration as reg  # noqa: E402

CAPTURED: list = []


def _patch():
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


def compile_ttir(ttir: str, num_warps: int, num_stages: int, outdir: str, name: str):
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
        n_regs=getattr(k, "n_regs", None),
    )
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
            st = compile_ttir(ttir, cfg.num_warps, cfg.num_stages, outdir, name)
            print(f"OK   {name} {cfg}: {st}", flush=True)
        except Exception as e:  # noqa: BLE001
            ok = False
            print(f"FAIL {name}: {type(e).__name__}: {str(e)[:2000]}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
