"""experiments/layer_breakdown.py: the per-layer split of a profiled decode step."""

import os

import pytest

from tests._scripts import load_experiment

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LB = load_experiment("layer_breakdown")

MD = """fp4 @ 32768: device busy 1000.0 us/call of 1200.0 us wall, 30 launches/call (8 calls traced)

| kernel | hlo op | us/call | launches/call | % busy |
|---|---|---|---|---|
| `decode_attention_nvfp4_v4` | `command_buffer_15` | 600.0 | 2.0 | 60.0 |
| `fp4_matmul_nvfp4_kn` | `command_buffer_15` | 150.0 | 4.0 | 15.0 |
| `bf16_grouped_matmul__1` | `command_buffer_15` | 50.0 | 2.0 | 5.0 |
| `nvjet_sm90_tss_128x112` | `command_buffer_15` | 100.0 | 1.0 | 10.0 |
| `sort_125_1` | `command_buffer_15` | 20.0 | 1.0 | 2.0 |
| (3 more) | | 80.0 | 20.0 | 8.0 |
"""


def test_breakdown_classes_and_per_layer_split():
    p = LB.parse(MD)
    assert (p["busy_us"], p["wall_us"]) == (1000.0, 1200.0)
    assert len(p["rows"]) == 6
    b = LB.breakdown(p, layers=2)
    assert b["attention"] == pytest.approx(300.0)
    assert b["expert matmuls"] == pytest.approx(100.0)  # fp4 + bf16 grouped kernels
    assert b["rest"] == pytest.approx(50.0)  # the per-layer sort and the "(3 more)" row
    assert b["idle"] == pytest.approx(100.0)
    assert b["once per step"] == pytest.approx(100.0)  # the lm_head GEMM, not per layer
    assert b["layer"] == pytest.approx(550.0)


def test_not_a_profile_is_refused():
    with pytest.raises(ValueError, match="not a profile summary"):
        LB.parse("| a | b |")


def test_every_microsecond_of_a_real_profile_is_accounted_for():
    """On the committed session-8 profiles: classes x layers + once-per-step = the call's wall
    time, attention holds the decode_attention row, and a 1-layer step is refused."""
    for eng in ("bf16", "fp4"):
        path = os.path.join(REPO, "experiments", "results", "gpu", "session8", "e_32k",
                            f"{eng}_32768.md")
        with open(path) as f:
            p = LB.parse(f.read())
        b = LB.breakdown(p, layers=4)
        total = 4 * sum(b[c] for c in LB.CLASSES) + b["once per step"]
        assert total == pytest.approx(p["wall_us"], abs=0.05 * len(p["rows"]))  # md rounding
        att = [us for name, us, _ in p["rows"] if name.startswith("decode_attention")]
        assert len(att) == 1 and b["attention"] == pytest.approx(att[0] / 4)
        with pytest.raises(ValueError, match="layers must be >= 2"):
            LB.breakdown(p, layers=1)
