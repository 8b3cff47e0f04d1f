"""Shared test helper: init_params-shaped params drawn with numpy (compiling threefry for every
leaf costs seconds on CPU)."""

import jax
import jax.numpy as jnp
import numpy as np

from trace_jax import model as M


def numpy_params(cfg: M.ModelConfig, std: float, seed: int = 0) -> dict:
    """Norm weights 1, every other weight N(0, std), as float32 jax arrays."""
    rng = np.random.default_rng(seed)
    like = jax.eval_shape(lambda: M.init_params(cfg, jax.random.key(0)))
    flat, treedef = jax.tree_util.tree_flatten_with_path(like)
    leaves = [np.ones(x.shape, np.float32) if "norm" in jax.tree_util.keystr(path)
              else (std * rng.standard_normal(x.shape)).astype(np.float32) for path, x in flat]
    return jax.tree.unflatten(treedef, [jnp.asarray(a) for a in leaves])


# Jitted library entry points, one program per config: op by op, every primitive compiles on its
# own for each new shape (every leaf's random draw, every expert weight's quantizer), which took
# seconds per call on CPU. The library runs them jitted too (run.initial_state, sync_weights).
init_params = jax.jit(M.init_params, static_argnames=("cfg", "dtype"))
pack_params = jax.jit(M.pack_params, static_argnames=("numerics", "dtype", "scale_rule",
                                                      "kernel_layout", "per_layer"))
