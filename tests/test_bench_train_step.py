"""experiments/bench_train_step.py --smoke: the RL train step per variant on a tiny shape (CPU)."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments"))

import bench_train_step  # noqa: E402


def test_smoke_times_bf16_and_trace_with_the_rl_loops_batch(tmp_path):
    res = bench_train_step.main(["--smoke", "--layers", "1", "--rows", "bf16,trace+codes",
                                 "--steps", "1", "--out", str(tmp_path)])
    rows = {r["row"]: r for r in res["rows"]}
    assert set(rows) == {"bf16", "trace+codes"}
    for name, r in rows.items():
        assert "step_s" in r, (name, r.get("error"))
        assert r["step_s"] > 0 and r["loss_finite"]
    assert rows["bf16"]["hinted_sites"] == 0 and rows["bf16"]["train_mode"] == "bf16"
    assert rows["trace+codes"]["hinted_sites"] > 0 and rows["trace+codes"]["train_mode"] == "fp4_qat"
    md = (tmp_path / "train_step.md").read_text()
    assert "| trace+codes | fp4_qat |" in md and "x bf16" in md


def test_trace_batch_carries_hints_and_codes_only_when_asked():
    import jax
    import jax.numpy as jnp

    from tests._params import init_params
    from trace_jax import experiment as X

    config = bench_train_step.load_config(str(REPO / "configs/tiny.py"), 2)
    exp = X.build(config, "trace")
    params = init_params(exp.cfg, jax.random.PRNGKey(0))
    toks = jax.random.randint(jax.random.PRNGKey(1), (2, 8), 0, exp.cfg.vocab_size, jnp.int32)
    plain = bench_train_step.rl_batch(exp, params, toks, False, jax.random.PRNGKey(2))
    coded = bench_train_step.rl_batch(exp, params, toks, True, jax.random.PRNGKey(2))
    assert sorted(plain.hints) == sorted(exp.train_numerics.hinted) and not plain.rollout_codes
    assert len(coded.rollout_codes) > len(plain.hints)  # every quantized site, not only hinted
    assert plain.experts.shape == (2, exp.cfg.n_layers, 8, exp.cfg.top_k)
