"""The diagnosis command end to end (CLI, JSON) on a shrunken tiny config: every variant, the
expected orderings, the table, and a config typo."""

import json
import subprocess
import sys

import pytest

from trace_jax import diagnose

# the notebook's shrunken config (experiments/quickstart.ipynb): small programs, quick compiles
SMALL = ["--config=configs/tiny.py", "--config.model.n_layers=2",
         "--config.rollout.batch_prompts=4", "--config.rollout.group_size=2",
         "--config.rollout.max_new_tokens=4"]


def test_diagnose_cli_variants_orderings_and_config_typo():
    cmd = [sys.executable, "-m", "trace_jax.diagnose", *SMALL, "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(res) == {"bf16", "fp4_naive", "fp4_qat_rtn", "fp4_qat_rtn+r3", "trace", "trace+r3",
                        "hint_cost"}
    r3 = res["trace+r3"]
    assert r3["routing_agreement"] == 1.0
    assert r3["code_agreement_hinted"] >= 0.999
    assert r3["code_agreement_hinted"] >= res["fp4_qat_rtn"]["code_agreement_hinted"]
    # FP4 rollout against a BF16 trainer is the worst-aligned pairing
    assert res["fp4_naive"]["logprob_gap_max"] > res["bf16"]["logprob_gap_max"]
    assert res["fp4_naive"]["logprob_gap_max"] > r3["logprob_gap_max"]
    # exact bf16 casts (numerics.COMPILER_OPTIONS): on the CPU the rollout and the trainer run
    # the same arithmetic, so every variant whose trainer replays the rollout's numerics agrees
    # bit for bit (with XLA's excess precision: gaps of 1e-3..7e-3, RTN codes 90% equal)
    for v in ("bf16", "fp4_qat_rtn", "fp4_qat_rtn+r3", "trace", "trace+r3"):
        assert res[v]["logprob_gap_max"] <= 1e-4, (v, res[v])
    assert res["fp4_qat_rtn"]["code_agreement_hinted"] == 1.0
    hc = res["hint_cost"]
    assert hc["hint_bytes_per_token"] == hc["expected_bytes_per_token"] > 0
    assert hc["compiler_options"]["xla_allow_excess_precision"] is False
    assert sum(r3["code_distance_hist"]) > 0
    table = diagnose.format_table(res)
    assert "| trace+r3 |" in table and "| fp4_qat_rtn+r3 |" in table and "hint bytes/token" in table
    assert "xla_allow_excess_precision" in table

    bad = subprocess.run(cmd[:4] + ["--config.modle.n_layers=2"], capture_output=True, text=True,
                         timeout=600)
    assert bad.returncode == 1, bad.stderr[-2000:]
    last = bad.stderr.strip().splitlines()[-1]  # one line naming the override, no traceback
    assert "--config.modle.n_layers" in last and '"model"' in last, last
    assert "Traceback" not in bad.stderr


def test_trainer_pass_compiles_once_per_numerics():
    """The trainer pass is compiled once per (numerics, variant), not per call: a second batch,
    and numerics naming another P (the pass takes P from the experiment's rollout numerics),
    add no program; another mode does, and so does an explicit ``attention_p`` override."""
    import types

    import jax
    import jax.numpy as jnp

    from configs import tiny
    from trace_jax import experiment as X

    config = tiny.get_config()
    config.model.n_layers = 2
    exp = X.build(config)
    params = diagnose.M.init_params(exp.cfg, jax.random.key(0))
    num = exp.rollout_numerics.with_mode("bf16")

    def ro(seed):
        toks = jax.random.randint(jax.random.key(seed), (2, 8), 0, exp.cfg.vocab_size)
        return types.SimpleNamespace(tokens=toks.astype(jnp.int32), guidance=types.SimpleNamespace(
            hints={}, experts=None, recorded=None))

    diagnose._trainer_pass.clear_cache()
    for seed, n in ((0, num), (1, num), (0, num.with_attention_p("bf16"))):
        diagnose.trainer_pass(params, ro(seed), exp, n, hints=False, replay=False)
        assert diagnose._trainer_pass._cache_size() == 1
    diagnose.trainer_pass(params, ro(0), exp, num.with_mode("fp4_qat"), hints=False,
                          replay=False)
    assert diagnose._trainer_pass._cache_size() == 2
    # an explicit trainer P other than the rollout's ("f32" here) is another program
    lp_f32, _, _ = diagnose.trainer_pass(params, ro(0), exp, num, hints=False, replay=False)
    lp_bf16, _, _ = diagnose.trainer_pass(params, ro(0), exp, num, hints=False, replay=False,
                                          attention_p="bf16")
    assert diagnose._trainer_pass._cache_size() == 3
    assert (lp_f32 != lp_bf16).any()


def test_a_checkpoint_of_another_numerics_is_refused(tmp_path):
    """diagnose --checkpoint compares the saved run's model / numerics / tokenizer with --config
    (loading checks only shapes: an MXFP4 run was diagnosed under NVFP4 numerics)."""
    from configs import tiny

    run = tmp_path / "run"
    (run / "checkpoints" / "4").mkdir(parents=True)
    saved = tiny.get_config()
    saved.numerics.fmt = "mxfp4"
    (run / "config.json").write_text(saved.to_json_best_effort())
    for path in (run, run / "checkpoints", run / "checkpoints" / "4"):
        with pytest.raises(ValueError, match="numerics.fmt: 'mxfp4' there, 'nvfp4' here"):
            diagnose.check_checkpoint_config(str(path), tiny.get_config())
    diagnose.check_checkpoint_config(str(run), saved)  # its own config: fine
    diagnose.check_checkpoint_config(str(tmp_path / "bare"), saved)  # no config.json: unchecked
