"""Compile the FP4-KV decode attention kernels for sm_90 on a CPU-only machine; count SASS per row.

  python -m pallas_kernels.attention_compilecheck [OUTDIR] [NAME=CONFIG ...]

CONFIG is a Python dict literal of ``decode_attention_triton`` keywords plus ``fmt``, e.g.
``v3_nv16="dict(fmt='nvfp4', decode='v3', block_k=16, num_warps=1)"``; without configs a default
set (v2 / v3 / v4 configs, nvfp4 and mxfp4, head_dim 128, G = 8) is compiled. Per config it
prints registers per thread, spills, the static instruction count of the main loop (the largest
backward branch in the SASS) divided by the cache rows one iteration handles (block_k * chains;
summed over the program's warps), and the loop's instruction mix per row. Integer-pipe
instructions (IMAD incl. IMAD.MOV, LOP3, PRMT, IADD3, SHF, ...) are listed separately: on the
H200 the v2/v3 times tracked them (NOTES_attention.md, v3). Lowering as in
``matmul_compilecheck`` (stubbed H200 gpu_info, the venv's Triton 3.6 and its ptxas/cuobjdump).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter

os.environ.setdefault("FP4_FORCE_COMPILE", "1")

import jax.numpy as jnp  # noqa: E402

from pallas_kernels import attention_triton as AT  # noqa: E402
from pallas_kernels import matmul_compilecheck as mc  # noqa: E402
from trace_jax.quant import quantize  # noqa: E402

INT_OPS = ("IMAD", "LOP3", "PRMT", "IADD3", "SHF", "LEA", "SEL", "VIADD", "ISETP", "IABS",
           "SGXT", "BFE", "BFI")

DEFAULTS = {
    "v2_nv_bk32_w1": dict(fmt="nvfp4", decode="v2", block_k=32, num_warps=1),
    "v3_nv_bk16_w1": dict(fmt="nvfp4", decode="v3", block_k=16, num_warps=1),
    "v3_nv_bk128_w4": dict(fmt="nvfp4", decode="v3", block_k=128, num_warps=4),
    "v3_mx_bk16_w1": dict(fmt="mxfp4", decode="v3", block_k=16, num_warps=1),
    "v3_nv_bk32_w1": dict(fmt="nvfp4", decode="v3", block_k=32, num_warps=1),
    "v4_nv_bk16_w1": dict(fmt="nvfp4", decode="v4", block_k=16, num_warps=1),
    "v4_nv_bk128_w4": dict(fmt="nvfp4", decode="v4", block_k=128, num_warps=4),
    "v4_mx_bk16_w1": dict(fmt="mxfp4", decode="v4", block_k=16, num_warps=1),
    "v4_nv_bk32_w1": dict(fmt="nvfp4", decode="v4", block_k=32, num_warps=1),
}


def _tools():
    import triton

    d = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    return os.path.join(d, "cuobjdump")


def compile_config(name, cfg, outdir, b=8, s=8192, hq=32, h=4, d=128):
    cfg = dict(cfg)
    fmt = cfg.pop("fmt", "nvfp4")
    q = jnp.ones((b, hq, d), jnp.bfloat16)
    c = quantize(jnp.ones((b, h, s, d), jnp.float32), fmt, axis=-1, global_scope="row")
    lengths = jnp.full((b,), s, jnp.int32)

    def f(q, k, v, n):
        return AT.decode_attention_triton(q, k, v, n, sm_scale=d ** -0.5, **cfg)

    (ttir,) = mc.lower(f, q, c, c, lengths)
    _, nw, ns = AT.tuned_knobs(fmt, cfg.get("decode") or ("v4" if d % 8 == 0 else "v3"))
    nw, ns = cfg.get("num_warps") or nw, cfg.get("num_stages") or ns  # what the kernel ran with
    mc.compile_ttir(ttir, nw, ns, outdir, name)  # writes .ttir/.ttgir/.ptx
    # compile_ttir does not keep the cubin: compile the written .ttir again for it
    import triton
    from triton.backends.compiler import GPUTarget

    k = triton.compile(os.path.join(outdir, f"{name}.ttir"), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=nw, num_stages=ns))
    cub = os.path.join(outdir, f"{name}.cubin")
    with open(cub, "wb") as fh:
        fh.write(k.asm["cubin"])
    cuobj = _tools()
    sass = subprocess.run([cuobj, "-sass", cub], capture_output=True, text=True).stdout
    with open(os.path.join(outdir, f"{name}.sass"), "w") as fh:
        fh.write(sass)
    ru = subprocess.run([cuobj, "-res-usage", cub], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+).*?LOCAL:(\d+)", ru, re.S)
    regs, local = (int(m.group(1)), int(m.group(2))) if m else (None, None)
    rows = cfg.get("block_k", 16) * (cfg.get("chains") or 1)
    return dict(regs=regs, local=local, warps=nw, rows=rows, **loop_stats(sass, rows, nw))


def loop_stats(sass, rows, warps):
    """Instructions of the largest backward-branch loop, per cache row summed over warps."""
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
    per = warps / rows
    return dict(loop=total, per_row=total * per, int_per_row=integer * per,
                mix={k: round(v * per, 2) for k, v in ops.most_common(12)})


def main(argv):
    outdir = argv[1] if len(argv) > 1 and "=" not in argv[1] else "/tmp/attn_cc"
    os.makedirs(outdir, exist_ok=True)
    configs = dict(DEFAULTS)
    given = [a for a in argv[1:] if "=" in a]
    if given:
        configs = {a.split("=", 1)[0]: eval(a.split("=", 1)[1]) for a in given}  # noqa: S307
    mc._patch()
    ok = True
    print(f"{'config':18s} {'regs':>5s} {'spill':>5s} {'instr/row':>9s} {'int/row':>8s}  mix/row")
    for name, cfg in configs.items():
        try:
            st = compile_config(name, cfg, outdir)
            print(f"{name:18s} {st['regs']:5d} {st['local']:5d} {st['per_row']:9.1f} "
                  f"{st['int_per_row']:8.1f}  {st['mix']}", flush=True)
        except Exception as e:  # noqa: BLE001
            ok = False
            print(f"FAIL {name}: {type(e).__name__}: {str(e)[:1000]}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
