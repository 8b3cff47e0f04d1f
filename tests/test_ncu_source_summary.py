"""experiments/ncu_source_summary.py reads Nsight Compute's CSV pages right, and the session-12
sweep grids (dense warps x BK, quantize walks) hold only configs their kernels accept."""

import csv
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "experiments"))

import ncu_source_summary as S  # noqa: E402


def _write(path, rows):
    with open(path, "w", newline="") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows(rows)


def test_raw_page_stall_reasons_per_launch(tmp_path):
    stall = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
    _write(tmp_path / "raw.csv", [
        ["ID", "Kernel Name", "Grid Size", stall.format("wait"), stall.format("long_scoreboard"),
         "dram__bytes.sum"],
        ["", "", "", "ratio", "ratio", "byte"],
        ["0", "kern_a", "(3, 1, 1)", "0.5", "1,250.0", "9"],
        ["1", "kern_b", "(4, 1, 1)", "2.0", "0.25", "9"],
    ])
    got = S.raw_stalls(str(tmp_path / "raw.csv"))
    assert [label for label, _ in got] == ["kern_a (3, 1, 1)", "kern_b (4, 1, 1)"]
    assert got[0][1] == {"wait": 0.5, "long_scoreboard": 1250.0}
    assert got[1][1] == {"wait": 2.0, "long_scoreboard": 0.25}


def test_source_page_sums_by_opcode_per_kernel(tmp_path):
    head = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
            "stall_wait", "stall_math"]
    _write(tmp_path / "source.csv", [
        ["Kernel Name", "k1", ""],
        head,
        ["0x0", "      LOP3.LUT R1, R2, R3, RZ, 0xc0, !PT", "4", "100", "1", "3"],
        ["0x10", "@!P0  LOP3.LUT R4, R2, R3, RZ, 0xc0, !PT", "6", "50", "2", "0"],
        ["0x20", "      HMMA.16816.F32.BF16 R4, R8, R12, R4", "10", "25", "0", "10"],
        ["Kernel Name", "k2", ""],
        head,
        ["0x0", "      FADD R1, R2, R3", "7", "70", "7", "0"],
    ])
    tables = S.source_by_opcode(str(tmp_path / "source.csv"))
    assert [t[0] for t in tables] == ["k1", "k2"]
    ops1 = tables[0][2]
    assert ops1["LOP3.LUT"]["Instructions Executed"] == 150  # the predicated line counts too
    assert ops1["LOP3.LUT"]["stall_wait"] == 3 and ops1["LOP3.LUT"]["stall_math"] == 3
    assert ops1["HMMA.16816.F32.BF16"]["Warp Stall Sampling (All Samples)"] == 10
    assert dict(tables[1][2])["FADD"]["Instructions Executed"] == 70
    out = subprocess.run([sys.executable, os.path.join(REPO, "experiments",
                                                       "ncu_source_summary.py"), str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    assert "source page k1: 175 warp instructions executed" in out


def test_dense_warps_grid_tiles_the_benchmark_shape():
    from pallas_kernels import matmul_triton as mt
    from pallas_kernels import sweep_dense as SD

    for m in SD.PHASE1_M:
        cfgs = list(SD.warps_grid(m, quick=False))
        assert len(cfgs) == len(set(cfgs)) > 20
        assert {c.num_warps for c in cfgs} == {2, 4, 8} and {c.bk for c in cfgs} == {256, 512}
        for c in cfgs:
            mt._check_tiles(SD.K, SD.N, c)  # raises on a config the kernel cannot run
        assert len({SD.name(c) for c in cfgs}) == len(cfgs)


@pytest.mark.parametrize("knobs,label", [
    (dict(block_m=2, num_warps=4, chunk_k=1024), "v5 bm2 w4 kc1024"),  # the default variant
    (dict(block_m=2, num_warps=4, chunk_k=1024, variant="v4"), "v4 bm2 w4 kc1024"),
    (dict(block_m=8, num_warps=4, chunk_k=256, single_walk=False), "v5 2walk bm8 w4 kc256"),
    (dict(block_m=2, num_warps=4, chunk_k=512, variant="v3"), "v3 bm2 w4 kc512"),
])
def test_quantize_sweep_labels(knobs, label):
    from pallas_kernels import sweep_quantize as SQ

    assert SQ.name(knobs) == label
