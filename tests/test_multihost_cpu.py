"""experiments/multihost_cpu.py's verdict: the first RL step must agree and every step be logged;
later steps are reported."""

from tests._scripts import load_experiment

mh = load_experiment("multihost_cpu")


def _rows(rewards, losses):
    return [dict(step=i, reward_mean=r, logprob_gap_max=0.0, loss=l)
            for i, (r, l) in enumerate(zip(rewards, losses))]


def test_first_step_decides_and_later_divergence_is_reported():
    single = _rows([0.15, 0.125, 0.14], [5.46e-3, -3.39e-3, -4.67e-3])
    ok, lines = mh.compare(_rows([0.15, 0.125, 0.14], [5.4601e-3, -3.39e-3, -4.67e-3]), single, 3)
    assert ok and lines[-1] == "MATCH at the first RL step; all steps agree"
    ok, lines = mh.compare(_rows([0.15, 0.125, 0.148], [5.46e-3, -3.40e-3, -4.06e-3]), single, 3)
    assert ok and "steps 0-0 agree, then the runs part" in lines[-1]
    assert len(lines) == 2 + 3 + 1


def test_first_step_or_missing_steps_fail():
    single = _rows([0.15, 0.125], [5.46e-3, -3.39e-3])
    ok, lines = mh.compare(_rows([0.14, 0.125], [5.46e-3, -3.39e-3]), single, 2)
    assert not ok and lines[-1].startswith("MISMATCH")
    ok, _ = mh.compare(_rows([0.15, 0.125], [5.47e-3, -3.39e-3]), single, 2)  # loss 2e-3 off
    assert not ok
    ok, lines = mh.compare(_rows([0.15], [5.46e-3]), single, 2)
    assert not ok and "logged 1 / 2 of 2 steps" in lines[-1]
