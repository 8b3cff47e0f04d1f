"""experiments/bench_rollout.py --smoke: every engine runs 2 decode steps on a tiny shape (CPU)."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments"))

import bench_rollout  # noqa: E402


def test_smoke_runs_every_engine(monkeypatch, tmp_path, capsys):
    """Every engine's steps, breakdown and prefill on a tiny shape; ``--attn_p_precision bf16``
    reaches the decode attention of the steps and of the breakdown's attention timing (which
    once kept the default f32), and the result names it."""
    from trace_jax import ops
    seen = []
    real = ops.decode_attention

    def spy(*a, p_precision="f32", **k):
        seen.append(p_precision)
        return real(*a, p_precision=p_precision, **k)

    monkeypatch.setattr(ops, "decode_attention", spy)
    res = bench_rollout.main(["--smoke", "--attn_p_precision", "bf16", "--out", str(tmp_path)])
    assert len(seen) >= 2 and set(seen) == {"bf16"}, seen
    assert "P in P.V bf16" in res["attention_kernel"]
    out = capsys.readouterr().out
    rows = {r["engine"]: r for r in res["rows"]}
    assert set(rows) == set(bench_rollout.ENGINES)
    for name, r in rows.items():
        assert "step_s" in r, (name, r.get("error"))
        assert r["steps_timed"] == 2 and r["tokens_per_s"] > 0 and r["batch"] >= 1
        assert r["kv_read_bytes"] > 0 and 0 < r["experts_touched_frac"] <= 1
    # FP4 KV: 0.69 B/element at head_dim 32 (0.59 at 128) vs 2 for bf16
    assert rows["fp4"]["cache_bytes_run"] * 2.5 < rows["bf16"]["cache_bytes_run"]
    assert rows["fp4w_bf16kv"]["cache_bytes_run"] == rows["bf16"]["cache_bytes_run"]
    assert "breakdown" in rows["bf16"] and "breakdown" in rows["fp4"]
    assert {p["engine"] for p in res["prefill"]} == {"bf16", "fp4"}
    assert all(p["tokens_per_s"] > 0 for p in res["prefill"])
    saved = json.loads((tmp_path / "rollout_throughput.json").read_text())
    assert saved["jax_version"] and saved["device"] and "--smoke" in saved["command"]
    md = (tmp_path / "rollout_throughput.md").read_text()
    assert "| engine | context | batch |" in md and "## Targets" in md
    assert [c["context"] for c in res["ceiling"]] == sorted({r["context"] for r in res["rows"]})
    assert "## Byte ceiling of the ratio" in md
    assert out.rstrip().endswith(md.rstrip().splitlines()[-1])  # the markdown is printed last


def test_kernel_layout_routes_expert_matmuls_to_the_pallas_kernels(tmp_path, monkeypatch):
    from pallas_kernels import fp4_matmul as FM
    calls = {"bf16": 0, "fp4": 0}
    real_bf16, real_fp4 = FM.bf16_grouped_matmul, FM.fp4_grouped_matmul

    def bf16(*a, **k):
        calls["bf16"] += 1
        return real_bf16(*a, **k)

    def fp4(*a, **k):
        calls["fp4"] += 1
        return real_fp4(*a, **k)

    monkeypatch.setattr(FM, "bf16_grouped_matmul", bf16)
    monkeypatch.setattr(FM, "fp4_grouped_matmul", fp4)
    # one run also checks --loop (steps per timed call) and --profile_steps (the kernel table)
    res = bench_rollout.main(["--smoke", "--kernel_layout", "--engines", "bf16,bf16_xla,fp4",
                              "--prefill_len", "0", "--breakdown", "never", "--loop", "2",
                              "--profile_steps", "2", "--out", str(tmp_path)])
    for row in res["rows"]:
        assert row["steps_per_call"] == 2 and row["tokens_per_s"] > 0, row
    prof = res["rows"][-1]["profile"]
    assert prof["busy_ms"] > 0 and prof["launches"] >= 1 and prof["top"]
    md = (tmp_path / "profile" / "fp4_64.md").read_text()
    assert md.startswith("fp4 @ 64: device busy") and "| kernel | hlo op |" in md
    via = {r["engine"]: r["experts_via"] for r in res["rows"]}
    # tiny.py experts (64 x 64, nvfp4) take the Mosaic GPU layout under the default "auto"
    assert via == {"bf16": "pallas bf16", "bf16_xla": "ragged_dot", "fp4": "pallas fp4 mosaic"}
    assert all("step_s" in r for r in res["rows"])
    assert calls["bf16"] > 0 and calls["fp4"] > 0  # traced through the kernels' entry points


def test_batch_sizing_same_budget():
    """At equal HBM the FP4 engine fits more sequences; the budget is respected."""
    import argparse

    cfg, _ = bench_rollout.load_model_config(str(REPO / "configs/qwen3_30b_a3b.py"), None, 131073)
    args = argparse.Namespace(hbm_gb=130.0, workspace_gb=3.0, max_batch=4096, fmt="nvfp4")
    for ctx in (8192, 32768, 131072):
        bb, sb = bench_rollout.size_batch(cfg, False, False, ctx, args)
        bf, sf = bench_rollout.size_batch(cfg, True, True, ctx, args)
        assert 1 <= bb < bf
        for b, s in ((bb, sb), (bf, sf)):
            used = s["weights_bytes"] + s["workspace_bytes"] + b * s["per_seq_bytes"]
            assert used <= 130e9 < used + s["per_seq_bytes"]
    assert 60e9 < sb["weights_bytes"] < 63e9  # ~61 GB of bf16 weights


def test_loop_runs_the_same_steps_as_per_call_timing():
    """--loop N: one jitted fori_loop of N decode steps ends where N single-step calls end."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from trace_jax import numerics as nx

    _, cfg = bench_rollout.load_model_config(str(REPO / "configs/tiny.py"), 1, 65)
    num = nx.make_numerics("fp4_rollout", cfg.n_layers)
    key = jax.random.PRNGKey(0)
    params = bench_rollout.random_params(cfg, num, key)
    tok = jnp.arange(3, dtype=jnp.int32)
    pos = jnp.full((3,), 40, jnp.int32)
    step = bench_rollout.make_step(cfg, num, True)
    cache = bench_rollout.random_cache(cfg, num, 3, 64, key)
    t = tok
    for _ in range(3):
        t, ex, hints, cache = step(params, cache, t, pos)
    cache2 = bench_rollout.random_cache(cfg, num, 3, 64, key)
    t2, ex2, hints2, _ = bench_rollout.make_loop(cfg, num, True, 3)(params, cache2, tok, pos)
    np.testing.assert_array_equal(np.asarray(t2), np.asarray(t))
    np.testing.assert_array_equal(np.asarray(ex2), np.asarray(ex))
    assert jax.tree.structure(hints2) == jax.tree.structure(hints) and hints
    # bench_rollout --loop 2 end to end: test_kernel_layout_routes_expert_matmuls_to_the_pallas_kernels


