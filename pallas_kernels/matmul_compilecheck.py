"""Compile the FP4 matmul kernels for sm_90 on a CPU-only machine (no GPU needed).

  FP4_FORCE_COMPILE=1 python -m pallas_kernels.matmul_compilecheck [OUTDIR]

Lowers each kernel variant with ``lowering_platforms=("cuda",)`` (an H200 is faked for Pallas'
GPU-info query), captures the Triton IR Pallas emits and compiles it with the installed pip
Triton (3.6) to PTX and cubin. On the GPU host Pallas compiles the same IR with XLA's bundled
Triton, whose layout / vectorisation choices can differ (session 12: the paired-unit loop's
weight copies were 128-bit here and 32-bit on the H200, NOTES_matmul.md); the SASS the GPU ran
is on Nsight Compute's source page (``ncu_source_profile`` in ``experiments/gpu_prelude.sh``).
Prints per variant: mma/wgmma instructions, shared memory, local-memory spills, registers, SASS
per weight element of the main loop, the widths of its global -> shared copies (``copies``:
LDGSTS opcodes per loop iteration) and the TTGIR linear layouts with a zero register / lane
basis (``dup_layouts``: a tensor held 2x per zero basis, with the ops using it), and writes the
.ttgir/.ptx/.sass under OUTDIR for reading; ``bad_mma_kwidth`` lists MMAv2 dots whose kWidth
their K cannot hold (miscompiled: session 13's first paired kernel, since removed).
``FP4_CC_ONLY=SUBSTRING`` compiles only the variants whose name contains it.
"""

from __future__ import annotations

import contextlib
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

CAPTURED: list = []  # the Triton IR of each Pallas kernel lowered, in order
# (name, num_warps, num_stages) of each, from the lowering's compiler params
CAPTURED_PARAMS: list = []


def _patch():
    """Lower for a GPU on this CPU machine: the kernels skip interpret mode (FP4_FORCE_COMPILE)
    and Pallas' GPU-info query answers for an H200. Idempotent (the capture wraps once)."""
    os.environ.setdefault("FP4_FORCE_COMPILE", "1")
    h200 = gpu_info_lib.get_gpu_info_from_version(gpu_info_lib.GpuVersion.H200)
    reg.gpu_info_lib = type("G", (), {"get_gpu_info": staticmethod(lambda: h200)})
    orig = tlow.lower_jaxpr_to_triton_module
    if getattr(reg.lowering.lower_jaxpr_to_triton_module, "_fp4_capture", False):
        return

    def capture(*a, **k):
        res = orig(*a, **k)
        CAPTURED.append(res.module.operation.get_asm(enable_debug_info=False))
        caller = sys._getframe(1).f_locals  # Pallas' pallas_call_lowering (jax pinned: 0.11.2)
        CAPTURED_PARAMS.append((caller.get("name", "?"), caller.get("num_warps", 4),
                                caller.get("num_stages", 3)))
        return res

    capture._fp4_capture = True
    reg.lowering.lower_jaxpr_to_triton_module = capture


@contextlib.contextmanager
def patched():
    """:func:`_patch` undone on exit (tests: interpret mode and the real lowering come back)."""
    saved = (os.environ.get("FP4_FORCE_COMPILE"), reg.gpu_info_lib,
             reg.lowering.lower_jaxpr_to_triton_module)
    os.environ["FP4_FORCE_COMPILE"] = "1"
    try:
        _patch()
        yield
    finally:
        env, reg.gpu_info_lib, reg.lowering.lower_jaxpr_to_triton_module = saved
        if env is None:
            os.environ.pop("FP4_FORCE_COMPILE", None)
        else:
            os.environ["FP4_FORCE_COMPILE"] = env


def lower(fn, *args):
    CAPTURED.clear()
    CAPTURED_PARAMS.clear()
    jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",))
    return list(CAPTURED)


INT_OPS = ("IMAD", "LOP3", "PRMT", "IADD3", "SHF", "LEA", "SEL", "VIADD", "ISETP", "IABS",
           "SGXT", "BFE", "BFI")


