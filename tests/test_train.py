"""GRPO objective, TIS, advantages, hint alignment, and the main loop: learning, resume,
corruption, non-finite handling, config errors."""

import collections
import dataclasses
import json
import os
import re
import shutil
import struct

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import tiny
from trace_jax import grpo
from trace_jax import run as RUN
from trace_jax import train as TR


# ------------------------------------------------------------------------- objective by hand

def test_policy_loss_and_gradient_hand_case():
    cfg = grpo.GRPOConfig(is_mode="token_tis", is_cap=5.0, loss_agg="token_mean")
    logp = jnp.asarray([[-1.0, -2.0, -0.5], [-0.3, -0.7, -1.1]])
    roll = jnp.asarray([[-1.0, -4.0, -0.5], [-0.3, -0.2, -1.1]])  # ratios: 1, e^2, 1 | 1, e^-.5, 1
    adv = jnp.asarray([2.0, -1.0])
    mask = jnp.asarray([[True, True, False], [False, True, True]])
    loss, parts = grpo.policy_loss(logp, roll, adv, mask, cfg, max_len=3)
    w = np.array([[1, 5.0, 1], [1, np.exp(-0.5), 1]])  # e^2 > cap 5: truncated
    m = np.asarray(mask, float)
    a = np.array([[2.0], [-1.0]])
    want = np.sum(-w * a * m) / m.sum()  # ratio is 1 in value: pg = -A per token
    assert float(loss) == pytest.approx(want, rel=1e-6)
    g = jax.grad(lambda lp: grpo.policy_loss(lp, roll, adv, mask, cfg, 3)[0])(logp)
    np.testing.assert_allclose(np.asarray(g), -w * a * m / m.sum(), rtol=1e-6)
    # Dr.GRPO aggregation divides by B * max_len instead of the token count
    dr, _ = grpo.policy_loss(logp, roll, adv, mask, grpo.GRPOConfig(loss_agg="dr_grpo"), 3)
    assert float(dr) == pytest.approx(np.sum(-w * a * m) / 6, rel=1e-6)


def test_tis_cap_and_sequence_masking():
    old = jnp.log(jnp.asarray([[10.0, 0.1, 2.0]]))
    roll = jnp.zeros((1, 3))
    mask = jnp.ones((1, 3), bool)
    w = grpo.is_weights(old, roll, mask, grpo.GRPOConfig(is_cap=5.0))
    np.testing.assert_allclose(np.asarray(w), [[5.0, 0.1, 2.0]], rtol=1e-6)  # truncated above only
    seq = grpo.GRPOConfig(is_mode="seq_mask", is_cap=5.0)
    far = jnp.log(jnp.asarray([[6.0, 6.0, 6.0], [1.2, 0.9, 1.0]]))
    w = grpo.is_weights(far, jnp.zeros((2, 3)), jnp.ones((2, 3), bool), seq)
    np.testing.assert_array_equal(np.asarray(w), [[0, 0, 0], [1, 1, 1]])
    assert np.all(np.asarray(grpo.is_weights(old, roll, mask, grpo.GRPOConfig(is_mode="none"))) == 1)


