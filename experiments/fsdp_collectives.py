"""Collectives of the FSDP training gradient: which collective each parameter's gradient leaves
the step through, and how many bytes each collective moves (the sum over its operands).

Compiles ``jax.grad`` of a training forward (no cache) under a mesh whose ``fsdp`` axis spans
every device, with the training rule set's parameter shardings, and reads the optimized HLO. It
answers one question about ``trace_jax.moe``'s token-parallel path (a ``shard_map`` that takes
the expert weights whole): do the expert weights' gradients leave it as a full all-reduce while
the dense weights' leave as a reduce-scatter? The rows say which op reduces the dense weights'
gradients (GSPMD's) and which reduces the expert weights' (the shard_map's transposed psum), with
shapes, so the two can be compared on the backend the script runs on.

    python experiments/fsdp_collectives.py [--devices 8] [--numerics bf16] [--out PREFIX]

On the CPU (``--devices`` faked host devices) it writes ``PREFIX.{md,json}``
(default ``experiments/results/fsdp_collectives_cpu``); on a multi-GPU host it uses the GPUs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS = ("all-reduce", "reduce-scatter", "all-gather", "all-to-all", "collective-permute")
_DT_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "s8": 1, "u8": 1, "pred": 1,
             "f64": 8, "s64": 8}


def _shapes(result: str) -> list[tuple[str, tuple[int, ...]]]:
    """(dtype, dims) of every array in an HLO result type (one array or a tuple)."""
    out = []
    for dt, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", result):
        if dt in _DT_BYTES:
            out.append((dt, tuple(int(d) for d in dims.split(",") if d)))
    return out


def _origin(line: str) -> str:
    src = re.search(r'op_name="([^"]*)"', line)
    name = src.group(1) if src else "?"
    return "shard_map psum" if "shard_map" in name else "GSPMD " + name.split("/")[-1]


def collectives(hlo: str) -> list[dict]:
    """One row per array a collective instruction returns (a combined tuple collective gives one
    row per element): op, instruction, where the array came from (``shard_map psum``: the expert
    stage's transposed psum; ``GSPMD <op>``: the partitioner's collective for that op), dtype
    and shape, bytes, and the replica groups."""
    gte = {}  # (instruction, index) -> the get-tuple-element line (it keeps its own metadata)
    for line in hlo.splitlines():
        m = re.search(r"get-tuple-element\((%[\w.-]+)\), index=(\d+)", line)
        if m:
            gte[(m.group(1), int(m.group(2)))] = line
    rows = []
    for line in hlo.splitlines():
        m = re.match(r"\s*(%[\w.-]+) = (.+?) (" + "|".join(OPS) + r")(?:-start)?\(", line)
        if not m:
            continue
        name, result, op = m.groups()
        groups = re.search(r"replica_groups=(\S+?\](?: \{[^}]*\})?)", line)
        arrays = _shapes(result)
        for i, (dt, dims) in enumerate(arrays):
            src = gte.get((name, i), line) if len(arrays) > 1 else line
            rows.append(dict(op=op, instruction=name, origin=_origin(src), array=f"{dt}{list(dims)}",
                             bytes=_DT_BYTES[dt] * math.prod(dims),
                             groups=groups.group(1) if groups else "?"))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, default=8, help="faked CPU devices (CPU only)")
    ap.add_argument("--numerics", default="bf16", help="numerics mode of the training forward")
    ap.add_argument("--out", default=os.path.join(ROOT, "experiments/results/fsdp_collectives"))
    args = ap.parse_args(argv)
    if "--xla_force_host" not in os.environ.get("XLA_FLAGS", ""):  # (no effect on GPUs)
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={args.devices}")
    sys.path.insert(0, ROOT)
    import jax
    import jax.numpy as jnp
    import ml_collections
    import numpy as np

    from trace_jax import model as M
    from trace_jax import numerics as nx
    from trace_jax import sharding as S

    cfg = M.ModelConfig(vocab_size=32, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
                        head_dim=32, n_experts=8, top_k=2, d_expert=32, max_seq_len=32,
                        rope_theta=10_000.0, dtype="float32")
    n = jax.device_count()
    mesh = S.make_mesh(ml_collections.ConfigDict(dict(axes=S.DEFAULT_AXES, shape=(1, n, 1, 1))))
    rules = S.make_rules("training")
    params = M.init_params(cfg, jax.random.key(0))
    psh = S.param_shardings(cfg, mesh, rules, params)
    num = nx.make_numerics(args.numerics, cfg.n_layers)
    tokens = jnp.asarray(np.random.default_rng(1).integers(1, 32, (n, 8)), jnp.int32)

    def loss(p, t):
        logits = M.forward(p, t, cfg=cfg, numerics=num)[0]
        return jnp.mean(jax.nn.log_softmax(logits, -1)[..., 0])

    with jax.set_mesh(mesh):
        step = jax.jit(jax.grad(loss), in_shardings=(psh, S.data_sharding(mesh, rules)),
                       out_shardings=psh)
        hlo = step.lower(S.reshard(params, psh), tokens).compile().as_text()
    rows = collectives(hlo)
    platform = f"{jax.devices()[0].platform} x{n} ({jax.devices()[0].device_kind})"
    lines = [f"# FSDP gradient collectives, {platform}, numerics {args.numerics}", "",
             "`python experiments/fsdp_collectives.py` (tiny test model: 2 layers, 8 experts "
             "[8, 64, 32]; fsdp axis over every device)", "",
             "| op | instruction | origin | array | bytes |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['op']} | `{r['instruction']}` | {r['origin']} | {r['array']} | "
                     f"{r['bytes']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.out + ".md", "w") as f:
        f.write(text)
    with open(args.out + ".json", "w") as f:
        json.dump(dict(platform=platform, numerics=args.numerics, collectives=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