def test_random_mgpu_cache_holds_finite_moderate_scales(monkeypatch):
    """The benchmark's random caches in the "mgpu" layout decode to finite values with the
    kv_words caches' scale range (E4M3 0.25 .. 1.125), not arbitrary scale-code bits."""
    import dataclasses

    import jax

    import jax.numpy as jnp
    import numpy as np

    from configs import small
    from pallas_kernels import mgpu_kv_layout as MK
    from trace_jax import attention, model as M, numerics as nx, quant as Q
    monkeypatch.setattr(attention, "FP4_CACHE_LAYOUT", "mgpu")
    cfg = dataclasses.replace(M.ModelConfig.from_config(small.get_config().model), n_layers=1)
    cache = bench_rollout.random_cache(cfg, nx.make_numerics("fp4_rollout", 1), 2, 128,
                                       jax.random.key(0))
    for q in MK.from_mgpu_kv(cache[0]["kv"]):
        assert bool(jnp.all(jnp.isfinite(Q.dequantize(q))))
        sb = np.asarray(jax.lax.bitcast_convert_type(q.scales, jnp.uint8))
        assert sb.min() >= 0x28 and sb.max() < 0x39


def _row(engine, context, batch, total_bytes, step_s):
    return {"engine": engine, "context": context, "batch": batch, "total_bytes": total_bytes,
            "step_s": step_s, "tokens_per_s": batch / step_s, "achieved_Bps": total_bytes / step_s}


def test_byte_ceiling_is_the_bytes_per_token_ratio():
    # bf16: 2 tokens for 100 B in 0.2 s (10 tok/s, 50 B/token); fp4: 8 tokens for 200 B in 0.4 s
    # (20 tok/s, 25 B/token): ratio 2x, and 2x is also all that equal bandwidth allows
    rows = [_row("bf16", 7, 2, 100.0, 0.2), _row("fp4", 7, 8, 200.0, 0.4),
            _row("bf16", 9, 1, 10.0, 1.0), {"engine": "fp4", "context": 9, "error": "OOM"}]
    (c,) = bench_rollout.byte_ceiling(rows, {7: 3.0}, peak_Bps=1000.0)
    assert c["context"] == 7 and c["ceiling_x"] == 2.0 and c["ratio_x"] == 2.0
    assert c["share_of_ceiling"] == 1.0
    assert c["fp4_Bps_for_target"] == 3.0 * 10 * 25  # 3x of 10 tok/s at 25 B/token
    assert c["ceiling_x_at_peak"] == 1000.0 / 25 / 10
    md = bench_rollout.ceiling_table([c], 1000.0)
    assert md.count("\n") == 2 and "| 7 |" in md and "2.00x" in md


def test_ceiling_from_a_saved_result(tmp_path, capsys):
    saved = {"device": "dev", "command": "cmd",
             "rows": [_row("bf16", 32768, 4, 400.0, 1.0), _row("fp4", 32768, 16, 800.0, 2.0)]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(saved))
    res = bench_rollout.main(["--ceiling_from", str(path), "--hbm_peak_tbs", "0"])
    assert res["ceiling"][0]["ceiling_x"] == 100.0 / 50.0
    assert "ceiling_x_at_peak" not in res["ceiling"][0]
    assert "| 32768 |" in capsys.readouterr().out
    saved["rows"] = saved["rows"][:1]
    path.write_text(json.dumps(saved))
    with pytest.raises(SystemExit, match="no context with both"):
        bench_rollout.main(["--ceiling_from", str(path)])