def test_group_advantages():
    r = jnp.asarray([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    a = np.asarray(grpo.group_advantages(r, 3))
    g1 = np.array([1.0, 0, 0])
    np.testing.assert_allclose(a[:3], (g1 - g1.mean()) / (g1.std() + 1e-6), rtol=1e-5)
    np.testing.assert_allclose(a[3:], 0.0)  # all-equal group: no signal
    np.testing.assert_allclose(np.asarray(grpo.group_advantages(r, 3, std_norm=False))[:3],
                               g1 - g1.mean(), rtol=1e-6)
    with pytest.raises(ValueError, match="groups of 4"):
        grpo.group_advantages(r, 4)


@pytest.mark.parametrize("value,size", [(0.1, 8), (0.2, 16), (0.7, 16), (1 / 3, 5)])
def test_group_of_equal_inexact_rewards_has_no_advantage(value, size):
    """Rewards that f32 cannot hold exactly (a format reward of 0.1, say): the group mean is a
    rounding step off each reward, and that step divided by its own std was a same-signed
    advantage of up to ~0.1 for every sample. Exactly 0 now; a mixed group as by the formula."""
    r = jnp.full((size,), value, jnp.float32)
    np.testing.assert_array_equal(np.asarray(grpo.group_advantages(r, size)), 0.0)
    np.testing.assert_array_equal(np.asarray(grpo.group_advantages(r, size, std_norm=False)), 0.0)
    mixed = np.array([value] * (size - 1) + [value + 0.5], np.float32)
    want = (mixed.astype(np.float64) - mixed.mean(dtype=np.float64)) / (mixed.std(dtype=np.float64)
                                                                        + 1e-6)
    np.testing.assert_allclose(np.asarray(grpo.group_advantages(jnp.asarray(mixed), size)), want,
                               rtol=1e-5, atol=1e-6)


def test_kl_term_ignores_positions_outside_the_mask():
    """A pad position whose log-prob sits ~90 nats below the reference's: exp of the difference
    overflows f32, and inf * 0 made the loss and gradient NaN. Masked out before the exp now."""
    cfg = grpo.GRPOConfig(kl_coef=0.1)
    logp = jnp.asarray([[-1.0, -2.0, -95.0]])
    ref = jnp.asarray([[-1.5, -1.0, -3.0]])
    mask = jnp.asarray([[True, True, False]])
    loss_fn = lambda lp: grpo.policy_loss(lp, lp, jnp.asarray([1.0]), mask, cfg, 3, ref)[0]  # noqa: E731
    loss, g = jax.value_and_grad(loss_fn)(logp)
    d = np.array([-0.5, 1.0])
    want = np.mean(-1.0 + 0.1 * (np.exp(d) - d - 1))
    assert float(loss) == pytest.approx(want, rel=1e-6)
    assert np.all(np.isfinite(np.asarray(g))) and float(g[0, 2]) == 0.0


@pytest.mark.parametrize("how", grpo.TRUNCATED)
def test_truncated_responses(how):
    """Group of 3 with one truncated response scored 1: ``score`` keeps its reward, ``fail``
    makes it 0 (the baseline then sees one success), ``mask`` keeps the baseline and zeroes only
    its advantage."""
    r = np.array([1.0, 0.0, 1.0])
    fin = np.array([True, True, False])
    cfg = grpo.GRPOConfig(truncated=how)
    rew, adv, in_loss = grpo.rewards_and_advantages(r, fin, 3, cfg)
    rew, adv = np.asarray(rew), np.asarray(adv)
    if how == "mask":
        np.testing.assert_array_equal(np.asarray(in_loss), fin)
    else:
        assert in_loss is None
    full = np.asarray(grpo.group_advantages(jnp.asarray(r), 3))
    if how == "score":
        np.testing.assert_array_equal(rew, r)
        np.testing.assert_allclose(adv, full)
    elif how == "fail":
        np.testing.assert_array_equal(rew, [1.0, 0.0, 0.0])
        np.testing.assert_allclose(adv, np.asarray(grpo.group_advantages(jnp.asarray(rew), 3)))
        assert adv[0] > 0 > adv[2]
    else:
        np.testing.assert_array_equal(rew, r)
        np.testing.assert_allclose(adv, [full[0], full[1], 0.0])
        assert full[2] != 0


def test_truncated_mode_is_validated():
    with pytest.raises(ValueError, match="train.truncated"):
        grpo.GRPOConfig(truncated="drop")
    with pytest.raises(ValueError, match="does not match"):
        grpo.rewards_and_advantages(np.zeros(4), np.ones(2, bool), 2, grpo.GRPOConfig())
    # eps 0 split the clip's and the min's ties: the gradient scaled by 0.75 / 0.625
    with pytest.raises(ValueError, match=r"clip_eps_low/high must be > 0, got 0.0 / 0.28"):
        grpo.GRPOConfig(clip_eps_low=0.0)
    with pytest.raises(ValueError, match="max_nonfinite_steps must be >= 1"):
        TR.TrainConfig(max_nonfinite_steps=0)  # (it behaved as 1)


def test_nonfinite_update_is_skipped():
    opt = TR.make_optimizer(1e-2, 1, 10, 0.0, 1.0)
    p = {"w": jnp.ones(3)}
    st = TR.TrainState(p, opt.init(p))
    new, finite = TR._apply_if_finite(opt, st, jnp.float32(jnp.nan), {"w": jnp.ones(3)})
    assert not bool(finite)
    np.testing.assert_array_equal(np.asarray(new.params["w"]), 1.0)
    st, finite = TR._apply_if_finite(opt, st, jnp.float32(1.0), {"w": jnp.ones(3)})
    assert bool(finite) and float(st.params["w"][0]) < 1.0  # the first update moves the params


def test_learning_rate_schedule_warms_up_from_the_first_update():
    lr, warmup, steps = 1e-3, 4, 20
    sched = TR.learning_rate_schedule(lr, warmup, steps)
    got = [float(sched(i)) for i in range(steps)]
    np.testing.assert_allclose(got[:warmup], [lr * (i + 1) / warmup for i in range(warmup)],
                               rtol=1e-6)
    assert all(a >= b for a, b in zip(got[warmup - 1:], got[warmup:]))  # then decays
    np.testing.assert_allclose(got[-1], lr / 10, rtol=1e-5)
    np.testing.assert_allclose(float(TR.learning_rate_schedule(lr, 0, steps)(0)), lr, rtol=1e-6)
    for steps in (0, 1):  # (no warmup and at most one update: optax refused an empty cosine)
        np.testing.assert_allclose(float(TR.learning_rate_schedule(lr, 0, steps)(0)), lr,
                                   rtol=1e-6)


# ------------------------------------------------------------------------- the loop

def small(workdir, **over):
    c = tiny.get_config()
    c.workdir = str(workdir)
    c.model.update(n_layers=2, d_model=32, n_heads=2, n_kv_heads=1, head_dim=16, d_expert=32)
    c.rollout.update(batch_prompts=4, group_size=2, max_new_tokens=4)
    c.sft.update(steps=2, batch_size=8)
    c.train.update(steps=4)
    c.checkpoint.update(every=2, keep=3)
    for k, v in over.items():
        node, leaf = k.rsplit(".", 1) if "." in k else (None, k)
        (c if node is None else c[node])[leaf] = v
    return c


def read_metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(l) for l in f]


STABLE = [k for k in RUN.METRIC_KEYS if not k.startswith("time_")]


def read_tensorboard(workdir):
    """(tag, step, value) of every scalar point in the event files of ``workdir/tb``, each
    file read as TFRecords (length, its CRC, an Event proto, its CRC) to its end."""
    from tensorboardX.proto import event_pb2

    points = []
    for name in sorted(os.listdir(os.path.join(workdir, "tb"))):
        with open(os.path.join(workdir, "tb", name), "rb") as f:
            data = f.read()
        i = 0
        while i < len(data):
            (n,) = struct.unpack("<Q", data[i: i + 8])
            ev = event_pb2.Event.FromString(data[i + 12: i + 12 + n])
            points += [(v.tag, ev.step, v.simple_value) for v in ev.summary.value]
            i += 16 + n
        assert i == len(data), name
    return points


FINISHED_RUN_COMPILED = {}
LOOP_PROGRAMS = ("jit(sft_step)", "jit(rl_step)", "jit(_generate)")
# programs lowered for compilation, by function: one per jit cache miss, whether XLA then
# compiles it or finds it in a persistent compilation cache (this process; off in the suite)
_COMPILES = collections.Counter()


def _count_compile(event, duration, fun_name=None, **_):
    if event.endswith("jaxpr_to_mlir_module_duration") and fun_name in LOOP_PROGRAMS:
        _COMPILES[fun_name] += 1


jax.monitoring.register_event_duration_secs_listener(_count_compile)


def compiled_counts():
    return {k: _COMPILES[k] for k in LOOP_PROGRAMS}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One uninterrupted ``small`` run (2 SFT + 4 RL steps, checkpoints every 2 global steps),
    shared read-only by the tests below (a test that changes it works on a copy);
    ``FINISHED_RUN_COMPILED``: how many programs it added to each loop function's jit cache."""
    d = tmp_path_factory.mktemp("finished")
    before = compiled_counts()
    RUN.run(small(d))
    FINISHED_RUN_COMPILED.update({k: v - before[k] for k, v in compiled_counts().items()})
    return d


def test_each_loop_program_compiles_once(finished_run):
    """The SFT step, the RL step and the rollout each compile one program for the whole run:
    the first step's inputs (a fresh init, a fresh optimizer's step count) are committed to the
    device as every later step's (jit outputs) are, so the second step does not compile again;
    test_resume_after_crash_equals_uninterrupted_run checks that a restored state (committed
    arrays) reuses them too."""
    assert set(FINISHED_RUN_COMPILED) == set(LOOP_PROGRAMS)
    assert all(n <= 1 for n in FINISHED_RUN_COMPILED.values()), FINISHED_RUN_COMPILED


def test_metrics_file_has_every_field_and_tensorboard(finished_run):
    tmp_path = finished_run
    ms = read_metrics(tmp_path)
    assert [m["step"] for m in ms] == [0, 1, 2, 3]
    for m in ms:
        assert set(RUN.METRIC_KEYS) <= set(m)
        assert 0.99 <= m["code_agreement_hinted"] <= 1.0
        assert m["routing_agreement"] == 1.0  # the trainer's routers choose as the rollout's (CPU)
    assert any(f.startswith("events") for f in os.listdir(tmp_path / "tb"))
    from tests._params import init_params
    from trace_jax import checkpoint, model as M
    c = small(tmp_path)
    p = checkpoint.load_params(str(tmp_path), c)
    init = init_params(M.ModelConfig.from_config(c.model), jax.random.key(c.seed))  # the run's
    assert jax.tree.structure(p) == jax.tree.structure(init)
    assert not np.allclose(np.asarray(p["embed"]), np.asarray(init["embed"]))  # trained
    with pytest.raises(FileNotFoundError):
        checkpoint.load_params(str(tmp_path / "nowhere"), c)
    # one checkpoint by its folder (diagnose --checkpoint=RUN/checkpoints/<step>)
    steps = sorted(int(n) for n in os.listdir(tmp_path / "checkpoints") if n.isdigit())
    assert len(steps) >= 2
    last = checkpoint.load_params(str(tmp_path / "checkpoints" / str(steps[-1])), c)
    jax.tree.map(np.testing.assert_array_equal, last, p)
    first = checkpoint.load_params(str(tmp_path / "checkpoints" / str(steps[0])), c)
    assert not np.array_equal(np.asarray(first["embed"]), np.asarray(p["embed"]))
    with pytest.raises(FileNotFoundError,
                       match=rf"no checkpoint at step 99 .*{re.escape(str(steps))}"):
        checkpoint.load_params(str(tmp_path / "checkpoints" / "99"), c)


def test_resume_after_crash_equals_uninterrupted_run(finished_run, tmp_path, monkeypatch):
    ref = read_metrics(finished_run)

    real = RUN.rl_iteration

    def crash_at_3(exp, tc, ts, stale, ref_p, step, *a, **k):
        if step == 3:
            raise KeyboardInterrupt("simulated crash")
        return real(exp, tc, ts, stale, ref_p, step, *a, **k)

    monkeypatch.setattr(RUN, "rl_iteration", crash_at_3)
    compiled = compiled_counts()  # the finished run's programs, same config
    with pytest.raises(KeyboardInterrupt):
        RUN.run(small(tmp_path / "b"))
    monkeypatch.setattr(RUN, "rl_iteration", real)
    RUN.run(small(tmp_path / "b"))  # resumes from the checkpoint after global step 4 (RL step 1)
    assert compiled_counts() == compiled  # the restored state reuses them: no new compile
    got = read_metrics(tmp_path / "b")
    assert [m["step"] for m in got] == [0, 1, 2, 3]
    for a, b in zip(ref, got):
        assert {k: a[k] for k in STABLE} == {k: b[k] for k in STABLE}
    # TensorBoard too: RL step 2, logged before the crash and again after the resume, once
    tb = [(tag, step) for tag, step, _ in read_tensorboard(tmp_path / "b")]
    assert sorted(tb) == sorted((tag, step) for tag, step, _ in read_tensorboard(finished_run))
    assert ("rl/reward_mean", 2) in tb and ("sft/sft_loss", 1) in tb


def test_logger_on_resume_drops_the_points_it_writes_again(tmp_path):
    """A resumed run's logger first drops what the crashed run wrote at or past its resume steps
    (SFT points by global step, RL points and metrics.jsonl lines by RL step), also a
    TensorBoard record torn by the crash, so that every point is there once."""
    log = RUN.Logger(str(tmp_path), {"sft": 0, "rl": -2})
    for s in range(2):
        log.write({"step": s, "sft_loss": 1.0 + s}, prefix="sft")
    for s in range(3):
        log.write({"step": s, "reward_mean": 0.5})
    log.close()
    (events,) = os.listdir(tmp_path / "tb")
    with open(tmp_path / "tb" / events, "ab") as f:
        f.write(b"\x30\x00\x00")  # a record torn by the crash
    log = RUN.Logger(str(tmp_path), {"sft": 2, "rl": 1})  # resumed at global step 3 = RL step 1
    for s in (1, 2):
        log.write({"step": s, "reward_mean": 0.75})
    log.close()
    assert sorted(read_tensorboard(tmp_path)) == [
        ("rl/reward_mean", 0, 0.5), ("rl/reward_mean", 1, 0.75), ("rl/reward_mean", 2, 0.75),
        ("sft/sft_loss", 0, 1.0), ("sft/sft_loss", 1, 2.0)]
    assert [(m["step"], m["reward_mean"]) for m in read_metrics(tmp_path)] == [
        (0, 0.5), (1, 0.75), (2, 0.75)]


def test_corrupted_latest_checkpoint_is_skipped(finished_run, tmp_path, capsys):
    shutil.copytree(finished_run, tmp_path, dirs_exist_ok=True)
    c = small(tmp_path)
    ck = tmp_path / "checkpoints"
    steps = sorted(int(d) for d in os.listdir(ck) if d.isdigit())
    assert steps[-1] == 6
    for root, _, files in os.walk(ck / str(steps[-1])):  # corrupt every file of the newest
        for f in files:
            with open(os.path.join(root, f), "wb") as fh:
                fh.write(b"garbage")
    # resumes from the previous good checkpoint (4) and reruns RL steps 2 and 3; the same config
    # as test_resume_after_crash_equals_uninterrupted_run's resumed run, whose train step (a
    # restored state compiles its own)
    RUN.run(c)
    out = capsys.readouterr().out
    assert "skipping checkpoint step 6: incomplete, corrupted" in out
    assert "resumed from checkpoint step 4" in out
    # the unreadable step is deleted at once: it would count toward checkpoint.keep, and a
    # resumed run saving more often would rotate out the good checkpoints before it
    assert "deleting checkpoint step 6, which does not restore" in out
    got = read_metrics(tmp_path)
    assert [m["step"] for m in got] == [0, 1, 2, 3]
    for a, b in zip(read_metrics(finished_run), got):
        assert {k: a[k] for k in STABLE} == {k: b[k] for k in STABLE}
    # it ran to the end: step 6 was saved again (readable now) and holds the uninterrupted params
    from trace_jax import checkpoint
    jax.tree.map(np.testing.assert_array_equal, checkpoint.load_params(str(tmp_path), c),
                 checkpoint.load_params(str(finished_run), c))


def test_checkpoints_of_another_config_are_kept_not_overwritten(finished_run, tmp_path):
    """A config whose state no checkpoint restores into (here train.kl_coef adds the KL
    reference) stops with a message before any step; checkpoints, metrics and config.json stay
    as they were (the run would otherwise start fresh and overwrite them)."""
    from trace_jax import checkpoint

    shutil.copytree(finished_run, tmp_path, dirs_exist_ok=True)

    def snapshot():
        return {os.path.relpath(os.path.join(r, f), tmp_path): open(os.path.join(r, f), "rb").read()
                for r, _, fs in os.walk(tmp_path) for f in fs if "tb" not in r.split(os.sep)}

    before = snapshot()
    with pytest.raises(checkpoint.CheckpointMismatchError, match="train.kl_coef.*new workdir"):
        RUN.run(small(tmp_path, **{"train.kl_coef": 0.05}))
    assert snapshot() == before


def test_async_rollouts_lag_by_max_version_diff_and_kl_ref_stays(tmp_path, monkeypatch):
    """train.max_version_diff = 2: the rollout of RL step s samples with the params of step
    s - 2 (step 0's before that); the KL reference stays the starting params. Also without SFT,
    where the stale versions and the reference are the fresh params (the train step donates
    its params: they need their own buffers)."""
    seen = []
    real = RUN.rl_iteration

    def spy(exp, tc, ts, stale, ref, step, *a, **k):
        host = lambda t: jax.tree.map(np.asarray, t)  # noqa: E731
        seen.append((host(ts.params), host(stale[0]), host(ref)))
        return real(exp, tc, ts, stale, ref, step, *a, **k)

    monkeypatch.setattr(RUN, "rl_iteration", spy)
    RUN.run(small(tmp_path, **{"sft.steps": 0, "train.steps": 5, "train.max_version_diff": 2,
                               "train.kl_coef": 0.05}))
    assert len(seen) == 5
    same = lambda a, b: all(np.array_equal(x, y) for x, y in  # noqa: E731
                            zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    for s, (_, source, ref) in enumerate(seen):
        assert same(source, seen[max(s - 2, 0)][0]), s
        assert same(ref, seen[0][0]), s
    assert not same(seen[3][0], seen[2][0])  # the params did move


def test_warm_start_from_a_finished_run(tmp_path, monkeypatch):
    from trace_jax import checkpoint
    RUN.run(small(tmp_path / "sft", **{"train.steps": 0}))  # an SFT-only run
    sft_params = checkpoint.load_params(str(tmp_path / "sft"), small(tmp_path / "sft"))
    seen = []
    real = RUN.rl_iteration

    def spy(exp, tc, ts, *a, **k):
        seen.append(jax.tree.map(np.asarray, ts.params))
        return real(exp, tc, ts, *a, **k)

    monkeypatch.setattr(RUN, "rl_iteration", spy)
    # (the source's run state has neither a KL reference nor two stale versions: only its params
    # are read)
    warm = small(tmp_path / "rl", init_from=str(tmp_path / "sft"), **{
        "sft.steps": 0, "train.steps": 1, "train.kl_coef": 0.05, "train.max_version_diff": 2})
    RUN.run(warm)
    assert [m["step"] for m in read_metrics(tmp_path / "rl")] == [0]
    jax.tree.map(np.testing.assert_array_equal, seen[0], jax.tree.map(np.asarray, sft_params))
    cold = jax.tree.map(np.asarray, RUN.initial_state(
        RUN.X.build(warm), warm, RUN.train_config(warm))["params"])
    assert not np.array_equal(cold["embed"], seen[0]["embed"])
    with pytest.raises(FileNotFoundError, match="init_from"):
        RUN.run(small(tmp_path / "x", init_from=str(tmp_path / "nowhere"), **{"sft.steps": 0}))
    with pytest.raises(ValueError, match="init_from=.*params of this config's model"):
        RUN.run(small(tmp_path / "y", init_from=str(tmp_path / "sft"),
                      **{"model.d_model": 64, "sft.steps": 0}))
    # a source that trained on problems this run would hold out: another split key, or a
    # larger held-out fraction than the source's
    for over in ({"task.split_by": "prompt"}, {"task.eval_fraction": 0.5}):
        with pytest.raises(ValueError, match="some of its held-out problems were trained on"):
            RUN.run(small(tmp_path / "z", init_from=str(tmp_path / "sft"), **over,
                          **{"sft.steps": 0}))
    # a resume never reads init_from: the source may be gone
    shutil.rmtree(tmp_path / "sft")
    RUN.run(warm)
    assert [m["step"] for m in read_metrics(tmp_path / "rl")] == [0]


def test_repeated_nonfinite_steps_stop_with_message(tmp_path, monkeypatch):
    real = TR.rl_step

    def nan_step(*a, **k):
        st, m, _ = real(*a, **k)
        return st, m, jnp.bool_(False)

    monkeypatch.setattr(TR, "rl_step", nan_step)
    with pytest.raises(FloatingPointError, match="max_nonfinite_steps=3"):
        RUN.run(small(tmp_path, **{"train.steps": 4}))


def test_nonfinite_streak_survives_a_resume(tmp_path, monkeypatch, capsys):
    """The count of consecutive non-finite steps is checkpointed: RL steps 0 and 1 are
    non-finite, the checkpoint after step 1 holds the count 2, the run crashes at step 2; the
    resumed run's step 2 is the streak's third and stops it (train.max_nonfinite_steps=3), as in
    an uninterrupted run."""
    real = RUN.rl_iteration
    crash = [True]

    def nonfinite(exp, tc, ts, stale, ref, step, *a, **k):
        if step == 2 and crash[0]:
            raise KeyboardInterrupt("simulated crash")
        m = real(exp, tc, ts, stale, ref, step, *a, **k)
        m["_finite"] = False
        return m

    monkeypatch.setattr(RUN, "rl_iteration", nonfinite)
    c = small(tmp_path, **{"sft.steps": 0, "train.steps": 4})
    with pytest.raises(KeyboardInterrupt):
        RUN.run(c)
    crash[0] = False
    with pytest.raises(FloatingPointError, match="3 consecutive non-finite steps"):
        RUN.run(c)
    assert "resumed from checkpoint step 2" in capsys.readouterr().out


def test_checkpoints_without_the_nonfinite_count_still_restore(finished_run, tmp_path, capsys):
    """A checkpoint written before the non-finite count was saved restores with a count of 0."""
    from trace_jax import checkpoint

    c = small(tmp_path)
    exp, tc = RUN.X.build(c), RUN.train_config(c)
    abstract = jax.eval_shape(lambda: RUN.initial_state(exp, c, tc))
    shutil.copytree(finished_run / "checkpoints", tmp_path / "new")
    new = checkpoint.Checkpointer(str(tmp_path / "new"))
    step, state = new.restore_latest(abstract, defaults=RUN.STATE_DEFAULTS)
    new.close()
    assert step == 6 and int(state["nonfinite"]) == 0
    old = checkpoint.Checkpointer(str(tmp_path / "checkpoints"))
    old.save(6, {k: v for k, v in state.items() if k != "nonfinite"})
    step, state = old.restore_latest(abstract, defaults=RUN.STATE_DEFAULTS)
    old.close()
    assert step == 6 and int(state["nonfinite"]) == 0
    RUN.run(c)  # (6 = the last step: restores, runs nothing)
    assert "resumed from checkpoint step 6" in capsys.readouterr().out
    checkpoint.load_params(str(tmp_path), c)


def test_micro_batches_refuse_leaves_of_another_batch():
    """Splitting a batch into micro-batches: leaves of leading size B are split, size-1 leaves
    (a per-tensor scale) shared; hints from a rollout of another size are an error, not a leaf
    that every micro-batch silently reuses."""
    import collections

    B = collections.namedtuple("B", "tokens hints")
    ok = B(jnp.zeros((8, 3)), {"s": jnp.ones((8, 2)), "g": jnp.ones((1, 1))})
    xs, rebuild = TR._split_micro(ok, 2)
    assert [x.shape for x in xs] == [(2, 4, 3), (2, 4, 2)]
    assert rebuild([x[0] for x in xs]).hints["g"].shape == (1, 1)
    with pytest.raises(ValueError, match=r"hints\['s'\].*\(4, 2\).*batch's 8"):
        TR._split_micro(B(jnp.zeros((8, 3)), {"s": jnp.ones((4, 2))}), 2)


def test_resume_with_another_config_is_refused(finished_run, tmp_path):
    """Rerunning a finished workdir with another variant (or model, numerics, hyperparameter)
    stops before any step and changes nothing, where it used to "resume" the old run's
    checkpoint and relabel its results. A task option added or dropped counts as a change, and
    so does a longer run (train.steps sets the learning-rate schedule: the message says to warm
    start a new workdir instead); another checkpoint cadence resumes."""
    shutil.copytree(finished_run, tmp_path, dirs_exist_ok=True)
    before = open(tmp_path / "config.json").read()
    with pytest.raises(ValueError, match=r"another config \(variant: 'trace' -> 'fp4_naive'\)"):
        RUN.run(small(tmp_path, variant="fp4_naive"))
    assert open(tmp_path / "config.json").read() == before
    with pytest.raises(ValueError, match=r"numerics.fmt: 'nvfp4' -> 'mxfp4'.*new --config.workdir"):
        RUN.check_resume_config(str(tmp_path), small(tmp_path, **{"numerics.fmt": "mxfp4"}))
    with pytest.raises(ValueError, match=r"train.steps: 4 -> 9.*learning-rate schedule.*"
                                         r"--config.init_from="):
        RUN.check_resume_config(str(tmp_path), small(tmp_path, **{"train.steps": 9}), step=6)
    # (a checkpoint that has taken no RL step yet, e.g. an SFT-only run's, takes a new length)
    RUN.check_resume_config(str(tmp_path), small(tmp_path, **{"train.steps": 9}), step=2)
    added = small(tmp_path)
    added.task.kwargs.reverse = True
    with pytest.raises(ValueError, match=r"task.kwargs.reverse: \(absent\) -> True"):
        RUN.check_resume_config(str(tmp_path), added)
    dropped = small(tmp_path)
    del dropped.task.kwargs["digits"]
    with pytest.raises(ValueError, match=r"task.kwargs.digits: 1 -> \(absent\)"):
        RUN.check_resume_config(str(tmp_path), dropped)
    RUN.check_resume_config(str(tmp_path), small(tmp_path, **{"checkpoint.every": 5}))


def test_resume_of_a_run_from_before_the_problem_split(finished_run, tmp_path):
    """A run saved before ``task.split_by`` existed split its data by prompt text: resuming it
    with today's config (split by problem) would change which prompts it trains on mid-run, so
    it is refused, naming the field; with ``split_by="prompt"`` it resumes, and that config's
    data is the old split's."""
    import json

    from trace_jax import experiment as X

    shutil.copytree(finished_run, tmp_path, dirs_exist_ok=True)
    with open(tmp_path / "config.json") as f:
        saved = json.load(f)
    del saved["task"]["split_by"]
    with open(tmp_path / "config.json", "w") as f:
        json.dump(saved, f)
    with pytest.raises(ValueError, match=r"task.split_by: 'prompt' -> 'problem'"):
        RUN.check_resume_config(str(tmp_path), small(tmp_path))
    old = small(tmp_path, **{"task.split_by": "prompt"})
    RUN.check_resume_config(str(tmp_path), old)
    assert X.build(old).train_data.split_by == "prompt"
    old.task.unlock()
    del old.task["split_by"]  # a config.json from before: its own run's split
    assert X.build(old).train_data.split_by == "prompt"
    with pytest.raises(ValueError, match=r"task.split_by must be one of \('problem', 'prompt'\), "
                                         r"got 'problems'"):
        X.build(small(tmp_path, **{"task.split_by": "problems"}))


def test_config_errors_before_compute(tmp_path):
    with pytest.raises(ValueError, match="unknown train config fields"):
        c = small(tmp_path)
        c.train.unlock()
        c.train.lrr = 1.0
        RUN.run(c)
    with pytest.raises(ValueError, match="hint_sites"):
        RUN.run(small(tmp_path, **{"numerics.hint_layers": "none"}))
    with pytest.raises(ValueError, match="group_size"):
        RUN.run(small(tmp_path, **{"rollout.group_size": 1}))
    with pytest.raises(ValueError, match="unknown variant"):
        RUN.run(small(tmp_path, variant="fp4"))
    kl = {"rollout.kernel_layout": True}
    with pytest.raises(ValueError, match="rollout.expert_kernel='mgpu'"):
        RUN.run(small(tmp_path, **kl, **{"rollout.expert_kernel": "mgpu"}))
    with pytest.raises(ValueError, match="d_model=32"):  # 'mosaic' takes multiples of 64
        RUN.run(small(tmp_path, **kl, **{"rollout.expert_kernel": "mosaic"}))
    with pytest.raises(ValueError, match="rollout.attention_p_precision='f16'"):
        RUN.run(small(tmp_path, **{"rollout.attention_p_precision": "f16"}))
    with pytest.raises(ValueError, match="max_new_tokens=2 cannot hold the task's longest "
                                         "solution \\(2 tokens\\) and EOS"):
        RUN.run(small(tmp_path, **{"rollout.max_new_tokens": 2}))
    for field, value in (("train.warmup_steps", -1), ("sft.warmup_steps", -2),
                         ("rollout.batch_prompts", 0), ("seed", -1)):
        bound = ">= 1" if field == "rollout.batch_prompts" else ">= 0"
        with pytest.raises(ValueError, match=f"{field} must be {bound}, got {value}"):
            RUN.run(small(tmp_path, **{field: value}))
    for field in ("train.micro_batches", "checkpoint.every", "checkpoint.keep"):
        with pytest.raises(ValueError, match=f"{field} must be >= 1, got 0"):
            RUN.run(small(tmp_path, **{field: 0}))
    for field, value in (("train.lr", -1e-3), ("train.lr", float("nan")), ("sft.lr", 0.0),
                         ("train.grad_clip", 0.0)):
        with pytest.raises(ValueError, match=f"{field} must be > 0, got {value}"):
            RUN.run(small(tmp_path, **{field: value}))
    with pytest.raises(ValueError, match="sft.batch_size must be >= 1, got 0"):
        RUN.run(small(tmp_path, **{"sft.batch_size": 0}))
    with pytest.raises(ValueError, match="sft.numerics must be one of .*, got 'fp4'"):
        RUN.run(small(tmp_path, **{"sft.numerics": "fp4"}))
    with pytest.raises(ValueError, match="model.dtype must be .* got 'bfloat'"):
        RUN.run(small(tmp_path, **{"model.dtype": "bfloat"}))
    (tmp_path / "sft_run").mkdir()
    with pytest.raises(ValueError, match="in place of the SFT warm start; set sft.steps=0"):
        RUN.run(small(tmp_path, init_from=str(tmp_path / "sft_run")))
    assert not os.path.exists(tmp_path / "metrics.jsonl")


def test_sft_runs_in_bf16_unless_told_to_use_the_trainers_numerics(tmp_path):
    """``sft.numerics``: "bf16" (default) SFTs a TRACE run exactly as a BF16 run (the same params
    after the warm start); "trainer" SFTs with the variant's W4A4 QAT numerics (other params),
    never with hints."""
    from trace_jax import checkpoint
    from trace_jax import experiment as X

    sft_only = {"train.steps": 0, "checkpoint.every": 2}
    c = small(tmp_path / "t", **sft_only)
    num = RUN.sft_numerics(c, X.build(c))
    assert (num.mode, num.hinted) == ("bf16", frozenset())
    c_tr = small(tmp_path / "q", **sft_only, **{"sft.numerics": "trainer"})
    num = RUN.sft_numerics(c_tr, X.build(c_tr))
    assert (num.mode, num.hinted) == ("fp4_qat", frozenset())
    c_bf = small(tmp_path / "b", variant="bf16", **sft_only)
    params = {}
    for name, cfg in (("trace", c), ("trace_trainer", c_tr), ("bf16", c_bf)):
        RUN.run(cfg)
        params[name] = checkpoint.load_params(cfg.workdir, cfg)
    same = jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), params["trace"], params["bf16"])
    assert all(jax.tree.leaves(same))
    moved = jax.tree.map(lambda a, b: not np.array_equal(a, b), params["trace_trainer"],
                         params["bf16"])
    assert any(jax.tree.leaves(moved))


