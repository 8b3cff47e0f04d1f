"""Multi-host runs on JAX's own runtime: ``jax.distributed.initialize`` from the config or the
environment, and the few host-side helpers a multi-controller loop needs.

Every process runs the same program (``python -m trace_jax.main --config=...``) and sees all
devices of all hosts as one mesh (``config.mesh``). Data: the synthetic task batches are a
deterministic function of (seed, step), so every process builds the same global batch and
places only its own shards (:func:`put_global`). Host reads of sharded results (completions for
the reward) gather across processes (:func:`to_host`). Only process 0 writes metrics and logs;
orbax checkpoints are written collectively by all processes.

Config (``config.distributed``)::

    enabled = "auto"          # "auto" | "yes" | "no"
    coordinator_address = ""  # "host:port" of process 0; "" = from the environment
    num_processes = 0         # 0 = from the environment
    process_id = -1           # -1 = from the environment
    local_device_ids = ""     # e.g. "0,1"; default: JAX's choice (all local GPUs with an explicit
                              # coordinator; one GPU per process, the local rank, under SLURM/MPI)

"auto" initializes when the environment says this is one of several processes
(``JAX_COORDINATOR_ADDRESS`` / ``TRACE_JAX_COORDINATOR``, SLURM with more than one task, Open MPI
with more than one rank) or when ``coordinator_address`` is set; with neither it is a
single-process run and nothing happens. Under SLURM / Open MPI, JAX gives each process the GPU of
its local rank: launch one task per GPU. With an explicit coordinator each process takes all its
host's GPUs (one process per host). The mesh must cover every process's devices (``run`` checks).
Launch recipe: README, "Several GPUs and hosts".
"""

from __future__ import annotations

import os

import jax
import numpy as np

ENABLED = ("auto", "yes", "no")


def _env_says_multiprocess() -> bool:
    env = os.environ
    if env.get("JAX_COORDINATOR_ADDRESS") or env.get("TRACE_JAX_COORDINATOR"):
        return True
    if int(env.get("SLURM_NTASKS", "1") or 1) > 1:
        return True
    return int(env.get("OMPI_COMM_WORLD_SIZE", "1") or 1) > 1


def initialize(dcfg) -> bool:
    """Call ``jax.distributed.initialize`` as ``dcfg`` (``config.distributed``, or None) asks;
    returns whether this is a multi-process run. Must run before anything touches a device."""
    if dcfg is None:
        return False
    enabled = str(dcfg.get("enabled", "auto"))
    if enabled not in ENABLED:
        raise ValueError(f"distributed.enabled must be one of {ENABLED}, got {enabled!r}")
    addr = dcfg.get("coordinator_address", "") or os.environ.get("TRACE_JAX_COORDINATOR", "")
    if enabled == "no" or (enabled == "auto" and not addr and not _env_says_multiprocess()):
        return False
    kw = {}
    if addr:
        kw["coordinator_address"] = addr
    n, pid = int(dcfg.get("num_processes", 0)), int(dcfg.get("process_id", -1))
    if n < 0 or (n and not -1 <= pid < n):
        raise ValueError(f"distributed: process_id={pid} is not in 0..{n - 1} "
                         f"(num_processes={n})")
    if n:
        kw["num_processes"] = n
    if pid >= 0:
        kw["process_id"] = pid
    ids = str(dcfg.get("local_device_ids", "") or "")
    if ids:
        kw["local_device_ids"] = [int(i) for i in ids.split(",")]
    if os.environ.get("JAX_PLATFORMS", "") == "cpu":  # CPU processes talk through gloo
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(**kw)
    return jax.process_count() > 1


def is_main_process() -> bool:
    return jax.process_index() == 0


def put_global(tree, shardings):
    """Place ``tree`` onto (possibly multi-host) ``shardings``. Leaves already spread over
    several devices are resharded by ``jax.device_put``; host values and single-device arrays
    (which every process holds identically: deterministic batches) are cut up on the host, each
    process transferring only its addressable shards."""
    def one(x, s):
        if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1:
            return jax.device_put(x, s)
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, s, lambda idx: x[idx])
    return jax.tree.map(one, tree, shardings)


def to_host(x) -> np.ndarray:
    """A (possibly multi-host sharded) array as one numpy array on every process."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)
