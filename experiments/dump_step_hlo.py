#!/usr/bin/env python3
"""Print named fusions of the compiled decode step (bench_rollout's engine step, shapes only:
nothing is allocated), to see what a kernel in a profile (``--profile_steps``) computes.

    python experiments/dump_step_hlo.py --engine fp4 --context 131072 --batch 27 --layers 4 \
        --kernel_layout --loop 1 --fusions input_transpose_fusion_4
    python experiments/dump_step_hlo.py --hlo STEP_HLO.txt --by_source PROFILE.json

``--by_source`` attributes every kernel of a ``--profile_steps`` profile (its JSON) to the Python
source lines of the ops inside its fusion (the compiled HLO's stack frames: file:function:line,
innermost first), and sums the device time per innermost function; ``--hlo`` reads a saved
``--out`` dump instead of compiling (no GPU needed).

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


def _frames(hlo: str) -> dict[int, tuple[str, int]]:
    """The HLO module's stack frames: id -> ("file:function:line", parent id; 0 = none). The
    dump prints ``parent_frame_id`` as the parent's id + 1 (0: no parent)."""
    sec, files, funcs, locs, frames = None, {}, {}, {}, {}
    for ln in hlo.splitlines()[:100000]:
        t = ln.strip()
        if t in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            sec = t
            continue
        if t.startswith(("%", "ENTRY", "ROOT")):
            break
        m = re.match(r"(\d+) (.*)", t)
        if not m or sec is None:
            continue
        i, rest = int(m.group(1)), m.group(2)
        if sec == "FileNames":
            files[i] = Path(rest.strip('"')).name
        elif sec == "FunctionNames":
            funcs[i] = rest.strip('"').split(".")[-1]
        else:
            d = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", rest)}
            if sec == "FileLocations":
                locs[i] = f"{files[d['file_name_id']]}:{funcs[d['function_name_id']]}:{d['line']}"
            else:
                frames[i] = (locs[d["file_location_id"]], d.get("parent_frame_id", 0) - 1)
    return frames


def source_report(hlo: str, profile: dict, depth: int = 2,
                  skip=("bench_rollout", "dump_step_hlo")) -> str:
    """Per profiled kernel: us per step, launches, and the (up to two) source chains most of its
    fusion's ops come from; then device time summed per innermost source function."""
    import collections

    frames = _frames(hlo)

    def chain(fid):
        out, seen = [], set()
        while fid > 0 and fid in frames and fid not in seen:  # innermost frame first
            seen.add(fid)
            loc, fid = frames[fid]
            if not loc.startswith(skip):
                out.append(loc)
        return out[:depth]

    defs = {}
    for ln in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = ", ln)
        if m:
            defs.setdefault(m.group(1), ln)
    comps = {m.group(1): m.group(2) for m in re.finditer(
        r"^%([\w.\-]+) .*?\{\n(.*?)\n\}", hlo, re.S | re.M)}
    lines, per_fn = [], collections.Counter()
    for r in profile["rows"]:
        k = r["kernel"]
        dotted = re.sub(r"_(\d+)$", r".\1", k)
        cands = [k, dotted, dotted.replace("_", "-"),
                 re.sub(r"_(\d+)_(\d+)$", r".\1.\2", k)]  # sort_7_1 = %sort.7.1
        ln = next((defs[c] for c in cands if c in defs), "")
        ids = collections.Counter(re.findall(r"stack_frame_id=(\d+)", ln))
        m = re.search(r"calls=%([\w.\-]+)", ln)
        if m and m.group(1) in comps:
            ids.update(re.findall(r"stack_frame_id=(\d+)", comps[m.group(1)]))
        srcs = [" < ".join(chain(int(i))) for i, _ in ids.most_common(2)]
        us = r["ns_per_call"] / 1e3
        per_fn[srcs[0].split(" < ")[0].rsplit(":", 1)[0] if srcs and srcs[0] else k] += us
        lines.append(f"{us:8.1f} us x{r['launches_per_call']:5.1f}  {k[:40]:40s}  "
                     + " || ".join(srcs)[:220])
    lines += ["", "device us per step by innermost source function (kernels: their own name):"]
    lines += [f"{v:8.1f}  {name}" for name, v in per_fn.most_common()]
    return "\n".join(lines)


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
    ap.add_argument("--hlo", default="", help="read this saved HLO dump instead of compiling")
    ap.add_argument("--by_source", default="",
                    help="a --profile_steps profile JSON: attribute its kernels to source lines")
    args = ap.parse_args(argv)
    if args.hlo:
        hlo = Path(args.hlo).read_text()
    else:
        hlo = step_hlo(args.engine, args.config, args.layers, args.context, args.batch,
                       args.kernel_layout, loop=args.loop)
    if args.out:
        Path(args.out).write_text(hlo)
    rep = fusion_report(hlo, [f for f in args.fusions.split(",") if f])
    if args.by_source:
        import json

        rep += "\n" + source_report(hlo, json.loads(Path(args.by_source).read_text()))
    print(rep)
    return rep


if __name__ == "__main__":
    main()