def test_attention_p_precision_sets_the_rollout_numerics(tmp_path):
    """``rollout.attention_p_precision`` becomes the ``attention_p`` of the rollout numerics and
    of the trainer's, whose attention rounds P the same way ("f32" when the config does not
    name it)."""
    from trace_jax import experiment as X
    exp = X.build(small(tmp_path, **{"rollout.attention_p_precision": "bf16"}))
    assert (exp.rollout_numerics.attention_p, exp.train_numerics.attention_p) == ("bf16", "bf16")
    c = small(tmp_path)
    c.rollout.unlock()
    del c.rollout["attention_p_precision"]
    exp = X.build(c)
    assert (exp.rollout_numerics.attention_p, exp.train_numerics.attention_p) == ("f32", "f32")


def test_shifted_hint_batch_is_detected(tmp_path):
    from tests._params import init_params
    from trace_jax import experiment as X
    from trace_jax import rollout as R
    exp = X.build(small(tmp_path))
    params = init_params(exp.cfg, jax.random.key(0))
    # the RL loop's rollout (each prompt repeated per group, exact codes recorded): the program
    # the loop compiles for this config (finished_run)
    prompts, lens = R.repeat_prompts(*X.encode_prompts(exp, exp.train_data.batch(0)),
                                     exp.group_size)
    ro = R.generate(R.sync_weights(params, exp.rollout_numerics), prompts, lens, jax.random.key(1),
                    cfg=exp.cfg, numerics=exp.rollout_numerics.recording_all_codes(),
                    sampling=exp.sampling)
    adv = jnp.zeros(prompts.shape[0])
    TR.make_batch(ro, adv, exp.train_numerics, True)  # aligned: fine
    shifted = ro._replace(tokens=jnp.roll(ro.tokens, 1, axis=0))
    with pytest.raises(ValueError, match="fingerprint mismatch"):
        TR.make_batch(shifted, adv, exp.train_numerics, True)