def cli_configs(argv, defaults: dict, outdir: str) -> tuple[str, dict]:
    """``[OUTDIR] [NAME=CONFIG ...]`` of the compile checks -> (OUTDIR, {NAME: config dict});
    CONFIG is a Python dict literal, the ``defaults`` when none is given. Creates OUTDIR.
    Takes no options: an argument starting with "-" exits with the usage."""
    if any(a.startswith("-") for a in argv[1:]):
        raise SystemExit(f"usage: python -m {argv[0]} [OUTDIR] [NAME=CONFIG ...] "
                         "(no options; the module docstring says more)")
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


def _loop_opcodes(sass: str, full: bool = False) -> Counter:
    """Opcodes (``full``: with their modifiers, e.g. LDGSTS.E.BYPASS.128) in the largest
    backward-branch loop of the SASS (the kernel's main loop)."""
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
    op = r"([A-Z][A-Z0-9_.]*)" if full else r"([A-Z][A-Z0-9_]*)"
    for ln in lines:
        m = re.match(r"\s+/\*([0-9a-f]{4,5})\*/\s+(?:@!?U?P\w+\s+)?" + op, ln)
        if m and lo <= int(m.group(1), 16) <= hi:
            ops[m.group(2)] += 1
    return ops


def copy_widths(sass: str) -> dict:
    """Global -> shared copies (LDGSTS, i.e. cp.async) per main-loop iteration by opcode; no
    width suffix = 4 bytes, .64 / .128 = 8 / 16 bytes."""
    return {k: v for k, v in sorted(_loop_opcodes(sass, full=True).items())
            if k.startswith("LDGSTS")}


def dup_layouts(ttgir: str) -> list[dict]:
    """TTGIR linear layouts with zero basis vectors in ``register`` or ``lane``: each zero basis
    holds every element twice (registers or lanes), a 2**z-fold duplicated tensor. Per layout:
    its name, the zero register / lane / warp bases and the ops whose results use it."""
    out = []
    for m in re.finditer(r"^(#linear\d*) = #ttg\.linear<\{(.*)\}>$", ttgir, re.M):
        name, body = m.group(1), m.group(2)
        zeros = {}
        for key in ("register", "lane", "warp"):
            b = re.search(key + r" = \[(.*?)\]\]", body)
            vecs = re.findall(r"\[([-\d, ]+)\]", b.group(1) + "]") if b else []
            zeros[key] = sum(all(int(v) == 0 for v in vec.split(",")) for vec in vecs)
        if zeros["register"] or zeros["lane"]:
            users = Counter(u.group(1) for u in re.finditer(
                r"= ([a-z_]+\.[a-z_]+)\b[^\n]*" + re.escape(name) + r">", ttgir))
            out.append(dict(layout=name, **zeros, ops=dict(users)))
    return out


def bad_mma_kwidth(ttgir: str) -> list[str]:
    """``tt.dot`` ops on MMAv2 operands whose ``kWidth`` exceeds what their K allows: with
    kWidth consecutive K elements per thread and 4 lanes along K, one operand chunk spans
    4 * kWidth of K, so K % (4 * kWidth) must be 0. Triton 3.6 (and the H200's XLA Triton) can
    pick a larger kWidth for a small-K dot, e.g. kWidth 8 for the paired decode's K = 16 plane
    dots when a ``tt.join`` feeds the operand (``computeOrigBitWidth`` halves the i8 scales'
    width for a join) and then miscompiles it: session 13's paired kernel read each thread's
    second K half as another N tile (wrong output on the H200; upstream triton#11691 bounds
    kWidth by K). Returns the offending dot lines (shortened); empty = fine."""
    bad = []
    for m in re.finditer(r"= tt\.dot [^\n]*", ttgir):
        line = m.group(0)
        ops = re.findall(r"tensor<(\d+)x(\d+)x\w+, #ttg\.dot_op<\{opIdx = (\d), parent = "
                         r"#mma\w*, kWidth = (\d+)\}>>", line)
        for d0, d1, idx, kw in ops:
            kdim = int(d1) if idx == "0" else int(d0)
            if kdim % (4 * int(kw)):
                bad.append(f"K={kdim} kWidth={kw} opIdx={idx}: {line[:160]}")
    return bad


