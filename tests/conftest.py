"""Test setup: 8 fake CPU devices (for the sharding tests), strict rank promotion, less optimised
XLA CPU code (faster compiles), and one JAX persistent compilation cache shared by the whole run.

XLA_FLAGS and the cache directory must be set before JAX initialises, so it happens here at import
time. The pytest controller imports this file before it starts the xdist workers, which inherit its
environment, as do the tests' subprocesses: all of them share one fresh cache directory, so a
program one process compiled (the tiny loop's rollout and train steps recur in many tests) is read
back instead of recompiled. Removed when the run ends; set JAX_COMPILATION_CACHE_DIR to keep one.
"""

import os
import shutil
import tempfile

# LLVM optimization level 1 instead of the default: compiles ~30% faster (a tiny training loop: 37 -> 26 s)
# and runs as fast; level 0 also compiles fast but runs slower and changed the NaN/Inf results of
# the quantizers (test_nan_inf_rows_bit_identical failed), level 1 keeps them. Without LLVM's
# expensive passes on top (compile time is ~3/4 of the suite): test_scanned_layers_equal_unrolled
# 30.2-30.9 -> 27.3 s alone; the whole suite on the 2-core machine 914 and 1036 s in two runs
# against 1002-1062 s (the machine's run-to-run spread is ~10%); every bit-identity test passes
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + " --xla_force_host_platform_device_count=8 --xla_backend_optimization_level=1"
    " --xla_llvm_disable_expensive_passes=true"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
_OWN_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _OWN_CACHE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="trace_jax_test_jit_")

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")


def pytest_unconfigure(config):
    if _OWN_CACHE and not hasattr(config, "workerinput"):  # the controller, after the workers
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


# The slowest tests (seconds on the 2-core CI machine, `pytest --durations`), started first so
# that the two xdist workers do not end with one of them running a 1-3 minute test while the other
# idles: worksteal gives each worker a contiguous share and lets an idle worker take the tail of
# the other's queue, so tests at the front run first and the quick ones fill in around them.
SLOW_FIRST = (
    "test_train.py::test_tiny_run_raises_reward_on_addition",  # ~100 s
    "test_train.py::test_sharded_run_matches_single_device_and_restores_onto_another_mesh",
    "test_quickstart.py::test_quickstart_notebook_runs",
    "test_diagnose.py::test_diagnose_cli_variants_orderings_and_config_typo",
    "test_model.py::test_scanned_layers_equal_unrolled_layers",
    "test_train.py::test_metrics_file_has_every_field_and_tensorboard",
    "test_rollout.py::test_recorded_logprobs_match_trainer_recompute",
    "test_sharding.py::test_sharded_rollout_matches_single_device_and_keeps_hints_sharded",
)


def pytest_collection_modifyitems(config, items):
    def rank(item):
        for i, name in enumerate(SLOW_FIRST):
            if name in item.nodeid:
                return i
        return len(SLOW_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order