def test_tiny_run_raises_reward_on_addition(tmp_path):
    """The README's main job through its command line, shortened (2 of its 4 layers, 60 of its
    300 GRPO steps): SFT warm start then GRPO with FP4 rollouts and TRACE hints must raise the
    reward on one-digit addition from a fixed seed. In its own process at LLVM optimization
    level 1 (the suite compiles at level 0, which runs these 180 steps ~3x slower: ~100 s
    against ~60 s on the 2-core machine)."""
    import subprocess
    import sys

    env = dict(os.environ, XLA_FLAGS=os.environ["XLA_FLAGS"].replace(
        "--xla_backend_optimization_level=0", "--xla_backend_optimization_level=1"))
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-m", "trace_jax.main", "--config=configs/tiny.py",
                          "--config.model.n_layers=2",  # layer 1 carries the hints (last half)
                          "--config.train.steps=60", "--config.checkpoint.every=1000",
                          f"--config.workdir={tmp_path}"],
                         cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    r = [m["reward_mean"] for m in read_metrics(tmp_path)]
    assert len(r) == 60
    early, late = np.mean(r[:20]), np.mean(r[-20:])
    assert late > early + 0.05, (early, late)  # measured: 0.37 over the first 20, 0.47 the last


SHARDED_SCENARIO = """
import json, os, sys
# keep the suite's XLA flags (conftest: level-0 CPU codegen compiles faster)
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8")
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.getcwd())
from tests.test_train import small, read_metrics
from trace_jax import run as RUN
root = sys.argv[1]
sft = small(os.path.join(root, "mesh"), **{"train.steps": 0})  # the SFT warm start alone
sft.mesh.shape = (4, 1, 1, 1)  # data parallel on 4 of the 8 devices
RUN.run(sft)
sharded = small(os.path.join(root, "mesh"), **{"train.steps": 2})
sharded.mesh.shape = (2, 4, 1, 1)  # resume its checkpoint on another mesh: data x FSDP
RUN.run(sharded)
err = ""
try:
    bad = small(os.path.join(root, "bad"))
    bad.mesh.shape = (1, 8, 1, 1)
    bad.rollout.batch_prompts = 3  # 6 trajectories on 8 devices
    RUN.run(bad)
except ValueError as e:
    err = str(e)
print("RESULT " + json.dumps(err))
"""


