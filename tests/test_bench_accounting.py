"""The benchmarks' byte and bandwidth accounting (pure Python, CPU): what a printed % of copy
divides by and what it compares with."""

import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments"))


def test_mgpu_attention_pct_copy_counts_the_valid_rows_only():
    """check_mgpu_attention.py's caches hold one sequence at length 1 and one 37 rows short: the
    kernels read those rows, not batch x context (at 4 x 1024 that overstated % copy 1.35x)."""
    from experiments import check_mgpu_attention as CM
    from pallas_kernels.attention_triton import kv_bytes

    lengths = [1, 1024, 1024, 1024 - 37]
    per_row_nv = 2 * CM.H * (CM.D // 2 + CM.D // 16 + 4)  # K, V: codes, E4M3, f32 row scale
    per_row_mx = 2 * CM.H * (CM.D // 2 + CM.D // 32)  # K and V: codes, E8M0 scales
    assert CM.valid_kv_bytes(lengths, "nvfp4") == sum(lengths) * per_row_nv
    assert CM.valid_kv_bytes(lengths, "mxfp4") == sum(lengths) * per_row_mx
    assert kv_bytes(4, CM.H, 1024, CM.D, "nvfp4") / CM.valid_kv_bytes(lengths, "nvfp4") == \
        pytest.approx(4096 / 3036)
    assert CM.valid_kv_bytes([8192] * 3, "bf16") == kv_bytes(3, CM.H, 8192, CM.D, "bf16")


def test_w4a4_row_counts_x_as_nvfp4():
    """bench_matmul's W4A4 row: x is an NVFP4 QTensor (half a byte per code, one E4M3 scale per
    16, an f32 scale per row), not bf16, and the weight bytes are the Triton weights'."""
    from pallas_kernels import bench_matmul as BM

    m, k, n, w = 8, 2048, 768, 884_744
    assert BM.w4a4_bytes(w, m, k, n) == w + m * k // 2 + m * k // 16 + 4 * m + 2 * m * n
    assert BM.w4a4_bytes(w, m, k, n) < w + 2 * m * k + 2 * m * n  # what bf16 x counted


def _step_bytes(tie):
    import jax.numpy as jnp

    import bench_rollout

    V, Md, E, F = 100, 64, 4, 32
    params = {"embed": jnp.zeros((V, Md), jnp.bfloat16),
              "layers": {"attn": {"wq": jnp.zeros((Md, Md), jnp.bfloat16)},
                         "moe": {"w_gate": jnp.zeros((E, Md, F), jnp.bfloat16)}}}
    if not tie:
        params["lm_head"] = jnp.zeros((Md, V), jnp.bfloat16)
    cfg = types.SimpleNamespace(d_model=Md, tie_embeddings=tie)
    by = bench_rollout.step_bytes(cfg, params, batch=3, context=16, touched=0.5, kv_tok=10,
                                  fp4_w=False)
    return by, V * Md * 2, Md * Md * 2, E * Md * F * 2


def test_rollout_step_bytes_read_a_tied_lm_head_whole():
    """With tied embeddings the lm_head reads the whole embedding every step; untied, the step
    reads the batch's embedding rows and the lm_head is a dense weight."""
    by, embed, wq, experts = _step_bytes(tie=True)
    assert by["weight_bytes_touched"] == wq + experts // 2 + embed
    by, embed, wq, experts = _step_bytes(tie=False)
    assert by["weight_bytes_touched"] == wq + embed + experts // 2 + 3 * 64 * 2
    assert by["kv_read_bytes"] == 3 * 16 * 10


def test_rollout_copy_bandwidth_spreads_the_call_over_its_passes(monkeypatch):
    """The copy the rollout's % copy divides by is timed as the steps are: several passes per
    jitted call, time per pass = call time / passes (one synced call per ~0.5 ms pass charged
    the launch and sync to the copy alone and put the BF16 step at 100-123% of it)."""
    import bench_rollout

    calls = []

    def fake_time_calls(fn, n, warmup=2):
        calls.append(fn())
        return 8e-3  # seconds per call

    monkeypatch.setattr(bench_rollout, "time_calls", fake_time_calls)
    nbytes = 4096
    assert bench_rollout.copy_bandwidth(nbytes, 1, passes=8) == pytest.approx(
        2 * nbytes / 1e-3)
    assert bench_rollout.copy_bandwidth(nbytes, 1, passes=1) == pytest.approx(
        2 * nbytes / 8e-3)
    import numpy as np

    x = np.asarray(calls[0])  # 8 passes of a * 1.0001 + 1 over uniform [0, 1) values
    assert x.shape == (nbytes // 4,) and float(x.min()) > 8.0
    with pytest.raises(ValueError):
        bench_rollout.copy_bandwidth(nbytes, 1, passes=0)


def test_rollout_copy_passes_stay_separate_kernels():
    """Each pass of the copy is its own kernel (read + write of the whole array): without the
    barrier XLA fuses the passes into one and the copy would read 1/passes of the bytes."""
    import jax
    import jax.numpy as jnp

    import bench_rollout

    x = jnp.ones((1 << 12,), jnp.float32)
    hlo = bench_rollout.copy_passes(6).lower(x).compile().as_text()
    assert hlo.count(" fusion(") >= 6

    def unbarred(a):  # the same passes without the barrier: XLA fuses them
        for _ in range(6):
            a = a * 1.0001 + 1.0
        return a

    assert jax.jit(unbarred).lower(x).compile().as_text().count(" fusion(") < 6

