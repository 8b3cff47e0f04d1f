"""experiments/plot_code_distance.py: the table's fractions come from the integer counts."""

import json

import pytest

from experiments import plot_code_distance as P


def _diag():
    return {"trace+r3": {"code_distance_hist": [90.0, 8.0, 1.0, 1.0], "kl_k3": 0.1},
            "bf16": {"kl_k3": 0.0}, "hint_cost": {"hint_bytes_per_token": 3.0}}


def test_markdown_fractions_and_rows():
    md = P.markdown(_diag(), note="a note")
    rows = [l for l in md.splitlines() if l.startswith("| trace+r3")]
    assert len(rows) == 1 and "bf16 |" not in md  # variants without a histogram are left out
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[1:5] == ["100", "0.9000", "10", "0.8000"]  # codes, agree, mismatched, 1 step
    assert cells[5:] == ["90", "8", "1", "1"]
    assert "a note" in md


def test_no_histogram_is_an_error():
    with pytest.raises(ValueError, match="code_distance_hist"):
        P.markdown({"bf16": {"kl_k3": 0.0}})
    with pytest.raises(ValueError, match="code_distance_hist"):  # nothing counted: no row
        P.markdown({"trace": {"code_distance_hist": [0.0, 0.0]}})


def test_cli_writes_files(tmp_path):
    src = tmp_path / "diagnose.json"
    src.write_text(json.dumps(_diag()))
    out = tmp_path / "hist"
    assert P.main([str(src), "--out", str(out)]) == 0
    assert "| trace+r3 | 100 |" in (tmp_path / "hist.md").read_text()
    assert json.loads((tmp_path / "hist.json").read_text()) == _diag()
