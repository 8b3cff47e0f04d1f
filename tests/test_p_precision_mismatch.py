"""experiments/p_precision_mismatch.py: the paired summary of the two precisions' diagnoses."""

import importlib.util
import math
import os

import pytest

_spec = importlib.util.spec_from_file_location(
    "p_precision_mismatch", os.path.join(os.path.dirname(__file__), "..", "experiments",
                                         "p_precision_mismatch.py"))
PM = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(PM)


def test_summary_pairs_the_batches_of_both_precisions():
    """Per (variant, metric): both means, and the mean and standard error of the per-batch
    bf16 - f32 differences (paired by batch, not the difference of unpaired spreads); a
    metric a variant does not report is left out."""
    rows = {"f32": [{"trace": {"kl_k3": 1.0, "code_agreement_hinted": 0.9}, "bf16": {"kl_k3": 0.1}},
                    {"trace": {"kl_k3": 3.0, "code_agreement_hinted": 0.8}, "bf16": {"kl_k3": 0.2}}],
            "bf16": [{"trace": {"kl_k3": 2.0, "code_agreement_hinted": 0.9}, "bf16": {"kl_k3": 0.1}},
                     {"trace": {"kl_k3": 5.0, "code_agreement_hinted": 0.7}, "bf16": {"kl_k3": 0.4}}]}
    got = {(r["variant"], r["metric"]): r for r in PM.summarize(rows)}
    assert set(got) == {("trace", "kl_k3"), ("trace", "code_agreement_hinted"), ("bf16", "kl_k3")}
    r = got[("trace", "kl_k3")]
    assert (r["f32"], r["bf16"], r["diff"]) == (2.0, 3.5, 1.5)  # differences 1 and 2
    assert r["diff_se"] == pytest.approx(math.sqrt(0.5) / math.sqrt(2))
    r = got[("trace", "code_agreement_hinted")]
    assert r["diff"] == pytest.approx(-0.05) and r["diff_se"] == pytest.approx(0.05)
    assert got[("bf16", "kl_k3")]["diff"] == pytest.approx(0.1)
