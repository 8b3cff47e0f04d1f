"""experiments/check_rollout_attention.py: the kernel / reference comparison counts only the
response positions before a row's first differing token."""

import importlib.util
import os

import numpy as np
import pytest

_spec = importlib.util.spec_from_file_location(
    "check_rollout_attention", os.path.join(os.path.dirname(__file__), "..", "experiments",
                                            "check_rollout_attention.py"))
CR = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(CR)


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
