"""The RL loop's GPU programs (rollout and train step, 30B shape, 2 layers) lower for an H200 on
the CPU, with every Pallas kernel the GPU path picks, and their Triton kernels compile for sm_90
without spills. The interpret-mode kernel tests cannot see a lowering failure; a GPU session is
too short to find one there."""

import os

import jax
import pytest

from experiments import lower_gpu_programs as LG


def _rows(out: str) -> dict[tuple[str, str], str]:
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 4 and cells[1] in ("generate", "rl_step"):
            rows[(cells[0], cells[1])] = cells[3]
    return rows


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_gpu_programs_lower_and_compile(fmt, tmp_path, capsys):
    args = ["--variants", "bf16,trace", "--set", f"numerics.fmt={fmt}"]
    if fmt == "nvfp4":
        args += ["--compile", str(tmp_path)]
    assert LG.main(args) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert jax.default_backend() == "cpu"  # the patch is undone
    assert "FP4_FORCE_COMPILE" not in os.environ
    assert "decode_attention_bf16" in rows[("bf16", "generate")]
    assert "bf16_grouped_matmul_wgrad" in rows[("bf16", "rl_step")]
    gen = rows[("trace", "generate")]
    assert f"decode_attention_{fmt}_v6" in gen and f"quantize_with_hint_{fmt}" in gen
    # the expert kernel rollout.expert_kernel="auto" picks: Mosaic GPU for NVFP4, Triton MXFP4
    assert ("mosaic_gpu" in gen) == (fmt == "nvfp4")
    assert ("fp4_matmul_mxfp4" in gen) == (fmt == "mxfp4")
    assert "bf16_grouped_matmul_wgrad" in rows[("trace", "rl_step")]
    if fmt == "nvfp4":  # compiled: a table row per distinct Triton kernel, none spilling
        table = [line.split("|")[1:-1] for line in out.splitlines()
                 if line.startswith("| ") and line.count("|") == 8 and "kernel" not in line]
        assert len(table) >= 8
        assert all(int(r[5]) == 0 for r in table), table
