"""experiments/p_precision_mismatch.py: the paired summary of the two precisions' diagnoses."""

import math

import pytest

from tests._scripts import load_experiment

PM = load_experiment("p_precision_mismatch")


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


def test_flags_take_the_kernels_out_and_name_themselves(monkeypatch, tmp_path):
    """``--attention reference`` leaves ``ops.decode_attention`` no kernel (other kernels keep
    theirs), ``--activation_quantizer`` sets the rollout's quantizer, ``--trainer_p`` and
    ``--kernel_layout`` reach the diagnoses, and the written command names them all."""
    from trace_jax import numerics as nx
    from trace_jax import ops

    monkeypatch.setattr(ops, "_kernel", lambda mod, name: f"{mod}.{name}")
    monkeypatch.setattr(nx, "ACTIVATION_QUANTIZER", nx.ACTIVATION_QUANTIZER)
    seen = {}

    def fake(config, checkpoint, batches, trainer_p, kernel_layout):
        seen["trainer_p"] = trainer_p
        seen["kernel_layout"] = kernel_layout
        seen["attention"] = ops._kernel("decode_attention", "decode_attention")
        seen["matmul"] = ops._kernel("fp4_matmul", "fp4_grouped_matmul")
        seen["quantizer"] = nx.ACTIVATION_QUANTIZER
        one = {"trace": {"kl_k3": 1.0}}
        return {"f32": [one] * batches, "bf16": [one] * batches}

    monkeypatch.setattr(PM, "diagnose_paired", fake)
    PM.main(["--config", "c.py", "--checkpoint", "ck", "--batches", "2", "--out", str(tmp_path),
             "--attention", "reference", "--activation_quantizer", "xla", "--trainer_p", "f32",
             "--kernel_layout"])
    assert seen == {"attention": None, "matmul": "fp4_matmul.fp4_grouped_matmul",
                    "quantizer": "xla", "trainer_p": "f32", "kernel_layout": True}
    md = (tmp_path / "p_precision_mismatch.md").read_text()
    assert "--attention reference --activation_quantizer xla --trainer_p f32 --kernel_layout`" in md
