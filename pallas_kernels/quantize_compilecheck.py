"""Compile the fused quantize-with-hint kernel for sm_90 on a CPU-only machine; count its SASS.

  python -m pallas_kernels.quantize_compilecheck [OUTDIR] [NAME=CONFIG ...]

CONFIG is a Python dict literal of ``quantize_with_hint_triton`` keywords plus ``fmt``, ``m`` and
``k``, e.g. ``nv="dict(fmt='nvfp4', k=4096, block_m=4, num_warps=8)"``; without configs a default
set is compiled. The kernel has no loop (its K chunks are unrolled), so the count is the whole
program's static SASS, per element of its [block_m, K] tile and per thread (warp instructions x
32 x warps / elements): at the bench's 65536 x 4096 a kernel at 70% of the H200's copy bandwidth
has a budget of ~20 of these (NOTES_attention.md, quantize-with-hint v3). Lowering as in
``matmul_compilecheck`` (stubbed H200 gpu_info, the venv's Triton and its ptxas/cuobjdump).
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter

import jax.numpy as jnp

from pallas_kernels import matmul_compilecheck as mc  # noqa: E402
from pallas_kernels import quantize_hint as QH  # noqa: E402
from trace_jax import quant  # noqa: E402

DEFAULTS = {  # the default variant (v5) and v4 side by side
    "nv_row_k4096": dict(fmt="nvfp4", k=4096),
    "mx_row_k4096": dict(fmt="mxfp4", k=4096),
    "nv_tensor_k4096": dict(fmt="nvfp4", k=4096, global_scope="tensor"),
    "nv_row_k4096_v4": dict(fmt="nvfp4", k=4096, variant="v4"),
    "mx_row_k4096_v4": dict(fmt="mxfp4", k=4096, variant="v4"),
    "nv_tensor_k4096_v4": dict(fmt="nvfp4", k=4096, global_scope="tensor", variant="v4"),
}


# Opcodes issued to the integer/logic ALU pipe (16 lanes per scheduler on Hopper: half the issue
# rate), which the H200 profile found 80-86% busy in this kernel
# (experiments/gpu_sessions/gpu_session12d.sh); IMAD, FADD/FMUL/FFMA go to the FMA pipes. An
# estimate from opcode names, for comparisons.
ALU_PIPE = ("LOP3", "ISETP", "VIMNMX", "VIMNMX3", "SHF", "SEL", "LEA", "PRMT", "SGXT", "IADD3",
            "VIADD", "VIADDMNMX", "FSEL", "FSETP", "FMNMX", "PLOP3", "MOV", "FLO", "POPC", "BMSK")


def sass_counts(sass: str) -> Counter:
    ops = Counter()
    for ln in sass.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]{4,5})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", ln)
        if m and m.group(2) not in ("NOP", "BRA", "EXIT"):
            ops[m.group(2)] += 1
    return ops


def compile_config(name, cfg, outdir):
    cfg = dict(cfg)
    fmt, m, k = cfg.pop("fmt", "nvfp4"), cfg.pop("m", 1024), cfg.pop("k", 4096)
    cfg.setdefault("global_scope", "row")
    knobs = QH.default_knobs(k, quant.get_format(fmt).block_size, cfg.get("variant", QH.DEFAULT_VARIANT)) | {
        kk: v for kk, v in cfg.items() if kk in QH.KNOBS}
    x = jnp.ones((m, k), jnp.bfloat16)
    (ttir,) = [t for t in mc.lower(lambda x: QH.quantize_with_hint_triton(x, fmt, **cfg), x)
               if "quantize_with_hint" in t] or [None]
    st = mc.compile_ttir(ttir, knobs["num_warps"], 1, outdir, name)
    with open(os.path.join(outdir, f"{name}.sass")) as f:
        ops = sass_counts(f.read())
    per = 32 * knobs["num_warps"] / (knobs["block_m"] * k)
    total = sum(ops.values())
    integer = sum(v for kk, v in ops.items() if kk.startswith(mc.INT_OPS))
    alu = sum(v for kk, v in ops.items() if kk in ALU_PIPE)
    return dict(regs=st["regs"], local=st["local_bytes"], knobs=knobs, per_elem=total * per,
                int_per_elem=integer * per, alu_per_elem=alu * per,
                mix={kk: round(v * per, 2) for kk, v in ops.most_common(10)})


def main(argv):
    return mc.compile_cli(
        argv, DEFAULTS, "/tmp/qh_cc", compile_config,
        f"{'config':18s} {'regs':>5s} {'spill':>5s} {'instr/el':>8s} {'int/el':>7s} "
        f"{'alu/el':>7s}  knobs; mix/el",
        lambda name, st: f"{name:18s} {st['regs']:5d} {st['local']:5d} {st['per_elem']:8.2f} "
                         f"{st['int_per_elem']:7.2f} {st['alu_per_elem']:7.2f}  {st['knobs']}; "
                         f"{st['mix']}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