def test_sharded_run_matches_single_device_and_restores_onto_another_mesh(tmp_path,
                                                                          finished_run):
    """8 fake CPU devices: the SFT warm start, data parallel on 4 devices, writes a checkpoint
    that resumes on a different mesh (data x fsdp over all 8), where the loop with trajectories
    over data x fsdp and FSDP params gives the single-device metrics (to float tolerance).
    Runs in its own process: a multi-device XLA CPU program is compiled from a clean state
    (once, late in a long suite, XLA's CPU compiler crashed compiling it in-process). The
    single-device reference is the shared 4-step run: its first two steps are those of a 2-step
    run (warmup 2: the learning rates of steps 0 and 1 do not depend on the step count), and
    its SFT steps those of the SFT-only run (the RL optimizer state starts fresh either way)."""
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", SHARDED_SCENARIO, str(tmp_path)], cwd=repo,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    err = json.loads(out.stdout.strip().splitlines()[-1][len("RESULT "):])
    assert "not divisible" in err
    assert f"resumed from checkpoint step 2 in {tmp_path / 'mesh'}" in out.stdout  # not a fresh run
    assert small(tmp_path).train.warmup_steps >= 2  # else steps=2 and steps=4 differ at step 1
    a, b = read_metrics(finished_run), read_metrics(tmp_path / "mesh")
    assert [m["step"] for m in b] == [0, 1]
    # Float noise between the two runs (measured): loss 1.6e-8 at step 0 and 5.5e-7 at step 1
    # (|loss| ~1.45e-3), entropy 1e-6 and 5e-6 (~4.09). The former rtol=2e-2 / atol=1e-4 (~9% of
    # the loss, 0.08 of the entropy) passed a sharded run whose RL steps left the params
    # unchanged (loss 6.6e-6 off at step 1, entropy 4.1e-5), and the rewards compared exactly
    # are 0.0 in both runs here (an untrained policy).
    tol = {"loss": dict(rtol=1e-3, atol=1e-6), "entropy": dict(rtol=1e-5, atol=0),
           "code_agreement_hinted": dict(rtol=1e-6, atol=0)}
    for ma, mb in zip(a, b[:2]):
        assert ma["reward_mean"] == mb["reward_mean"]
        for k, t in tol.items():
            np.testing.assert_allclose(mb[k], ma[k], err_msg=k, **t)
        # the train-rollout gap is float noise itself: same (small) order, not the same value
        assert mb["logprob_gap_mean"] < 10 * ma["logprob_gap_mean"] + 1e-3
    # ... and the two RL steps move the params as on one device: the update from the checkpoint
    # after SFT (global step 2) to the one after RL step 1 (global step 4). Adam turns float
    # noise in near-zero gradients into lr-sized steps of single weights, so the updates are
    # compared as wholes: they differed by 6.6% of the update's norm (a run that does not
    # update: 100%).
    from trace_jax import checkpoint

    def params(run, step):
        p = checkpoint.load_params(str(run / "checkpoints" / str(step)), small(tmp_path))
        return jax.tree.map(lambda x: np.asarray(x, np.float64), p)

    update = {run: jax.tree.map(np.subtract, params(run, 4), params(run, 2))
              for run in (finished_run, tmp_path / "mesh")}
    norm = lambda t: float(np.sqrt(sum(np.sum(x * x) for x in jax.tree.leaves(t))))  # noqa: E731
    want = norm(update[finished_run])
    gap = norm(jax.tree.map(np.subtract, update[tmp_path / "mesh"], update[finished_run]))
    assert want > 0 and gap < 0.25 * want, (gap, want)