def loop_stats(sass: str, units: int, warps: int) -> dict:
    """Instructions of the largest backward-branch loop (the kernel's main loop), per work unit
    of one iteration (a cache row, a weight element) summed over the warps."""
    ops = _loop_opcodes(sass)
    total = sum(ops.values())
    integer = sum(v for k, v in ops.items() if k.startswith(INT_OPS))
    per = warps / units
    return dict(loop=total, per_unit=total * per, int_per_unit=integer * per,
                mix={k: round(v * per, 2) for k, v in ops.most_common(12)})


# sm_90 (H100 / H200) per-SM limits, as CUDA's occupancy calculator (cuda_occupancy.h) takes
# them: 64K 32-bit registers in 4 sub-partitions of 16K, allocated per warp in units of 256
# (a warp's registers come from one sub-partition); 228 KB of shared memory, allocated per block
# in units of 128 B with 1 KB reserved by the driver; at most 32 blocks and 64 warps.
SM90 = dict(regs=65536, sub_partitions=4, reg_unit=256, smem=228 * 1024, smem_unit=128,
            smem_reserved=1024, blocks=32, warps=64)


def resident_warps(regs: int, num_warps: int, shared_bytes: int, sm: dict = SM90) -> int:
    """Warps of one kernel an SM holds at once (blocks resident x ``num_warps``), from its
    registers per thread and shared memory per block, by the rules of CUDA's occupancy
    calculator (the largest shared-memory carveout assumed). Session 39: the FP4 attention's
    time on an H100 followed it for the sub-tile variants, not for ``late_vt`` (NOTES_attention)."""
    per_warp = -(-regs * 32 // sm["reg_unit"]) * sm["reg_unit"]
    warps_by_regs = (sm["regs"] // sm["sub_partitions"] // per_warp) * sm["sub_partitions"]
    smem = -(-(shared_bytes + sm["smem_reserved"]) // sm["smem_unit"]) * sm["smem_unit"]
    blocks = min(warps_by_regs // num_warps, sm["smem"] // smem, sm["blocks"],
                 sm["warps"] // num_warps)
    return blocks * num_warps


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
                     int_per_unit=round(ls["int_per_unit"], 3), sass_mix=ls["mix"],
                     copies=copy_widths(sass))
    stats["dup_layouts"] = dup_layouts(k.asm["ttgir"])
    stats["bad_mma_kwidth"] = bad_mma_kwidth(k.asm["ttgir"])
    return stats


def variants():
    from pallas_kernels import fp4_matmul as fm
    from pallas_kernels import matmul_triton as mt
    from trace_jax import quant

    out = []
    # the H200-profiled dense config: M = 1, split 4
    w = fm.prepare_weights(quant.quantize(jnp.ones((8192, 1024)), "nvfp4", axis=-2))
    cfg = mt.Config(bm=16, bn=128, bk=256, split_k=4, num_stages=3)
    out.append(("dense_kn_nvfp4_m1_split4", cfg, lambda x, w, cfg=cfg: mt.dense(x, w, cfg),
                (jnp.ones((1, 8192), jnp.bfloat16), w)))
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
    es = jnp.array([0.5, 1.0, 2.0, 4.0], jnp.float32)  # ScaledExperts' per-expert scale
    for name, c in (("grouped_persistent_bf16", cfgbp), ("grouped_bf16", cfgb)):
        out.append((name, c, lambda x, w, c=c: mt.grouped_bf16(x, w, gs, c),
                    (jnp.ones((8, 2048), jnp.bfloat16), wb)))
        out.append((name + "_scaled", c,
                    lambda x, w, c=c: mt.grouped_bf16(x, w, gs, c, expert_scale=es),
                    (jnp.ones((8, 2048), jnp.bfloat16), wb)))
    # the trainer's backward: dx through the transposed weight read in place, and dw
    cfgt = mt.default_bf16_config(4096, 2048, e=4)
    out.append(("grouped_bf16_nk", cfgt,
                lambda x, w, c=cfgt: mt.grouped_bf16(x, w, gs, c, w_layout="nk"),
                (jnp.ones((4096, 768), jnp.bfloat16), wb)))
    out.append(("grouped_bf16_nk_scaled", cfgt,
                lambda x, w, c=cfgt: mt.grouped_bf16(x, w, gs, c, w_layout="nk",
                                                     expert_scale=es),
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
