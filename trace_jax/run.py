"""What ``trace_jax.main`` runs for a config. Until the RL loop lands: a numerics demo that
quantizes a "rollout" activation, perturbs it as a trainer's recomputation would, and compares
round-to-nearest with hint-guided rounding."""

import jax
import jax.numpy as jnp

from trace_jax import quant as Q


def run(config):
    key_r, key_t = jax.random.split(jax.random.key(config.seed))
    shape = (config.demo.tokens, config.demo.hidden)
    print(f"trace_jax numerics demo: activations {shape}, trainer noise {config.demo.noise:g}")
    print(f"| format | RTN code agreement | TRACE (1-bit hint) agreement | hint bytes/token |")
    print(f"|---|---|---|---|")
    for fmt in ("nvfp4", "mxfp4"):
        x_r = jax.random.normal(key_r, shape)
        x_t = x_r * (1 + config.demo.noise * jax.random.normal(key_t, shape))
        scope = "row" if fmt == "nvfp4" else "tensor"
        q_r = Q.quantize(x_r, fmt, global_scope=scope)
        hint = Q.extract_hint(q_r)
        rtn = Q.quantize(x_t, fmt, global_scope=scope)
        guided = Q.guided_quantize(x_t, hint)
        print(f"| {fmt} | {float(Q.code_agreement(rtn, q_r)):.4%} | "
              f"{float(Q.code_agreement(guided, q_r)):.4%} | {hint.nbytes / shape[0]:.0f} |")
