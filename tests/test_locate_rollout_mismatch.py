"""experiments/locate_rollout_mismatch.py end to end on a shrunken tiny config: its tapped copies
of the decode and trainer programs reproduce the library's (the engine's and the diagnosis'
log-probs) bit for bit, every op of both layers is compared, and on this config the BF16 engine
and the trainer agree: no bf16 activation differs, at most the f32 attention scores."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_locate_mirrors_the_library_and_finds_no_op_on_tiny(tmp_path):
    out = tmp_path / "loc.json"
    cmd = [sys.executable, os.path.join(ROOT, "experiments", "locate_rollout_mismatch.py"),
           "--config=configs/tiny.py", "--config.model.n_layers=2", "--prompts=3", "--group=2",
           "--sample", "--in_loop", f"--json={out}"]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    res = json.loads(out.read_text())
    checks = res["checks"]
    assert checks["tapped_trainer_equals_trainer_pass"]
    assert checks["tapped_decode_equals_engine"]
    assert checks["tapped_gap_mean"] == res["engine"]["logprob_gap_mean"]
    ops = {r["op"] for r in res["ops"]}
    for layer in (0, 1):
        for op in ("q_rope", "scores", "attn_o", "router_logits", "expert_down", "x_out"):
            assert f"L{layer}/{op}" in ops, (layer, op)
    assert res["engine"]["n_response_tokens"] > 0
    assert res["engine"]["logprob_gap_max"] == 0.0
    assert res["first_differing_bf16_op"] is None
    # XLA's default (YNNPACK) sums the trainer's f32 attention scores in another order than the
    # decode step's for most lengths (session 37); no bf16 activation flips at this size
    first = res["first_differing_op"]
    assert first is None or first.split("/")[-1] in ("scores", "probs", "pv_f32"), first
