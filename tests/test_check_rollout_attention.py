"""experiments/check_rollout_attention.py: the kernel / reference comparison counts only the
response positions before a row's first differing token."""

import numpy as np
import pytest

from tests._scripts import load_experiment

CR = load_experiment("check_rollout_attention")


def test_compare_stops_at_the_first_differing_token():
    tok_a = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    tok_b = np.array([[1, 2, 9, 4], [5, 6, 7, 8]])  # row 0 differs from position 2 on
    lp_a = np.zeros((2, 4))
    lp_b = np.array([[0.0, 0.5, 7.0, 7.0], [0.0, 0.1, 0.2, 0.3]])
    mask = np.array([[False, True, True, True], [False, True, True, False]])
    r = CR.compare(lp_a, lp_b, tok_a, tok_b, mask)
    assert r["positions"] == 3  # row 0: position 1; row 1: positions 1, 2
    assert r["gap_max"] == 0.5
    assert r["gap_mean"] == pytest.approx((0.5 + 0.1 + 0.2) / 3)
    assert r["rows_identical"] == 0.5


def test_run_swaps_only_the_decode_attention_and_restores(monkeypatch):
    """``run``: the "reference" backend takes away only the decode attention's kernel (other
    lookups go to the original, no recursion), the "kernel" one supplies it (interpret mode on
    a CPU), both precisions are run, and ``ops._kernel`` is restored afterwards."""
    import types

    import jax
    import jax.numpy as jnp

    from configs import tiny
    from tests._params import init_params
    from trace_jax import model as M
    from trace_jax import ops
    from trace_jax import rollout as R

    original = lambda mod, name: f"{mod}.{name}"  # noqa: E731
    monkeypatch.setattr(ops, "_kernel", original)
    seen = []

    def fake_generate(params, prompts, lens, key, *, numerics, **kw):
        seen.append((numerics.attention_p, ops._kernel("decode_attention", "decode_attention"),
                     ops._kernel("attention_mgpu", "decode_attention_mgpu")))
        toks = jnp.zeros(prompts.shape, jnp.int32)
        return types.SimpleNamespace(logprobs=jnp.zeros(prompts.shape), tokens=toks,
                                     response_mask=toks > 0)

    monkeypatch.setattr(R, "generate", fake_generate)
    config = tiny.get_config()
    params = init_params(M.ModelConfig.from_config(config.model), jax.random.key(0))
    out = CR.run(config, params, 1, "fp4_rollout")
    assert set(out) == {"f32", "bf16"}
    kernels = {(p, k is None) for p, k, _ in seen}
    assert kernels == {("f32", True), ("bf16", True), ("f32", False), ("bf16", False)}
    assert {m for _, _, m in seen} == {"attention_mgpu.decode_attention_mgpu", None}
    assert ops._kernel is original


def test_site_differences_counts_recorded_positions_only():
    """Differing bits of codes, scales and global scales, as shares of the entries at positions
    both rollouts recorded; sites without a difference are left out."""
    import types

    def guidance(bits, scales, recorded):
        h = types.SimpleNamespace(bits=np.asarray(bits, np.uint8),
                                  scales=np.asarray(scales, np.uint8),
                                  global_scale=np.ones((1, 2, 1), np.float32))
        return types.SimpleNamespace(recorded=np.asarray(recorded), hints={"s": h, "t": h})

    a = guidance([[[1, 2], [3, 4]]], [[[7], [7]]], [[True, True]])
    b = guidance([[[1, 2], [3, 5]]], [[[7], [7]]], [[True, True]])
    b.hints["t"] = a.hints["t"]
    assert CR.site_differences(a, b) == {"s": {"bits": 0.25}}
    c = guidance([[[1, 2], [3, 5]]], [[[7], [8]]], [[True, False]])  # position 1 not recorded
    assert CR.site_differences(a, c) == {}