def _toy_batch(tmp_path, loss_agg, rows=None, in_loss=None, router_z_coef=1e-4):
    """A bf16-variant experiment (f32 activations, no load-balancing loss), its params and a
    4-row batch (response lengths 1, 4, 2, 3) or the given ``rows`` of it. (The load-balancing
    loss is a product of per-batch means: no micro-batching reproduces it exactly; the z loss
    averages every token, so a row subset changes it; bf16 activations round differently at
    different batch shapes.)"""
    from trace_jax import experiment as X
    from trace_jax import model as M
    from trace_jax import rollout as R

    c = small(tmp_path, **{"train.loss_agg": loss_agg, "train.router_aux_coef": 0.0,
                           "train.router_z_coef": router_z_coef, "model.dtype": "float32"})
    exp = X.build(c, "bf16")
    params = M.init_params(exp.cfg, jax.random.key(0))
    B, T = 4, 8
    toks = jax.random.randint(jax.random.key(1), (B, T), 1, exp.cfg.vocab_size)
    logits, aux, _ = M.forward(params, toks, cfg=exp.cfg, numerics=exp.train_numerics)
    lens = np.array([1, 4, 2, 3])  # micro-batches of 2: [1, 4] and [2, 3] response tokens
    resp = jnp.asarray(np.arange(T)[None] >= T - lens[:, None])
    lp = R.token_logprobs(logits, toks) + 0.1 * jax.random.normal(jax.random.key(2), (B, T))
    batch = TR.Batch(toks, resp, jnp.ones((B, T), bool), lp, jnp.asarray([1.0, -1.0, 0.5, -0.5]),
                     {}, jnp.swapaxes(aux.experts, 0, 1), resp, {},
                     None if in_loss is None else jnp.asarray(in_loss))
    if rows is not None:
        batch = jax.tree.map(lambda x: x[np.asarray(rows)], batch)
    return exp, RUN.train_config(c), params, batch