def test_hbm_peak_defaults_to_the_named_devices_datasheet():
    assert bench_rollout.hbm_peak_Bps(None, "gpu:NVIDIA H200") == 4.8e12
    assert bench_rollout.hbm_peak_Bps(None, "gpu:NVIDIA H100 80GB HBM3") == 3.35e12
    assert bench_rollout.hbm_peak_Bps(None, "cpu:cpu") is None
    assert bench_rollout.hbm_peak_Bps(None, "gpu:NVIDIA GH200 480GB") is None  # not an H200
    assert bench_rollout.hbm_peak_Bps(2.0, "gpu:NVIDIA H200") == 2.0e12
    assert bench_rollout.hbm_peak_Bps(0.0, "gpu:NVIDIA H200") is None



def test_unstack_freeing_matches_unstack_layers_and_frees_the_stacked_weights():
    """The benchmark's leaf-by-leaf unstack gives model.unstack_layers' tree (FP4 QTensor
    experts included) and deletes each stacked leaf, so the 30B bf16 weights never exist twice."""
    import jax
    import numpy as np

    from trace_jax import model as M
    from trace_jax import numerics as nx

    cfg, _ = bench_rollout.load_model_config(str(REPO / "configs/tiny.py"), None, 64)
    numerics = nx.make_numerics("fp4_rollout", cfg.n_layers)
    stacked = bench_rollout.random_params(cfg, numerics, jax.random.PRNGKey(0))
    want = M.unstack_layers(jax.tree.map(np.asarray, stacked))
    stacked_leaves = jax.tree.leaves(stacked["layers"])
    # the device split for small leaves, the host path for the rest (the 30B bf16 experts)
    got = bench_rollout.unstack_freeing(stacked, host_above_bytes=min(a.nbytes for a in
                                                                   stacked_leaves) + 1)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    assert len(got["layers"]) == cfg.n_layers
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(g), w)
    assert all(a.is_deleted() for a in stacked_leaves)


def test_ratio_target_met_when_bf16_does_not_fit_one_sequence():
    rows = [_row("fp4", 131072, 12, 400.0, 1.0),
            {"engine": "bf16", "context": 131072, "batch": 0, "error": "does not fit"}]
    t = bench_rollout.evaluate_targets(rows, [131072])
    row = next(r for r in t if "131072" in r["target"] and "x bf16" in r["target"])
    assert row["met"] is True and "runs 12" in row["shortfall"]
    rows[0] = {"engine": "fp4", "context": 131072, "batch": 0, "error": "does not fit"}
    row = next(r for r in bench_rollout.evaluate_targets(rows, [131072]) if "x bf16" in r["target"]
               and "131072" in r["target"])
    assert row["met"] is None


def test_rerender_a_saved_h100_result(tmp_path):
    """Session 39's H100 run (saved with the H200's 4.8 TB/s peak and no 128K verdict) re-rendered:
    the H100 datasheet peak, the measured rows unchanged, the new target reading."""
    src = REPO / "experiments/results/gpu/session39/b/h100/rollout_throughput.json"
    saved = json.loads(src.read_text())
    assert saved["hbm_peak_Bps"] == 4.8e12
    res = bench_rollout.main(["--rerender", str(src), "--out", str(tmp_path)])
    assert res["hbm_peak_Bps"] == 3.35e12
    assert res["rows"] == saved["rows"]
    md = (tmp_path / "rollout_throughput.md").read_text()
    assert "re-rendered from" in md and "at 3.4 TB/s" in md
    assert "bf16 does not fit one sequence, fp4 runs 12" in md
    assert "| fp4 | pallas fp4 mosaic | 32768 | 50 | 33.55 | 1490.3 | 8.09 |" in md
    with pytest.raises(SystemExit, match="--rerender needs --out"):
        bench_rollout.main(["--rerender", str(src)])


def test_unstack_freeing_keeps_a_sharded_leafs_sharding_per_layer():
    """A leaf sharded over devices is split on the device (the host path would put each layer
    back with the stacked leaf's sharding, one dimension too many), keeping its sharding."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((4,), ("x",), devices=jax.devices()[:4])
    w = jax.device_put(jnp.arange(3 * 8 * 2, dtype=jnp.float32).reshape(3, 8, 2),
                       NamedSharding(mesh, P(None, "x", None)))
    want = np.asarray(w)
    got = bench_rollout.unstack_freeing({"layers": {"w": w}}, host_above_bytes=0)["layers"]
    assert w.is_deleted() and len(got) == 3
    for l, layer in enumerate(got):
        np.testing.assert_array_equal(np.asarray(layer["w"]), want[l])
        assert layer["w"].sharding.spec == P("x", None)
