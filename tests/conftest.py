"""Test setup: 8 fake CPU devices (for the sharding tests), strict rank promotion, less optimised
XLA CPU code (faster compiles), and no JAX persistent compilation cache.

XLA_FLAGS and the cache switch must be set before JAX initialises, so it happens here at import
time. The pytest controller imports this file before it starts the xdist workers, which inherit its
environment, as do the tests' subprocesses.

The persistent cache is off unless JAX_COMPILATION_CACHE_DIR is set: a CI worker segfaulted inside
JAX's cache write (`executable.serialize()` in `compilation_cache.put_executable_and_time`, session
46's CI), and the cache no longer pays. On the 2-core machine in session 47, the whole suite took
645 s with a shared cache (139 programs written, 32 MB) and 661 s without it, with two more tests.
"""

import os

# XLA CPU codegen at LLVM optimization level 0, without LLVM's expensive passes: compile time is
# most of the suite, and level 0 compiles the 2-layer model's programs 11-43% faster than level 1
# while running them 4-6x slower (experiments/results/cpu_compile.md, session 33), which only the few long
# loops feel. The whole suite on the 2-core machine: 892-908 s at level 0 against 1232-1345 s at
# level 1 (user CPU 28.0-28.5 against 39.2 minutes). Every bit-identity test passes at both levels
# since e2m1 stopped taking the sign of a NaN product (the compiler's choice) into a code.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + " --xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"
    " --xla_llvm_disable_expensive_passes=true"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")


# The slowest tests (seconds on the 2-core CI machine, `pytest --durations`), handed out first so
# that the two xdist workers do not end with one of them running a 1-2 minute test while the other
# idles: the load scheduler gives the tests out in this order as workers free up.
SLOW_FIRST = (
    "test_train.py::test_tiny_run_raises_reward_on_addition",  # ~65 s
    "test_train.py::test_sharded_run_matches_single_device_and_restores_onto_another_mesh",
    "test_quickstart.py::test_quickstart_notebook_runs",
    "test_diagnose.py::test_diagnose_cli_variants_orderings_and_config_typo",
    "test_model.py::test_scanned_layers_equal_unrolled_layers",
    "test_train.py::test_metrics_file_has_every_field_and_tensorboard",
    "test_rollout.py::test_recorded_logprobs_match_trainer_recompute",
    "test_sharding.py::test_sharded_rollout_matches_single_device_and_keeps_hints_sharded",
)

# Module fixtures that take 10-40 s (a whole training run, one-device reference rollouts): the
# tests using one run on one worker (pytest-xdist's loadgroup), so the fixture is computed once.
SHARED_FIXTURES = ("finished_run", "rollout_ref", "fp4_ref")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    def rank(item):
        for i, name in enumerate(SLOW_FIRST):
            if name in item.nodeid:
                return i
        return len(SLOW_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order
    for item in items:
        shared = [f for f in SHARED_FIXTURES if f in getattr(item, "fixturenames", ())]
        if shared:
            item.add_marker(pytest.mark.xdist_group(shared[0]))
