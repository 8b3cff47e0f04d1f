#!/usr/bin/env python3
"""Print named fusions of the compiled decode step (bench_rollout's engine step, shapes only:
nothing is allocated), to see what a kernel in a profile (``--profile_steps``) computes.

    python experiments/dump_step_hlo.py --engine fp4 --context 131072 --batch 27 --layers 4 \
        --kernel_layout --loop 1 --fusions input_transpose_fusion_4

(session 6's dump was of the single-step program, ``--loop 1``, profiled with one step per
call; the default ``--loop 8`` matches bench_rollout's default.)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "experiments"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import bench_rollout as BR  # noqa: E402
from trace_jax import numerics as nx  # noqa: E402


def step_hlo(engine, config, layers, context, batch, kernel_layout, fmt="nvfp4", loop=8) -> str:
    """The compiled step's HLO text: ``loop`` > 1 compiles bench_rollout's ``--loop`` program
    (what ``--profile_steps`` profiles by default; fusion names differ between the two)."""
    _, cfg = BR.load_model_config(config, layers or None, context + 1)
    mode, sites, hsites, capture, attn = BR.ENGINES[engine]
    numerics = nx.make_numerics(mode, cfg.n_layers, fmt=fmt, sites=sites, hint_sites=hsites)
    params = BR.param_structs(cfg, numerics)
    if kernel_layout:
        params = jax.eval_shape(lambda p: BR.to_kernel_layout(p, True), params)
    cache = jax.eval_shape(lambda: BR.attention.init_cache(cfg, numerics, batch, context))
    tok = jax.ShapeDtypeStruct((batch,), jnp.int32)
    step = (BR.make_loop(cfg, numerics, capture, loop) if loop > 1
            else BR.make_step(cfg, numerics, capture))
    with BR.attention_backend(attn), BR.bf16_kernel_matmul(
            BR.expert_backend(engine, kernel_layout) == "pallas bf16"):
        return step.lower(params, cache, tok, tok).compile().as_text()


def fusion_report(hlo: str, names: list[str], body_lines: int = 25) -> str:
    out = []
    for name in names:
        hlo_name = name.replace("_", "-") if "." not in name else name
        # profile kernel names use '_' where HLO uses '.' before the number and '-' elsewhere
        cands = {name, hlo_name, re.sub(r"_(\d+)$", r".\1", name),
                 re.sub(r"_(\d+)$", r".\1", name).replace("_", "-")}
        calls = [ln.strip() for ln in hlo.splitlines()
                 if any(re.search(rf"%{re.escape(c)} = ", ln) for c in cands)]
        out.append(f"== {name}: " + (calls[0][:600] if calls else "not found"))
        m = re.search(r"calls=%([\w.\-]+)", calls[0]) if calls else None
        if m:
            comp = re.search(rf"%{re.escape(m.group(1))} .*?\{{\n(.*?)\n\}}", hlo, re.S)
            if comp:
                out += [ln.strip()[:300] for ln in comp.group(1).splitlines()[:body_lines]]
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="fp4", choices=list(BR.ENGINES))
    ap.add_argument("--config", default=str(REPO / "configs/qwen3_30b_a3b.py"))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--kernel_layout", action="store_true")
    ap.add_argument("--loop", type=int, default=8,
                    help="as bench_rollout --loop (1 = the single-step program)")
    ap.add_argument("--fusions", default="", help="comma-separated profile kernel names")
    ap.add_argument("--out", default="", help="also write the whole HLO here")
    args = ap.parse_args(argv)
    hlo = step_hlo(args.engine, args.config, args.layers, args.context, args.batch,
                   args.kernel_layout, loop=args.loop)
    if args.out:
        Path(args.out).write_text(hlo)
    rep = fusion_report(hlo, [f for f in args.fusions.split(",") if f])
    print(rep)
    return rep


if __name__ == "__main__":
    main()