def _sgd_step(exp, tc, params, batch, micro_batches):
    """(new params, loss, pg_loss, metrics) of one rl_step with SGD at lr 1 (new params = params
    - grads)."""
    opt = optax.sgd(1.0)
    st = TR.TrainState(jax.tree.map(jnp.copy, params), opt.init(params))
    st, m, _ = TR.rl_step(st, batch, None, cfg=exp.cfg, numerics=exp.train_numerics,
                          tc=dataclasses.replace(tc, micro_batches=micro_batches), opt=opt,
                          max_len=batch.tokens.shape[1])
    return st.params, float(m["loss"]), float(m["pg_loss"]), jax.tree.map(np.asarray, m)


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean"])
def test_trajectories_out_of_the_loss_are_as_if_absent(loss_agg, tmp_path):
    """train.truncated=mask: trajectories with ``in_loss`` False give the update of the batch
    without them (their tokens leave the loss's divisor too), with or without micro-batches."""
    exp, tc, params, masked = _toy_batch(tmp_path, loss_agg, in_loss=[True, False, True, False],
                                         router_z_coef=0.0)
    _, _, _, kept = _toy_batch(tmp_path, loss_agg, rows=[0, 2], router_z_coef=0.0)
    want = _sgd_step(exp, tc, params, kept, 1)
    for n in (1, 2):
        got = _sgd_step(exp, tc, params, masked, n)
        assert got[2] == pytest.approx(want[2], rel=1e-5, abs=1e-7)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                     got[0], want[0])


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean"])
def test_micro_batches_give_the_full_batch_gradient(loss_agg, tmp_path):
    """train.micro_batches accumulates the full batch's gradient: with token_mean each
    micro-batch's policy loss counts by its response tokens (a 1-token and a 4-token response in
    different micro-batches weigh as in one batch), not as a mean of per-micro-batch means. The
    logged alignment metrics are the full batch's too (they were means of the micro-batches'
    means: 3x off in a case like this), and a micro-batch with no loss tokens does not count."""
    exp, tc, params, batch = _toy_batch(tmp_path, loss_agg)
    out = {n: _sgd_step(exp, tc, params, batch, n) for n in (1, 2, 4)}
    same_metrics = ("logprob_gap_mean", "kl_k3", "is_clip_frac", "entropy", "is_weight_mean",
                    "routing_agreement", "logprob_gap_max")
    for n in (2, 4):
        assert out[n][1] == pytest.approx(out[1][1], rel=1e-5, abs=1e-7)
        assert out[n][2] == pytest.approx(out[1][2], rel=1e-5, abs=1e-7)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                     out[n][0], out[1][0])
        for k in same_metrics:
            assert out[n][3][k] == pytest.approx(out[1][3][k], rel=1e-5, abs=1e-7), (n, k)
    # rows 0 and 1 out of the loss: micro-batch 0 of 2 has no loss tokens
    exp, tc, params, masked = _toy_batch(tmp_path, loss_agg, in_loss=[False, False, True, True])
    one, two = (_sgd_step(exp, tc, params, masked, n)[3] for n in (1, 2))
    assert two["is_weight_mean"] == pytest.approx(one["is_weight_mean"], rel=1e-5)


