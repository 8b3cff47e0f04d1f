"""Parameter counts and bytes from shapes alone (nothing is allocated).

``python -m trace_jax.params --config=configs/qwen3_30b_a3b.py [--json]``
"""

from __future__ import annotations

import json
import math

from absl import app, flags

from trace_jax import model as M
from trace_jax import numerics as nx
from trace_jax import quant as Q


EXPERT_LEAVES = ("w_gate", "w_up", "w_down")


def count(cfg: M.ModelConfig, fmt: str = "nvfp4") -> dict:
    """Total and active-per-token parameters, and bytes in BF16 and with FP4 routed experts."""
    shapes = M.param_shapes(cfg)
    total = expert = 0
    for path, (shape, _) in _leaves(shapes):
        n = math.prod(shape)
        total += n
        if "moe" in path and path[-1] in EXPERT_LEAVES and "shared" not in path:
            expert += n
    dense = total - expert
    active = dense + expert * cfg.top_k // cfg.n_experts
    f = Q.get_format(fmt)
    n_expert_tensors = 3 * cfg.n_layers * cfg.n_experts
    fp4_expert_bytes = expert * f.bits_per_element / 8 + (4 * n_expert_tensors if f.has_global_scale else 0)
    return {
        "total_params": total,
        "active_params_per_token": active,
        "routed_expert_params": expert,
        "bf16_bytes": 2 * total,
        "fp4_bytes": int(2 * dense + fp4_expert_bytes),
        "fp4_format": fmt,
    }


def _leaves(tree, prefix=()):
    for k, v in tree.items():
        if isinstance(v, dict):
            yield from _leaves(v, prefix + (k,))
        else:
            yield prefix + (k,), v


def main(argv):
    del argv
    cfg = M.ModelConfig.from_config(_CONFIG.value.model)
    fmt = _CONFIG.value.numerics.fmt
    c = count(cfg, fmt)
    if _JSON.value:
        print(json.dumps(c))
        return
    print("| quantity | value |\n|---|---|")
    print(f"| total params | {_si(c['total_params'])} |")
    print(f"| active params / token | {_si(c['active_params_per_token'])} |")
    print(f"| routed-expert params | {_si(c['routed_expert_params'])} |")
    print(f"| BF16 bytes | {_si(c['bf16_bytes'])}B |")
    print(f"| {fmt} routed experts + BF16 rest | {_si(c['fp4_bytes'])}B |")


def _si(n: float) -> str:
    for unit, f in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= f:
            return f"{n / f:.3f} {unit}"
    return f"{n:.0f} "


def _define_flags():
    """Flags are defined only when run as a program, so importing this module (tests, notebooks,
    other commands) never collides with another module's --config."""
    global _CONFIG, _JSON
    from ml_collections import config_flags  # only the command needs it (GPU hosts may lack it)

    _CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a get_config() file.")
    _JSON = flags.DEFINE_bool("json", False, "Print one JSON object instead of a table.")
    flags.mark_flags_as_required(["config"])


if __name__ == "__main__":
    from trace_jax.cli import parse_flags

    _define_flags()
    app.run(main, flags_parser=parse_flags)
