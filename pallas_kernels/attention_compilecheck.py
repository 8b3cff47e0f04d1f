"""Compile the FP4-KV decode attention kernels for sm_90 on a CPU-only machine; count SASS per row.

  python -m pallas_kernels.attention_compilecheck [OUTDIR] [NAME=CONFIG ...]

CONFIG is a Python dict literal of ``decode_attention_triton`` keywords plus ``fmt``, e.g.
``v3_nv16="dict(fmt='nvfp4', decode='v3', block_k=16, num_warps=1)"``; without configs a default
set (v3 - v6 configs, nvfp4 and mxfp4, head_dim 128, G = 8) is compiled. Per config it
prints registers per thread, spills, shared memory per program, the warps an SM holds at once
(``matmul_compilecheck.resident_warps``), the static instruction count of the main loop (the largest
backward branch in the SASS) divided by the cache rows one iteration handles (block_k * chains;
summed over the program's warps), and the loop's instruction mix per row. Integer-pipe
instructions (IMAD incl. IMAD.MOV, LOP3, PRMT, IADD3, SHF, ...) are listed separately: on the
H200 the v2/v3 times tracked them (NOTES_attention.md, v3). Lowering as in
``matmul_compilecheck`` (stubbed H200 gpu_info, the venv's Triton 3.6 and its ptxas/cuobjdump).
"""

from __future__ import annotations

import sys

import jax.numpy as jnp

from pallas_kernels import attention_triton as AT  # noqa: E402
from pallas_kernels import kv_layout as KL  # noqa: E402
from pallas_kernels import matmul_compilecheck as mc  # noqa: E402
from trace_jax.quant import quantize  # noqa: E402

DEFAULTS = {
    "v3_nv_bk16_w1": dict(fmt="nvfp4", decode="v3", block_k=16, num_warps=1),
    "v3_nv_bk128_w4": dict(fmt="nvfp4", decode="v3", block_k=128, num_warps=4),
    "v3_mx_bk16_w1": dict(fmt="mxfp4", decode="v3", block_k=16, num_warps=1),
    "v3_nv_bk32_w1": dict(fmt="nvfp4", decode="v3", block_k=32, num_warps=1),
    "v4_nv_bk16_w1": dict(fmt="nvfp4", decode="v4", block_k=16, num_warps=1),
    "v4_nv_bk128_w4": dict(fmt="nvfp4", decode="v4", block_k=128, num_warps=4),
    "v4_mx_bk16_w1": dict(fmt="mxfp4", decode="v4", block_k=16, num_warps=1),
    "v4_nv_bk32_w1": dict(fmt="nvfp4", decode="v4", block_k=32, num_warps=1),
    "v5_nv_bk32_w1": dict(fmt="nvfp4", decode="v5", block_k=32, num_warps=1),
    "v5_mx_bk64_w2": dict(fmt="mxfp4", decode="v5", block_k=64, num_warps=2),
    "v6_nv_bk32_w1": dict(fmt="nvfp4", decode="v6", block_k=32, num_warps=1),
    "v6_mx_bk64_w2": dict(fmt="mxfp4", decode="v6", block_k=64, num_warps=2),
}


def compile_config(name, cfg, outdir, b=8, s=8192, hq=32, h=4, d=128):
    cfg = dict(cfg)
    fmt = cfg.pop("fmt", "nvfp4")
    q = jnp.ones((b, hq, d), jnp.bfloat16)
    c = quantize(jnp.ones((b, h, s, d), jnp.float32), fmt, axis=-1, global_scope="row")
    lengths = jnp.full((b,), s, jnp.int32)

    def f(q, k, v, n):
        return AT.decode_attention_triton(q, k, v, n, sm_scale=d ** -0.5, **cfg)

    k = KL.to_kv_words(c) if cfg.get("decode") in ("v5", "v6") else c  # K in the word layout
    v = KL.to_kv_words(c) if cfg.get("decode") == "v6" else c  # v6: V too
    ttir = mc.lower(f, q, k, v, lengths)[0]  # the attention kernel (a combine may follow)
    bk, nw, ns = AT.tuned_knobs(fmt, cfg.get("decode") or ("v4" if d % 8 == 0 else "v3"))
    bk, nw, ns = (cfg.get("block_k") or bk, cfg.get("num_warps") or nw,
                  cfg.get("num_stages") or ns)  # what the kernel ran with
    rows = bk * (cfg.get("chains") or 1)
    st = mc.compile_ttir(ttir, nw, ns, outdir, name, units=rows)  # .ttir/.ttgir/.ptx/.sass
    return dict(regs=st["regs"], local=st["local_bytes"], warps=nw, rows=rows,
                smem=st["shared_bytes"], sm_warps=mc.resident_warps(st["regs"], nw,
                                                                    st["shared_bytes"]),
                per_row=st["sass_per_unit"], int_per_row=st["int_per_unit"], mix=st["sass_mix"])


def main(argv):
    return mc.compile_cli(
        argv, DEFAULTS, "/tmp/attn_cc", compile_config,
        f"{'config':18s} {'regs':>5s} {'spill':>5s} {'smem KB':>7s} {'warps/SM':>8s} "
        f"{'instr/row':>9s} {'int/row':>8s}  mix/row",
        lambda name, st: f"{name:18s} {st['regs']:5d} {st['local']:5d} {st['smem'] / 1024:7.1f} "
                         f"{st['sm_warps']:8d} {st['per_row']:9.1f} {st['int_per_row']:8.1f}  "
                         f"{st['mix']}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