def test_truncated_mask_runs_end_to_end(tmp_path):
    """train.truncated=mask through the loop: an untrained policy's responses mostly run to
    max_new_tokens, those leave the loss, and the steps stay finite."""
    RUN.run(small(tmp_path, **{"train.truncated": "mask", "sft.steps": 0, "train.steps": 2}))
    ms = read_metrics(tmp_path)
    assert len(ms) == 2 and min(m["finished_frac"] for m in ms) < 1
    assert all(np.isfinite(m["loss"]) for m in ms)


def test_rl_runs_sample_at_temperature_one(tmp_path):
    """The loss treats responses as samples of the policy itself: RL refuses tempered or
    truncated sampling, naming the fields (an SFT-only run does not sample and may keep them)."""
    for field, value in (("temperature", 0.7), ("top_k", 5), ("top_p", 0.9)):
        with pytest.raises(ValueError, match=f"{field}={value}.*temperature 1, no truncation"):
            RUN.run(small(tmp_path, **{f"rollout.{field}": value}))
    assert not os.path.exists(tmp_path / "metrics.jsonl")


def test_rollout_weights_follow_model_dtype(tmp_path):
    """The rollout gets the trainer's weights in ``model.dtype`` (float32 here): a BF16-numerics
    run then samples from exactly the trainer's policy (rollout weights rounded to bf16 left a
    log-prob gap of ~6e-3)."""
    RUN.run(small(tmp_path, variant="bf16", **{"model.dtype": "float32", "sft.steps": 0,
                                               "train.steps": 2}))
    gaps = [m["logprob_gap_max"] for m in read_metrics(tmp_path)]
    assert len(gaps) == 2 and max(gaps) < 1e-4, gaps


def test_expert_hidden_hints_need_the_rollouts_experts():
    """expert_hidden hints belong to the rollout's (token, expert) slots: a forward given them
    without hint_experts (which would apply them to whatever experts its routers pick) is
    refused."""
    from tests._params import init_params
    from trace_jax import model as M
    from trace_jax import numerics as nx

    c = small("/tmp/unused")
    cfg = M.ModelConfig.from_config(c.model)
    params = init_params(cfg, jax.random.key(0))
    roll = nx.make_numerics("fp4_rollout", cfg.n_layers, hint_layers="all")
    toks = jnp.ones((2, 4), jnp.int32)
    _, aux, _ = M.forward(M.pack_params(params, roll), toks, cfg=cfg, numerics=roll,
                          capture_hints=True)
    assert any(k.endswith("moe/expert_hidden") for k in aux.hints)
    with pytest.raises(ValueError, match="expert_hidden hints need hint_experts"):
        M.forward(params, toks, cfg=cfg, numerics=roll.with_mode("fp4_qat"), hints=aux.hints)
    M.forward(params, toks, cfg=cfg, numerics=roll.with_mode("fp4_qat"), hints=aux.hints,
              hint_experts_LxBxTxK=aux.experts)


def test_rtn_reports_code_agreement_over_the_configs_hint_sites(tmp_path):
    """Vanilla QAT follows no hints, yet its code agreement is split by the config's hint sites
    as TRACE's is: its "hinted" column is the agreement at the sites TRACE would hint (it was
    NaN) and its "unhinted" column covers the same sites as TRACE's (it covered every site, so
    the two variants' unhinted columns measured different sites)."""
    from trace_jax import experiment as X

    c = small(tmp_path, variant="fp4_qat_rtn", **{"sft.steps": 0, "train.steps": 1})
    exp = X.build(c)
    assert not exp.train_numerics.hinted and exp.hint_sites == X.build(
        small(tmp_path)).train_numerics.hinted
    RUN.run(c)
    (m,) = read_metrics(tmp_path)
    assert 0.0 <= m["code_agreement_hinted"] <= 1.0 and 0.0 <= m["code_agreement_unhinted"] <= 1.0


def test_sft_load_balancing_ignores_padding():
    """The SFT loss (cross-entropy + router load balancing) of a right-padded batch does not
    change when more pad columns are appended: the load-balancing loss counts only each row's
    tokens up to its last loss token (it used to average the pads' routing in, ~10% of the
    router gradient on the tiny config's batch)."""
    c = small("/unused")
    exp = RUN.X.build(c)
    toks, mask = RUN.sft_batch(exp, 0, 8)
    pad = jnp.full((toks.shape[0], 8), exp.tokenizer.pad_id, toks.dtype)
    state = RUN.initial_state(exp, c, RUN.train_config(c))
    opt = RUN.sft_optimizer(c)
    ts = TR.TrainState(state["params"], opt.init(state["params"]))
    kw = dict(cfg=exp.cfg, numerics=exp.train_numerics, opt=opt, router_aux_coef=1.0)
    _, loss, _ = TR.sft_step(jax.tree.map(jnp.copy, ts), toks, mask, **kw)
    _, longer, _ = TR.sft_step(ts, jnp.concatenate([toks, pad], 1),
                               jnp.concatenate([mask, jnp.zeros_like(pad, bool)], 1), **kw)
    np.testing.assert_allclose(float(longer), float(loss), rtol=1e-5)


@pytest.mark.parametrize("over", [{}, {"train.routing_replay": False}])
def test_kl_to_a_reference_equal_to_the_policy_is_zero(tmp_path, over):
    """The KL reference runs the policy's forward (hints, routing replay or not): with the
    reference's params equal to the policy's and zero advantages the loss is exactly 0. (The
    reference used to skip the hints, RTN where the policy follows them, and always replay the
    rollout's experts: a KL term made of the rollout-trainer mismatch.) The rollout samples
    with slightly drifted params, as a GPU rollout's kernels differ from the trainer."""
    from trace_jax import experiment as X
    from trace_jax import rollout as R

    c = small(tmp_path, **{"sft.steps": 0, "train.kl_coef": 0.1, **over})  # (the trace variant)
    tc, exp = RUN.train_config(c), X.build(c)
    params = RUN.initial_state(exp, c, tc)["params"]
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(123), len(leaves))
    drift = tree.unflatten([x * (1 + 1e-3 * jax.random.normal(k, x.shape, x.dtype))
                            for x, k in zip(leaves, keys)])
    prompts, lens = R.repeat_prompts(*X.encode_prompts(exp, exp.train_data.batch(0)),
                                     exp.group_size)
    num = exp.rollout_numerics
    rec = dataclasses.replace(num, hinted=exp.train_numerics.hinted) if num.is_fp4 else num
    ro = R.generate(R.sync_weights(drift, num, dtype=exp.cfg.dtype), prompts, lens,
                    jax.random.key(0), cfg=exp.cfg, numerics=rec, sampling=exp.sampling,
                    capture_hints=num.is_fp4)
    batch = TR.make_batch(ro, jnp.zeros(ro.tokens.shape[0]), exp.train_numerics, False)
    st = TR.TrainState(params, optax.sgd(1.0).init(params))
    _, m, _ = TR.rl_step(st, batch, jax.tree.map(jnp.copy, params), cfg=exp.cfg,
                         numerics=exp.train_numerics, tc=tc, opt=optax.sgd(1.0),
                         max_len=exp.sampling.max_new_tokens)
    assert float(m["pg_loss"]) == 0.0
    assert float(m["logprob_gap_mean"]) > 0  # (the rollout did differ from the trainer)
